// alk WebGPU runtime: replays a bundle written by `alk export --target webgpu` (or
// alk::webgpu::export_bundle). One ES module, no dependencies; runs in browsers
// (navigator.gpu) and in Node with npm `webgpu` (pass {gpu: create([])}).
//
//   import { load } from './alk_webgpu.mjs';
//   const m = await load('./');                 // plan.json, kernels/, weights.safetensors
//   const loss = await m.step([x, y]);          // inputs as typed arrays or plain arrays
//   m.setLr(1e-3); const logits = await m.forward([ids]);
//   const ids = await m.sample(m.tokenizer.encode('And God'), 100); m.tokenizer.decode(ids);
//   const bytes = await m.save();
//
// WebGPU has no 64-bit types: i64 tensors are i32 on the GPU; inputs are checked to fit.
// Validation errors raised by the device become JavaScript errors naming the kernel.

const STORAGE = 0x80, COPY_SRC = 0x04, COPY_DST = 0x08, MAP_READ = 0x01;  // GPUBufferUsage
const ELEMENT = { f32: 4, i32: 4, u8: 1, bool: 1, f16: 2, bf16: 2 };
const TAG = { f32: 'F32', i32: 'I32', u8: 'U8', bool: 'BOOL', f16: 'F16', bf16: 'BF16' };

const align4 = (n) => Math.max(4, Math.ceil(n / 4) * 4);

function parseSafetensors(bytes) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const n = Number(view.getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + n)));
  const data = 8 + n, out = {};
  for (const [name, e] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    out[name] = { dtype: e.dtype, shape: e.shape, bytes: bytes.subarray(data + e.data_offsets[0], data + e.data_offsets[1]) };
  }
  return out;
}

function writeSafetensors(tensors) {  // [{name, tag, shape, bytes}]
  const header = {}, parts = [];
  let offset = 0;
  for (const t of tensors) {
    header[t.name] = { dtype: t.tag, shape: t.shape, data_offsets: [offset, offset + t.bytes.byteLength] };
    parts.push(t.bytes);
    offset += t.bytes.byteLength;
  }
  let text = JSON.stringify(header);
  while ((text.length + 8) % 8) text += ' ';
  const head = new TextEncoder().encode(text);
  const out = new Uint8Array(8 + head.length + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(head.length), true);
  out.set(head, 8);
  let at = 8 + head.length;
  for (const p of parts) { out.set(p, at); at += p.byteLength; }
  return out;
}

// A typed array (or array) of values -> the bytes of `dtype` on the GPU.
function toGpu(values, dtype, what) {
  const count = values.length;
  if (dtype === 'f32') return new Uint8Array(Float32Array.from(values, Number).buffer);
  if (dtype === 'i32') {
    const out = new Int32Array(count);
    for (let i = 0; i < count; ++i) {
      const v = Number(values[i]);
      if (!Number.isInteger(v) || v < -2147483648 || v > 2147483647)
        throw new Error(`alk: ${what}: element ${i} = ${values[i]} does not fit in i32 (WebGPU has no 64-bit integers)`);
      out[i] = v;
    }
    return new Uint8Array(out.buffer);
  }
  if (dtype === 'u8' || dtype === 'bool') return Uint8Array.from(values, Number);
  throw new Error(`alk: ${what}: inputs of dtype ${dtype} are not supported by the runtime`);
}

function fromGpu(bytes, dtype) {
  const b = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  if (dtype === 'f32') return new Float32Array(b);
  if (dtype === 'i32') return new Int32Array(b);
  if (dtype === 'u8' || dtype === 'bool') return new Uint8Array(b);
  const u16 = new Uint16Array(b), out = new Float32Array(u16.length);
  for (let i = 0; i < u16.length; ++i) {
    if (dtype === 'bf16') out[i] = new Float32Array(new Uint32Array([u16[i] << 16]).buffer)[0];
    else {  // f16
      const h = u16[i], s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 31, f = h & 1023;
      out[i] = e === 0 ? s * f * 2 ** -24 : e === 31 ? (f ? NaN : s * Infinity) : s * (1 + f / 1024) * 2 ** (e - 15);
    }
  }
  return out;
}

