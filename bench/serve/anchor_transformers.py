"""The anchor for bench/serve: Hugging Face transformers' `generate` behind a minimal HTTP loop
that speaks the same subset of POST /v1/completions as the load client uses (a prompt of
token ids, max_tokens, greedy, stream with include_usage). One request generates at a time
(a lock around generate): what a plain "model.generate in a web handler" server does.

    python3 bench/serve/anchor_transformers.py --port 8001 [--device cuda] [--dtype bf16]
        [--dim 768 --layers 12 --heads 12 --ctx 1024 --vocab 50257]

GPT-2 124M shapes by default, random weights (seed 0): the GPU machine has no network, and
speed does not depend on the weights' values. Where transformers is not installed (this
development VM: Debian has torch, not transformers) the same loop runs a plain PyTorch GPT-2
with transformers' kind of KV cache (keys and values concatenated per step), and says so.
"""
import argparse
import math
import json
import queue
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.generation.streamers import BaseStreamer
except ImportError:
    GPT2LMHeadModel = None
    BaseStreamer = object


class TorchGPT(nn.Module):
    """GPT-2 (pre-norm, GELU-tanh MLP, tied head) with a growing KV cache, greedy, for the fallback."""

    def __init__(self, V, T, C, H, L):
        super().__init__()
        self.H = H
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(nn.ModuleDict(dict(ln1=nn.LayerNorm(C), qkv=nn.Linear(C, 3 * C), proj=nn.Linear(C, C),
                                                       ln2=nn.LayerNorm(C), fc=nn.Linear(C, 4 * C), fc2=nn.Linear(4 * C, C)))
                                    for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, ids, past):
        B, n = ids.shape
        start = 0 if past is None else past[0][0].shape[2]
        x = self.wte(ids) + self.wpe(torch.arange(start, start + n, device=ids.device))
        new = []
        for i, b in enumerate(self.blocks):
            q, k, v = b["qkv"](b["ln1"](x)).view(B, n, 3, self.H, -1).permute(2, 0, 3, 1, 4)
            if past is not None:
                k, v = torch.cat([past[i][0], k], 2), torch.cat([past[i][1], v], 2)
            new.append((k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=past is None) if hasattr(F, "scaled_dot_product_attention") \
                else torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + (torch.full((n, k.shape[2]), float("-inf"), device=ids.device).triu(1) if past is None else 0), -1) @ v
            x = x + b["proj"](y.transpose(1, 2).reshape(B, n, -1))
            x = x + b["fc2"](F.gelu(b["fc"](b["ln2"](x)), approximate="tanh"))
        return self.ln_f(x[:, -1]) @ self.wte.weight.t(), new

    def generate(self, ids, max_new_tokens, streamer, **_):
        past = None
        for _ in range(max_new_tokens):
            logits, past = self(ids, past)
            ids = logits.argmax(-1, keepdim=True)
            streamer.put(ids)
        streamer.end()


class QueueStreamer(BaseStreamer):
    """Each new token id into a queue (generate calls put with the prompt first, then per token)."""

    def __init__(self):
        self.q = queue.Queue()
        self.seen_prompt = GPT2LMHeadModel is None  # the fallback never puts the prompt

    def put(self, value):
        if not self.seen_prompt:
            self.seen_prompt = True
            return
        for t in value.reshape(-1).tolist():
            self.q.put(t)

    def end(self):
        self.q.put(None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8001)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--threads", type=int, default=0)
    for k, v in dict(dim=768, layers=12, heads=12, ctx=1024, vocab=50257).items():
        ap.add_argument("--" + k, type=int, default=v)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    if GPT2LMHeadModel is not None:
        kind = "transformers"
        model = GPT2LMHeadModel(GPT2Config(vocab_size=a.vocab, n_positions=a.ctx, n_embd=a.dim, n_layer=a.layers,
                                           n_head=a.heads))
    else:
        kind = "torch fallback (no transformers)"
        model = TorchGPT(a.vocab, a.ctx, a.dim, a.heads, a.layers)
    model = model.to(a.device, dtype).eval()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            body = b'{"status":"ok"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            ids = torch.tensor([req["prompt"]], device=a.device)
            n = int(req.get("max_tokens", 16))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def send(obj):
                data = ("data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n\n").encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            streamer = QueueStreamer()
            made = 0
            def run():
                with torch.inference_mode():
                    model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                                   do_sample=False, streamer=streamer, pad_token_id=0)

            with lock:
                worker = threading.Thread(target=run)
                if True:
                    worker.start()
                    while (t := streamer.q.get()) is not None:
                        made += 1
                        send({"object": "text_completion", "created": int(time.time()), "model": "gpt2",
                              "choices": [{"index": 0, "text": "t%d " % t, "logprobs": None, "finish_reason": None}]})
                    worker.join()
            send({"object": "text_completion", "choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
            send({"object": "text_completion", "choices": [],
                  "usage": {"prompt_tokens": ids.shape[1], "completion_tokens": made, "total_tokens": ids.shape[1] + made}})
            send("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    ThreadingHTTPServer.request_queue_size = 256  # 32 clients connect at once (the default backlog is 5)
    server = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    print(f"anchor: listening on http://127.0.0.1:{a.port} ({kind}, {a.device}, {a.dtype})", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
