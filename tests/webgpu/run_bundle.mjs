// Runs an exported alk WebGPU bundle in Node (npm `webgpu`, Dawn) and writes what it
// captured as JSON: the tests' bridge (tests/webgpu/test_webgpu.cpp).
//   node run_bundle.mjs BUNDLE_DIR OUT.json PROGRAM RUNS [CAPTURE,...] [SAVE.safetensors]
// Each run replays PROGRAM on the inputs exported with the bundle (the traced batch); after
// each run the named captures (default: all) are read back. Non-finite numbers are written
// as the strings "nan", "inf", "-inf". SAVE: the state after the runs, as model.save() writes it.
// ALK_TEST_LR=x: model.setLr(x) first. ALK_TEST_F16=packed: the packed f16 kernels even where
// the adapter has shader-f16. The result names the adapter and model.f16 (which f16 kernels ran).
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { create, globals } from 'webgpu';

Object.assign(globalThis, globals);
const [dir, out, program = 'step', runs = '1', names = '', save = ''] = process.argv.slice(2);
const finite = (x) => (Number.isFinite(x) ? x : Number.isNaN(x) ? 'nan' : x > 0 ? 'inf' : '-inf');
try {
  const { load } = await import(pathToFileURL(path.join(path.resolve(dir), 'alk_webgpu.mjs')).href);
  const fetchBytes = async (p) => {
    const b = fs.readFileSync(path.join(dir, p));
    return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength);
  };
  const t0 = performance.now();
  const model = await load(dir, { gpu: create([]), fetchBytes, f16: process.env.ALK_TEST_F16 !== 'packed' });
  const loaded = performance.now() - t0;
  if (process.env.ALK_TEST_LR) model.setLr(Number(process.env.ALK_TEST_LR));  // setLr before the runs
  const wanted = names ? names.split(',') : Object.keys(model.plan.programs[program].captures);
  const result = { adapter: model.adapter, f16: model.f16, load_ms: loaded, runs: [] };
  for (let r = 0; r < Number(runs); ++r) {
    await model.run(program);
    const caps = {};
    for (const n of wanted) caps[n] = Array.from(await model.capture(n, program), (x) => finite(Number(x)));
    result.runs.push(caps);
  }
  result.run_ms = performance.now() - t0 - loaded;
  if (save) fs.writeFileSync(save, await model.save());
  fs.writeFileSync(out, JSON.stringify(result));
  process.exit(0);
} catch (e) {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
}