// Reads the bindings a shader declares, so the bind group layout is explicit: 'auto'
// layouts drop bindings a shader declares but never reads.
function layoutEntries(source) {
  const entries = [];
  for (const m of source.matchAll(/@binding\((\d+)\)\s*var<storage,\s*(read_write|read)>/g))
    entries.push({ binding: Number(m[1]), visibility: 4 /* COMPUTE */,
                   buffer: { type: m[2] === 'read' ? 'read-only-storage' : 'storage' } });
  return entries;
}

// ---- the tokenizer (the bundle's tokenizer.json says which) ----
// Byte-level BPE as alk's C++ Tokenizer (include/alk/tokenizer.h) encodes: the text is cut at
// special tokens; every other stretch is split by GPT-2's pattern (\s is Unicode White_Space,
// as in the C++ scanner); each piece's UTF-8 bytes start as byte tokens and merges apply by
// rank, lowest first, every occurrence left to right (GPT-2's bpe()). Files: vocab.json (keys
// in GPT-2's byte-to-unicode alphabet), merges.txt, special_tokens.json.
const PIECE = /'(?:[stmd]|re|ve|ll)| ?\p{L}+| ?\p{N}+| ?[^\p{White_Space}\p{L}\p{N}]+|\p{White_Space}+(?!\P{White_Space})|\p{White_Space}+/gu;

// GPT-2's bytes_to_unicode: byte -> the printable code point standing for it.
function byteAlphabet() {
  const printable = (b) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
  const toChar = new Array(256);
  let extra = 0;
  for (let b = 0; b < 256; ++b) toChar[b] = printable(b) ? b : 256 + extra++;
  const toByte = new Map(toChar.map((c, b) => [c, b]));
  return { toChar, toByte };
}

export class Tokenizer {
  // desc: tokenizer.json ({type: 'bytes'} or {type: 'bpe', vocab, merges, special_tokens});
  // fetchText(path) -> string, paths relative to the bundle.
  static async load(desc, fetchText) {
    if (!desc || desc.type === 'bytes') return new Tokenizer(null);
    if (desc.type !== 'bpe') throw new Error(`alk: tokenizer type '${desc.type}' is unknown (bytes, bpe)`);
    const vocab = JSON.parse(await fetchText(desc.vocab));
    const merges = await fetchText(desc.merges);
    const specials = desc.special_tokens ? JSON.parse(await fetchText(desc.special_tokens)) : [];
    return new Tokenizer({ vocab, merges, specials });
  }

