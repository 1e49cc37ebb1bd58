"""A bounded load run against an OpenAI-compatible server (alk serve, or the anchor): at each
concurrency C, C client threads each send R streaming /v1/completions requests one after
another (a prompt of P token ids, greedy, max_tokens N). Per level it prints one line:

  LOAD name=NAME c=C requests=.. tokens=.. seconds=.. tok_s=.. ttft_p50_ms=.. ttft_p99_ms=.. itl_p50_ms=.. itl_p99_ms=..

tok_s: generated tokens (the servers' usage) over the level's wall time; ttft: from sending a
request to its first token chunk; itl: between a request's consecutive token chunks.

    python3 bench/serve/load.py URL [--name alk] [--levels 1,8,32] [--requests 4] [--tokens 64]
                                [--prompt-tokens 32] [--vocab 256] [--key KEY]
Standard library only (http.client and threads), so it runs wherever python3 does.
"""
import argparse
import http.client
import json
import threading
import time
import urllib.parse


def percentile(xs, p):
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


def one(a, host, port, prompt, stats, lock):
    conn = http.client.HTTPConnection(host, port, timeout=600)
    body = json.dumps({"prompt": prompt, "max_tokens": a.tokens, "temperature": 0, "stream": True,
                       "ignore_eos": True, "stream_options": {"include_usage": True}})
    headers = {"Content-Type": "application/json"}
    if a.key:
        headers["Authorization"] = "Bearer " + a.key
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, headers)
    res = conn.getresponse()
    if res.status != 200:
        raise RuntimeError("HTTP %d: %s" % (res.status, res.read()[:300]))
    ttft, gaps, made, last = None, [], 0, None
    while True:
        line = res.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            made = chunk["usage"]["completion_tokens"]
        if not chunk.get("choices") or not chunk["choices"][0].get("text"):
            continue
        now = time.perf_counter()
        if last is None:
            ttft = now - t0
        else:
            gaps.append(now - last)
        last = now
    conn.close()
    with lock:
        if ttft is not None:
            stats["ttft"].append(ttft)
        stats["itl"].extend(gaps)
        stats["tokens"] += made


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--name", default="alk")
    ap.add_argument("--levels", default="1,8,32")
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--key", default=None)
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    prompt = [(i * 7919 + 13) % a.vocab for i in range(a.prompt_tokens)]
    # One request first, not counted: compilation and caches warm up before anything is timed.
    one(a, u.hostname, u.port, prompt, {"ttft": [], "itl": [], "tokens": 0}, threading.Lock())
    for c in [int(x) for x in a.levels.split(",")]:
        stats, lock, errors = {"ttft": [], "itl": [], "tokens": 0}, threading.Lock(), []

        def client():
            try:
                for _ in range(a.requests):
                    one(a, u.hostname, u.port, prompt, stats, lock)
            except Exception as e:  # reported below; the level then fails
                errors.append(e)

        t0 = time.perf_counter()
        threads = [threading.Thread(target=client) for _ in range(c)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - t0
        if errors:
            raise SystemExit("load: %d clients failed: %s" % (len(errors), errors[0]))
        ms = lambda x: "%.1f" % (x * 1000)
        print("LOAD name=%s c=%d requests=%d tokens=%d seconds=%.2f tok_s=%.1f ttft_p50_ms=%s ttft_p99_ms=%s "
              "itl_p50_ms=%s itl_p99_ms=%s" % (a.name, c, c * a.requests, stats["tokens"], seconds,
                                               stats["tokens"] / seconds, ms(percentile(stats["ttft"], 50)),
                                               ms(percentile(stats["ttft"], 99)), ms(percentile(stats["itl"], 50)),
                                               ms(percentile(stats["itl"], 99))), flush=True)


if __name__ == "__main__":
    main()
