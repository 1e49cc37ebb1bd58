// `alk serve` end to end (ctest Serve.EndToEnd): a tiny GPT trained here, served on 127.0.0.1
// at a free port, called with curl, the official `openai` npm client and plain HTTP.
//   node tests/serve/serve_e2e.mjs ALK_BINARY OPENAI_NPM_PREFIX
// Every wait is a bounded poll; the whole run is bounded by a 240 s watchdog.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';

const [alk, npmPrefix] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(npmPrefix), 'node_modules', 'x.js'));
const OpenAI = require('openai');
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'alk-serve-e2e-'));
const servers = [];
const watchdog = setTimeout(() => fail(new Error('watchdog: the test ran over 240 s')), 240_000);
function fail(e) {
  console.error('FAIL:', e && e.stack ? e.stack : e);
  for (const s of servers) s.proc.kill('SIGKILL');
  process.exit(1);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
function step(name) { console.log('--', name); }

// ---- a tiny model ----
const corpus = path.join(work, 'corpus.txt');
let text = '';
for (let i = 0; i < 400; ++i) text += i % 3 ? 'the cat sees the moon. ' : 'a dog finds the road. ';
fs.writeFileSync(corpus, text);
const run = path.join(work, 'tiny');
const trained = spawnSync(alk, ['train', '--task', 'gpt', '--corpus', corpus, '--out', run, '--device', 'cpu',
  '--steps', '6', '--ctx', '128', '--dim', '16', '--heads', '2', '--layers', '1', '--vocab-size', '280',
  '--batch', '2', '--eval-every', '6', '--ckpt-every', '6', '--sample-tokens', '0'], { encoding: 'utf8' });
assert.equal(trained.status, 0, trained.stderr);
const keyFile = path.join(work, 'keys.txt');
fs.writeFileSync(keyFile, '# keys\nsk-test-key\n');

// What `alk generate` makes greedily from a prompt: the reference every answer is held to.
function generateAlone(prompt, tokens) {
  const r = spawnSync(alk, ['generate', '--from', run, '--prompt', prompt, '--tokens', String(tokens),
    '--temperature', '0', '--device', 'cpu'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  assert.ok(r.stdout.startsWith(prompt));
  return r.stdout.slice(prompt.length, -1);
}

async function startServer(args, env = {}, source = ['--from', run]) {
  const proc = spawn(alk, ['serve', ...source, '--port', '0', '--device', 'cpu', ...args],
    { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  const server = { proc, log: '', exit: new Promise((r) => proc.on('exit', (code, sig) => r({ code, sig }))) };
  servers.push(server);
  proc.stderr.setEncoding('utf8');
  proc.stderr.on('data', (d) => { server.log += d; });
  for (let i = 0; i < 300 && !server.url; ++i) {
    const m = server.log.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
    if (m) server.url = m[1];
    else await sleep(100);
  }
  assert.ok(server.url, 'no URL printed: ' + server.log);
  for (let i = 0; i < 300; ++i) {
    const r = await fetch(server.url + '/health');
    if (r.status === 200) return server;
    assert.equal(r.status, 503);  // loading
    await sleep(100);
  }
  throw new Error('the server never became healthy: ' + server.log);
}

function curl(args) {
  const r = spawnSync('curl', ['-sS', '--max-time', '60', ...args], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout;
}
// curl -i: [status, headers text, body]
function curlFull(args) {
  const out = curl(['-i', ...args]);
  const at = out.indexOf('\r\n\r\n');
  return [Number(out.slice(9, 12)), out.slice(0, at), out.slice(at + 4)];
}
function assertOpenAIError(body, status, expectParam) {
  const e = JSON.parse(body).error;
  assert.equal(typeof e.message, 'string');
  assert.equal(typeof e.type, 'string');
  assert.ok('param' in e && 'code' in e);
  if (expectParam !== undefined) assert.equal(e.param, expectParam, body);
}
function sseEvents(body) {
  return body.split('\n\n').filter((s) => s.startsWith('data: ')).map((s) => s.slice(6));
}
async function metric(server, name) {
  const t = await (await fetch(server.url + '/metrics')).text();
  const m = t.match(new RegExp('^' + name.replace(/[{}"]/g, (c) => '\\' + c) + ' (\\S+)$', 'm'));
  assert.ok(m, name + ' missing from /metrics');
  return Number(m[1]);
}
async function waitFor(what, cond) {
  for (let i = 0; i < 200; ++i) {
    if (await cond()) return;
    await sleep(50);
  }
  throw new Error('waited 10 s for ' + what);
}
// A streaming request over plain HTTP, resolved at its first data chunk with the request handle.
function openStream(server, body) {
  return new Promise((resolve, reject) => {
    const req = http.request(server.url + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' } },
      (res) => {
        let all = '';
        const done = new Promise((r) => { res.on('end', () => r(all)); res.on('error', () => r(all)); res.on('close', () => r(all)); });
        res.setEncoding('utf8');
        res.once('data', () => resolve({ req, res, done }));
        res.on('data', (d) => { all += d; });
      });
    req.on('error', reject);
    req.end(JSON.stringify({ ...body, stream: true }));
  });
}

async function main() {
  const prompts = ['the cat', 'a dog', 'the moon', 'road'];
  const alone = Object.fromEntries(prompts.map((p) => [p, generateAlone(p, 12)]));

  // ---- server A: keys, 4 slots ----
  const a = await startServer(['--api-key-file', keyFile, '--slots', '4', '--max-queue', '64', '--name', 'tiny']);
  const auth = ['-H', 'Authorization: Bearer sk-test-key', '-H', 'Content-Type: application/json'];

  step('curl: completions, whole and streamed, equal alk generate');
  const whole = JSON.parse(curl([...auth, a.url + '/v1/completions', '-d',
    JSON.stringify({ model: 'tiny', prompt: 'the cat', max_tokens: 12, temperature: 0 })]));
  assert.equal(whole.object, 'text_completion');
  assert.equal(whole.choices[0].text, alone['the cat']);
  assert.equal(whole.choices[0].finish_reason, 'length');
  assert.equal(whole.usage.completion_tokens, 12);
  assert.equal(whole.usage.total_tokens, whole.usage.prompt_tokens + 12);
  const streamed = sseEvents(curl(['-N', ...auth, a.url + '/v1/completions', '-d',
    JSON.stringify({ prompt: 'the cat', max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true } })]));
  assert.equal(streamed.at(-1), '[DONE]');
  const chunks = streamed.slice(0, -1).map((s) => JSON.parse(s));
  assert.equal(chunks.filter((c) => c.choices.length).map((c) => c.choices[0].text).join(''), alone['the cat']);
  assert.equal(chunks.at(-2).choices[0].finish_reason, 'length');
  assert.equal(chunks.at(-1).usage.completion_tokens, 12);
  assert.deepEqual(chunks.at(-1).choices, []);

  step('curl: errors have OpenAI\'s shape');
  let [status, headers, body] = curlFull([a.url + '/v1/completions', '-d', '{"prompt":"x"}']);
  assert.equal(status, 401); assertOpenAIError(body);
  [status, , body] = curlFull(['-H', 'Authorization: Bearer sk-test-kez', a.url + '/v1/completions', '-d', '{"prompt":"x"}']);
  assert.equal(status, 401); assertOpenAIError(body);
  [status, , body] = curlFull([...auth, a.url + '/v1/completions', '-d', '{"prompt": "x", ']);
  assert.equal(status, 400); assertOpenAIError(body, 400, null);
  const badUtf8 = path.join(work, 'bad.json');
  fs.writeFileSync(badUtf8, Buffer.concat([Buffer.from('{"prompt": "'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]));
  [status, , body] = curlFull([...auth, a.url + '/v1/completions', '--data-binary', '@' + badUtf8]);
  assert.equal(status, 400); assertOpenAIError(body);
  [status, , body] = curlFull([...auth, a.url + '/v1/completions', '-d', '{"prompt":"x","max_tokens":-1}']);
  assert.equal(status, 400); assertOpenAIError(body, 400, 'max_tokens');
  [status, , body] = curlFull([...auth, a.url + '/v1/completions', '-d', '{"prompt":"x","max_tokens":1e400}']);
  assert.equal(status, 400); assertOpenAIError(body);
  [status, , body] = curlFull([...auth, a.url + '/v1/completions', '-d', '{"prompt":[1,2,99999]}']);
  assert.equal(status, 400); assertOpenAIError(body, 400, 'prompt');
  [status, , body] = curlFull([...auth, a.url + '/v1/completions', '-d', '{"model":"gpt-9","prompt":"x"}']);
  assert.equal(status, 404); assertOpenAIError(body, 404, 'model');
  const huge = path.join(work, 'huge.json');
  fs.writeFileSync(huge, JSON.stringify({ prompt: 'x'.repeat(2 << 20) }));
  [status, , body] = curlFull([...auth, '-H', 'Expect:', a.url + '/v1/completions', '--data-binary', '@' + huge]);
  assert.equal(status, 413); assertOpenAIError(body);
  [status, , body] = curlFull([...auth, a.url + '/v1/completions', '-d', JSON.stringify({ prompt: 'the cat '.repeat(200) })]);
  assert.equal(status, 400); assertOpenAIError(body, 400, 'prompt');
  assert.equal(JSON.parse(body).error.code, 'context_length_exceeded');

  step('models, tokenize, detokenize, health');
  const models = JSON.parse(curl([...auth, a.url + '/v1/models']));
  assert.equal(models.data[0].id, 'tiny');
  const toks = JSON.parse(curl([...auth, a.url + '/tokenize', '-d', '{"content":"the cat sees"}'])).tokens;
  assert.ok(toks.length > 0 && toks.length < 12);
  assert.equal(JSON.parse(curl([...auth, a.url + '/detokenize', '-d', JSON.stringify({ tokens: toks })])).content, 'the cat sees');

  step('openai client: completions and chat, whole and streamed; errors as its error types');
  const client = new OpenAI({ apiKey: 'sk-test-key', baseURL: a.url + '/v1', maxRetries: 0, timeout: 60_000 });
  const c1 = await client.completions.create({ model: 'tiny', prompt: 'the cat', max_tokens: 12, temperature: 0 });
  assert.equal(c1.choices[0].text, alone['the cat']);
  let streamedText = '';
  for await (const chunk of await client.completions.create({ model: 'tiny', prompt: 'a dog', max_tokens: 12, temperature: 0, stream: true }))
    streamedText += chunk.choices[0]?.text ?? '';
  assert.equal(streamedText, alone['a dog']);
  // Chat: the plain template (the run has no tokenizer_config.json) renders "user: ...\n\nassistant:".
  const chatPrompt = 'user: the cat\n\nassistant:';
  const chatAlone = generateAlone(chatPrompt, 10);
  const ch = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'the cat' }], max_tokens: 10, temperature: 0, logprobs: true });
  assert.equal(ch.object, 'chat.completion');
  assert.equal(ch.choices[0].message.role, 'assistant');
  assert.equal(ch.choices[0].message.content, chatAlone);
  assert.equal(ch.choices[0].logprobs.content.length, 10);
  for (const lp of ch.choices[0].logprobs.content) assert.ok(lp.logprob <= 0 && Number.isFinite(lp.logprob));
  // Alternatives: greedy's token is the most likely one.
  const alt = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'the cat' }], max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 3 });
  for (const lp of alt.choices[0].logprobs.content) {
    assert.equal(lp.top_logprobs.length, 3);
    assert.equal(lp.top_logprobs[0].logprob, lp.logprob);
    assert.ok(lp.top_logprobs[0].logprob >= lp.top_logprobs[1].logprob && lp.top_logprobs[1].logprob >= lp.top_logprobs[2].logprob);
  }
  await assert.rejects(client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'x' }], logprobs: true, top_logprobs: 6 }), OpenAI.BadRequestError);
  let chatStreamed = '', role = '', usage = null;
  for await (const chunk of await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'the cat' }], max_tokens: 10, temperature: 0, stream: true, stream_options: { include_usage: true } })) {
    if (chunk.usage) usage = chunk.usage;
    const d = chunk.choices[0]?.delta;
    if (d?.role) role = d.role;
    chatStreamed += d?.content ?? '';
  }
  assert.equal(chatStreamed, chatAlone);
  assert.equal(role, 'assistant');
  assert.equal(usage.completion_tokens, 10);
  const stopAt = alone['the cat'].slice(3, 5);
  const stopped = await client.completions.create({ model: 'tiny', prompt: 'the cat', max_tokens: 12, temperature: 0, stop: [stopAt] });
  assert.equal(stopped.choices[0].text, alone['the cat'].slice(0, alone['the cat'].indexOf(stopAt)));
  assert.equal(stopped.choices[0].finish_reason, 'stop');
  await assert.rejects(client.completions.create({ model: 'tiny', prompt: 'x', max_tokens: -1 }), OpenAI.BadRequestError);
  await assert.rejects(client.completions.create({ model: 'gpt-9', prompt: 'x' }), OpenAI.NotFoundError);
  const badKey = new OpenAI({ apiKey: 'sk-wrong', baseURL: a.url + '/v1', maxRetries: 0 });
  await assert.rejects(badKey.completions.create({ model: 'tiny', prompt: 'x' }), OpenAI.AuthenticationError);

  step('32 concurrent greedy streams: each the text it has alone');
  const results = await Promise.all(Array.from({ length: 32 }, async (_, i) => {
    const p = prompts[i % prompts.length];
    let t = '';
    for await (const chunk of await client.completions.create({ model: 'tiny', prompt: p, max_tokens: 12, temperature: 0, stream: true }))
      t += chunk.choices[0]?.text ?? '';
    return [p, t];
  }));
  for (const [p, t] of results) assert.equal(t, alone[p], 'concurrent stream for ' + JSON.stringify(p));
  assert.ok((await metric(a, 'alk_generation_tokens_total')) >= 32 * 12);
  assert.equal(await metric(a, 'alk_slots_busy'), 0);

  // ---- server B: one slot, one queue place, each step slowed so the test can act mid-generation ----
  const b = await startServer(['--slots', '1', '--max-queue', '1'], { ALK_SERVE_STEP_DELAY_MS: '25' });

  step('a client that disconnects mid-stream frees its slot');
  const s1 = await openStream(b, { prompt: 'the cat', max_tokens: 100, temperature: 0 });
  await waitFor('the slot to be busy', async () => (await metric(b, 'alk_slots_busy')) === 1);
  s1.req.destroy();
  await waitFor('the cancellation', async () => (await metric(b, 'alk_requests_cancelled_total')) === 1);
  await waitFor('the slot to be free', async () => (await metric(b, 'alk_slots_busy')) === 0);
  assert.ok((await metric(b, 'alk_generation_tokens_total')) < 100);

  step('queue full: 429 with Retry-After');
  const s2 = await openStream(b, { prompt: 'the cat', max_tokens: 100, temperature: 0 });
  const queued = fetch(b.url + '/v1/completions', { method: 'POST', body: JSON.stringify({ prompt: 'a dog', max_tokens: 12, temperature: 0 }) });
  await waitFor('one request queued', async () => (await metric(b, 'alk_queue_depth')) === 1);
  [status, headers, body] = curlFull([b.url + '/v1/completions', '-d', '{"prompt":"x","max_tokens":2}']);
  assert.equal(status, 429);
  assert.match(headers, /^Retry-After: \d+/mi);
  assertOpenAIError(body);
  await assert.rejects(new OpenAI({ apiKey: 'none', baseURL: b.url + '/v1', maxRetries: 0 }).completions.create({ model: 'tiny', prompt: 'x' }),
    OpenAI.RateLimitError);
  s2.req.destroy();
  const queuedAnswer = await (await queued).json();
  assert.equal(queuedAnswer.choices[0].text, alone['a dog']);

  step('SIGTERM: the running stream finishes, the server exits 0');
  const s3 = await openStream(b, { prompt: 'the moon', max_tokens: 30, temperature: 0 });
  b.proc.kill('SIGTERM');
  const rest = sseEvents(await s3.done);
  assert.equal(rest.at(-1), '[DONE]');
  const finals = rest.slice(0, -1).map((s) => JSON.parse(s));
  assert.equal(finals.at(-1).choices[0].finish_reason, 'length');
  assert.equal(finals.map((c) => c.choices[0].text).join(''), generateAlone('the moon', 30));
  const exited = await b.exit;
  assert.equal(exited.code, 0, b.log);

  a.proc.kill('SIGTERM');
  assert.equal((await a.exit).code, 0, a.log);

  step('--model: a Hugging Face directory (Qwen2 fixture) and its own chat template');
  const hfDir = path.join(path.dirname(new URL(import.meta.url).pathname), '..', 'fixtures', 'hf', 'qwen2');
  const h = await startServer(['--slots', '2'], {}, ['--model', hfDir]);
  const hc = new OpenAI({ apiKey: 'none', baseURL: h.url + '/v1', maxRetries: 0 });
  assert.equal((await hc.models.list()).data[0].id, 'qwen2');
  const hChat = await hc.chat.completions.create({ model: 'qwen2', messages: [{ role: 'user', content: 'hi' }], max_tokens: 6, temperature: 0 });
  const hText = await hc.completions.create({ model: 'qwen2', prompt: '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n', max_tokens: 6, temperature: 0 });
  assert.ok(hChat.usage.completion_tokens >= 1);
  assert.equal(hChat.usage.prompt_tokens, hText.usage.prompt_tokens);
  assert.equal(hChat.choices[0].message.content, hText.choices[0].text);
  h.proc.kill('SIGTERM');
  assert.equal((await h.exit).code, 0, h.log);
  clearTimeout(watchdog);
  fs.rmSync(work, { recursive: true, force: true });
  console.log('serve e2e: all passed');
}

main().catch(fail);