  constructor(files) {
    this.type = files ? 'bpe' : 'bytes';
    if (!files) { this.vocabSize = 256; return; }
    const { toByte } = byteAlphabet();
    const entries = Object.entries(files.vocab);
    this.vocabSize = entries.length;
    this.ids = new Map(entries);
    this.specialIds = new Map();
    for (const s of files.specials) {
      if (!this.ids.has(s)) throw new Error(`alk: special token '${s}' is not in vocab.json`);
      this.specialIds.set(s, this.ids.get(s));
    }
    // Per id its bytes: special tokens are their raw text, the rest spell bytes in GPT-2's alphabet.
    const utf8 = new TextEncoder();
    this.bytes = new Array(this.vocabSize);
    for (const [key, id] of entries) {
      if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) throw new Error(`alk: vocab.json: bad id ${id} for '${key}'`);
      if (this.specialIds.has(key)) { this.bytes[id] = utf8.encode(key); continue; }
      const cps = Array.from(key, (c) => toByte.get(c.codePointAt(0)));
      this.bytes[id] = cps.includes(undefined) ? utf8.encode(key) : Uint8Array.from(cps);
    }
    this.byteIds = new Int32Array(256);
    const { toChar } = byteAlphabet();
    for (let b = 0; b < 256; ++b) {
      const id = this.ids.get(String.fromCodePoint(toChar[b]));
      if (id === undefined) throw new Error(`alk: vocab.json lacks the token for byte ${b}`);
      this.byteIds[b] = id;
    }
    this.ranks = new Map();  // left * V + right -> [rank, merged id]
    const lines = files.merges.split('\n').filter((l) => l && !l.startsWith('#version'));
    lines.forEach((line, rank) => {
      const [l, r] = line.split(' ');
      const a = this.ids.get(l), b = this.ids.get(r), m = this.ids.get(l + r);
      if (a === undefined || b === undefined || m === undefined)
        throw new Error(`alk: merges.txt line ${rank + 2} ('${line}') names a token that is not in vocab.json`);
      this.ranks.set(a * this.vocabSize + b, [rank, m]);
    });
    this.cache = new Map();
  }

  _bpe(piece) {
    let ids = this.cache.get(piece);
    if (ids) return ids;
    ids = Array.from(new TextEncoder().encode(piece), (b) => this.byteIds[b]);
    const V = this.vocabSize;
    while (ids.length > 1) {
      let best = null;
      for (let i = 0; i + 1 < ids.length; ++i) {
        const m = this.ranks.get(ids[i] * V + ids[i + 1]);
        if (m && (!best || m[0] < best[0])) best = [m[0], m[1], ids[i], ids[i + 1]];
      }
      if (!best) break;
      const [, merged, a, b] = best, out = [];
      for (let i = 0; i < ids.length;) {
        if (i + 1 < ids.length && ids[i] === a && ids[i + 1] === b) { out.push(merged); i += 2; } else out.push(ids[i++]);
      }
      ids = out;
    }
    if (this.cache.size < 100000) this.cache.set(piece, ids);
    return ids;
  }

  _ordinary(text, out) {
    for (const m of text.matchAll(PIECE)) for (const id of this._bpe(m[0])) out.push(id);
  }

  // text (a string) -> token ids.
  encode(text) {
    if (this.type === 'bytes') return Int32Array.from(new TextEncoder().encode(text));
    const out = [], specials = [...this.specialIds.keys()];
    let pos = 0;
    while (specials.length) {  // leftmost special token, the longest at a tie
      let at = -1, best = '';
      for (const s of specials) {
        const i = text.indexOf(s, pos);
        if (i >= 0 && (at < 0 || i < at || (i === at && s.length > best.length))) { at = i; best = s; }
      }
      if (at < 0) break;
      this._ordinary(text.slice(pos, at), out);
      out.push(this.specialIds.get(best));
      pos = at + best.length;
    }
    this._ordinary(text.slice(pos), out);
    return Int32Array.from(out);
  }

  // ids -> their bytes, and -> text (invalid UTF-8, e.g. a cut multi-byte character, becomes U+FFFD).
  decodeBytes(ids) {
    if (this.type === 'bytes') return Uint8Array.from(ids, (id) => this._check(id));
    const parts = Array.from(ids, (id) => this.bytes[this._check(id)]);
    const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) { out.set(p, at); at += p.length; }
    return out;
  }

  decode(ids) { return new TextDecoder().decode(this.decodeBytes(ids)); }

  _check(id) {
    if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize)
      throw new Error(`alk: cannot decode id ${id}: the vocabulary has ids 0..${this.vocabSize - 1}`);
    return id;
  }
}

export class Model {
  constructor(plan, device, adapterInfo, options = {}) {
    this.plan = plan;
    this.options = options;
    this.device = device;
    this.adapter = adapterInfo;
    this.meta = plan.meta || {};
    this.errors = [];
    this.keep = [];  // objects that must live as long as the model (load() says why)
    device.addEventListener?.('uncapturederror', (e) => this.errors.push(e.error.message));
  }

  async _init(fetchBytes) {
    const { plan, device } = this;
    this.buffers = plan.buffers.map((b, i) =>
      device.createBuffer({ label: b.state || `buffer${i}`, size: align4(b.bytes), usage: STORAGE | COPY_SRC | COPY_DST }));
    const weights = parseSafetensors(new Uint8Array(await fetchBytes(plan.weights)));
    plan.buffers.forEach((b, i) => {
      if (!b.state) return;
      const w = weights[b.state];
      if (!w) throw new Error(`alk: weights.safetensors has no tensor '${b.state}'`);
      const padded = new Uint8Array(align4(w.bytes.byteLength));
      padded.set(w.bytes);
      device.queue.writeBuffer(this.buffers[i], 0, padded);
    });
    // f16: kernels that touch f16 come in two variants with the same buffers (the bytes are
    // alike): array<f16> under 'enable f16;' where the device has shader-f16, else f16 packed
    // in u32 words and computed in f32. this.f16 says which ran and why.
    const variants = plan.shaders_f16 || {}, halves = Object.keys(variants).length;
    const native = halves > 0 && device.features.has('shader-f16') && this.options.f16 !== false;
    this.f16 = {
      mode: halves === 0 ? 'none' : native ? 'native' : 'packed', kernels: halves,
      note: halves === 0 ? 'no f16 kernels'
        : native ? `${halves} kernels use native f16 (shader-f16: array<f16>, f32 accumulation)`
        : `${halves} f16 kernels fall back to f16 packed in u32 words, computed in f32 (` +
          (this.options.f16 === false ? 'native f16 turned off by the caller' : 'the adapter lacks shader-f16') + ')' };
    if (this.f16.mode === 'packed') console.warn(`alk: ${this.f16.note}`);
    this.shaderPaths = plan.shaders.map((p, i) => (native && variants[i]) || p);
    // Shaders and pipelines, each in a validation scope so errors name the kernel.
    const sources = await Promise.all(this.shaderPaths.map(async (p) => new TextDecoder().decode(await fetchBytes(p))));
    this.pipelines = [];
    const checks = [];
    const limit = device.limits.maxStorageBuffersPerShaderStage;
    sources.forEach((code, i) => {
      const label = this.shaderPaths[i];
      const bindings = layoutEntries(code).length;
      if (bindings > limit)
        throw new Error(`alk: kernel ${label} (used by ${this._users(i)}) binds ${bindings} storage buffers; ` +
                        `this adapter allows ${limit} per shader stage`);
      device.pushErrorScope('validation');
      const module = device.createShaderModule({ label, code });
      const layout = device.createBindGroupLayout({ label, entries: layoutEntries(code) });
      const pipeline = device.createComputePipeline({
        label, layout: device.createPipelineLayout({ label, bindGroupLayouts: [layout] }),
        compute: { module, entryPoint: 'main' } });
      this.pipelines.push({ pipeline, layout });
      this.keep.push(module, layout);
      checks.push(device.popErrorScope().then(async (err) => {
        if (!err) return;
        const info = module.getCompilationInfo ? await module.getCompilationInfo() : { messages: [] };
        const where = info.messages.map((m) => `${m.lineNum}:${m.linePos} ${m.message}`).join('; ');
        throw new Error(`alk: kernel ${label} (used by ${this._users(i)}) failed: ${err.message} ${where}`);
      }));
    });
    await Promise.all(checks);
    // Bind groups, per dispatch.
    this.programs = {};
    for (const [name, prog] of Object.entries(plan.programs)) {
      const random = [];
      device.pushErrorScope('validation');
      const dispatches = prog.dispatches.map((d) => {
        const { pipeline, layout } = this.pipelines[d.shader];
        const entries = d.buffers.map((b, j) => ({ binding: j, resource: { buffer: this.buffers[b] } }));
        if (d.params) {
          const params = device.createBuffer({ label: `${d.label} params`, size: align4(d.params.length * 4), usage: STORAGE | COPY_DST });
          device.queue.writeBuffer(params, 0, new Uint32Array(d.params));
          this.keep.push(params);
          entries.push({ binding: d.buffers.length, resource: { buffer: params } });
          // Random kernels: {seed, offset} as u32 pairs; run() moves the offset each step.
          if (d.random) random.push({ params, seed: d.params.slice(0, 2),
                                      offset: BigInt(d.params[2]) + (BigInt(d.params[3]) << 32n) });
        }
        const declared = new Set(layoutEntries(sources[d.shader]).map((e) => e.binding));
        const group = device.createBindGroup({ label: `${d.label} [${this.shaderPaths[d.shader]}]`, layout,
                                               entries: entries.filter((e) => declared.has(e.binding)) });
        return { pipeline, group, groups: d.groups, label: d.label };
      });
      const err = await device.popErrorScope();
      if (err) throw new Error(`alk: program '${name}': ${err.message}`);
      this.programs[name] = { ...prog, dispatches, random, runs: 0 };
    }
    await device.queue.onSubmittedWorkDone();
  }

  _users(shader) {
    const labels = new Set();
    for (const p of Object.values(this.plan.programs))
      for (const d of p.dispatches) if (d.shader === shader) labels.add(d.label);
    return [...labels].slice(0, 3).join(', ');
  }

  // Runs program `name` once; `inputs` (optional) overwrite its inputs first.
  async run(name, inputs) {
    const prog = this.programs[name];
    if (!prog) throw new Error(`alk: the bundle has no program '${name}' (has: ${Object.keys(this.programs).join(', ')})`);
    const { device } = this;
    if (inputs) {
      if (inputs.length !== prog.inputs.length)
        throw new Error(`alk: program '${name}' takes ${prog.inputs.length} inputs, got ${inputs.length}`);
      prog.inputs.forEach((t, k) => {
        const count = t.shape.reduce((a, b) => a * b, 1);
        if (inputs[k].length !== count)
          throw new Error(`alk: input ${k} of '${name}' needs ${count} elements (shape [${t.shape}]), got ${inputs[k].length}`);
        const bytes = toGpu(inputs[k], t.gpu_dtype, `input ${k} of '${name}'`);
        const padded = new Uint8Array(align4(bytes.byteLength));
        padded.set(bytes);
        device.queue.writeBuffer(this.buffers[t.buffer], t.offset * ELEMENT[t.gpu_dtype], padded);
      });
    }
    // Fresh random numbers each step, as the CPU draws them: recorded offset + k * rng_used.
    prog.runs += 1;
    for (const r of prog.random) {
      const off = r.offset + BigInt(prog.rng_used || '0') * BigInt(prog.runs);
      device.queue.writeBuffer(r.params, 0, new Uint32Array([r.seed[0], r.seed[1], Number(off & 0xffffffffn), Number(off >> 32n)]));
    }
    device.pushErrorScope('validation');
    const enc = device.createCommandEncoder({ label: name });
    const pass = enc.beginComputePass({ label: name });
    for (const d of prog.dispatches) {
      pass.setPipeline(d.pipeline);
      pass.setBindGroup(0, d.group);
      pass.dispatchWorkgroups(d.groups[0], d.groups[1], d.groups[2]);
    }
    pass.end();
    for (const c of prog.copies) enc.copyBufferToBuffer(this.buffers[c.from], 0, this.buffers[c.to], 0, align4(c.bytes));
    device.queue.submit([enc.finish()]);
    const err = await device.popErrorScope();
    if (err) throw new Error(`alk: program '${name}': ${err.message}`);
    if (this.errors.length) throw new Error(`alk: ${this.errors.splice(0).join('; ')}`);
  }

  // The captured tensor `name` of program `program` after its latest run, contiguous.
  async capture(name, program = 'step') {
    const prog = this.programs[program];
    const t = prog && prog.captures[name];
    if (!t) throw new Error(`alk: program '${program}' captures no '${name}'`);
    const all = await this._read(t.buffer);
    const src = fromGpu(all, t.gpu_dtype);
    const count = t.shape.reduce((a, b) => a * b, 1);
    const out = new src.constructor(count);
    for (let i = 0; i < count; ++i) {
      let r = i, off = t.offset;
      for (let d = t.shape.length - 1; d >= 0; --d) { off += (r % t.shape[d]) * t.strides[d]; r = Math.floor(r / t.shape[d]); }
      out[i] = src[off];
    }
    out.shape = t.shape;
    return out;
  }

  async _read(buffer) {
    const bytes = align4(this.plan.buffers[buffer].bytes);
    const staging = this.device.createBuffer({ size: bytes, usage: MAP_READ | COPY_DST });
    const enc = this.device.createCommandEncoder();
    enc.copyBufferToBuffer(this.buffers[buffer], 0, staging, 0, bytes);
    this.device.queue.submit([enc.finish()]);
    await staging.mapAsync(1 /* GPUMapMode.READ */);
    const out = new Uint8Array(staging.getMappedRange().slice(0));
    staging.unmap();
    staging.destroy();
    return out.subarray(0, this.plan.buffers[buffer].bytes);
  }

  // One training step: returns the captured loss.
  async step(inputs) {
    await this.run('step', inputs);
    return (await this.capture('loss', 'step'))[0];
  }

  async forward(inputs, capture = 'logits') {
    await this.run('forward', inputs);
    return this.capture(capture, 'forward');
  }

  setLr(lr) {
    if (this.plan.lr_buffer === undefined) throw new Error('alk: the bundle has no learning-rate buffer');
    this.device.queue.writeBuffer(this.buffers[this.plan.lr_buffer], 0, new Float32Array([lr]));
  }

  // Continues `prompt` (token ids) by n tokens sampled from the forward program's logits
  // (input ids [1, T], capture 'logits' [1, T, V]); temperature 0 takes the argmax.
  async sample(prompt, n, { temperature = 0.8, random = Math.random } = {}) {
    const t = this.programs.forward.inputs[0];
    const T = t.shape[t.shape.length - 1];
    const ids = [...prompt];
    for (let i = 0; i < n; ++i) {
      const window = ids.slice(-T), input = new Int32Array(T);
      input.set(window);
      const logits = await this.forward([input]);
      const V = logits.length / T, row = logits.subarray((window.length - 1) * V, window.length * V);
      let next = 0;
      if (temperature <= 0) {
        for (let v = 1; v < V; ++v) if (row[v] > row[next]) next = v;
      } else {
        let m = -Infinity;
        for (const x of row) m = Math.max(m, x);
        const p = Array.from(row, (x) => Math.exp((x - m) / temperature));
        let u = random() * p.reduce((a, b) => a + b, 0);
        for (next = 0; next < V - 1 && (u -= p[next]) > 0; ++next);
      }
      ids.push(next);
    }
    return ids;
  }

  // Every state tensor (weights, optimizer state, lr) as a safetensors file (bytes).
  async save() {
    const tensors = [];
    for (let i = 0; i < this.plan.buffers.length; ++i) {
      const b = this.plan.buffers[i];
      if (!b.state) continue;
      const count = b.shape.reduce((x, y) => x * y, 1);
      const bytes = (await this._read(i)).slice(0, count * ELEMENT[b.dtype]);
      tensors.push({ name: b.state, tag: TAG[b.dtype], shape: b.shape, bytes });
    }
    return writeSafetensors(tensors);
  }
}

// Loads a bundle. `base`: its URL or directory. Options: gpu (default navigator.gpu),
// fetchBytes(path) -> ArrayBuffer (default: fetch relative to base), f16: false to run the
// packed f16 kernels even where the adapter has shader-f16 (model.f16 reports the choice).
export async function load(base, options = {}) {
  const gpu = options.gpu || (typeof navigator !== 'undefined' && navigator.gpu);
  if (!gpu) throw new Error('alk: WebGPU is not available (no navigator.gpu)');
  const prefix = base.endsWith('/') ? base : base + '/';
  const fetchBytes = options.fetchBytes || (async (p) => {
    const r = await fetch(prefix + p);
    if (!r.ok) throw new Error(`alk: cannot fetch ${prefix + p}: ${r.status}`);
    return r.arrayBuffer();
  });
  const plan = JSON.parse(new TextDecoder().decode(await fetchBytes('plan.json')));
  if (plan.format !== 'alk-webgpu-1') throw new Error(`alk: ${prefix}plan.json is not an alk WebGPU bundle`);
  const adapter = await gpu.requestAdapter();
  if (!adapter) throw new Error('alk: no WebGPU adapter');
  // The plan binds up to (inputs + output + params) buffers per kernel: ask for what the
  // adapter offers rather than WebGPU's default 8 per stage.
  const limits = {};
  for (const k of ['maxStorageBuffersPerShaderStage', 'maxStorageBufferBindingSize', 'maxBufferSize',
                   'maxComputeWorkgroupStorageSize', 'maxBindingsPerBindGroup'])
    if (adapter.limits[k] !== undefined) limits[k] = adapter.limits[k];
  const features = adapter.features.has('shader-f16') ? ['shader-f16'] : [];
  const device = await adapter.requestDevice({ requiredLimits: limits, requiredFeatures: features });
  const info = adapter.info || {};
  const model = new Model(plan, device, `${info.vendor || ''} ${info.architecture || ''} ${info.description || ''}`.trim(),
                          options);
  // The GPU object and the adapter stay referenced: Node's Dawn binding frees its instance
  // when they are collected, under a device that still uses it (crashes in ProcessEvents).
  model.keep.push(gpu, adapter);
  await model._init(fetchBytes);
  const fetchText = async (p) => new TextDecoder().decode(await fetchBytes(p));
  const desc = model.meta.tokenizer ? JSON.parse(await fetchText(model.meta.tokenizer)) : null;
  model.tokenizer = await Tokenizer.load(desc, fetchText);
  return model;
}
