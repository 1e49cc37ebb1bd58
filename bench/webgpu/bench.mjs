// alk's exported WebGPU kernels against TensorFlow.js 4.22's WebGPU backend, in one Node
// process on one adapter (npm webgpu = Dawn; VK_ICD_FILENAMES picks the Vulkan driver):
//   matmul   1024^3 f32 with the result read back to the host
//   mlp      784-256-10 MLP, batch 64: forward, cross-entropy, backward, SGD step (loss read back)
// Prints per-case medians (the two sides' calls alternate) and
// `RATIO <name> alk=<ms> anchor=<ms> ratio=<alk/anchor>`.
//   node bench.mjs BUNDLES_DIR [REPEATS]   (bundles from bench_webgpu_export)
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { create, globals } from 'webgpu';

Object.assign(globalThis, globals);
const [dir, repeats = '10'] = process.argv.slice(2);
const gpu = create([]);
globalThis.navigator = { gpu };  // TF.js finds WebGPU here
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
// Medians of n timed calls of each side after a warm-up, the sides alternating call by call:
// on a shared machine the load drifts within seconds, and alternating gives both the same.
async function timePair(alk, anchor, n) {
  await alk();  // warm-up (pipelines, allocations)
  await anchor();
  const ms = { alk: [], anchor: [] };
  for (let i = 0; i < n; ++i)
    for (const [side, fn] of [['alk', alk], ['anchor', anchor]]) {
      const t0 = performance.now();
      await fn();
      ms[side].push(performance.now() - t0);
    }
  return { alk: median(ms.alk), anchor: median(ms.anchor) };
}

const { load } = await import(pathToFileURL(path.resolve('src/webgpu/runtime/alk_webgpu.mjs')).href);
const bundle = (name) => {
  const d = path.join(dir, name);
  return load(d, { gpu, fetchBytes: async (p) => { const b = fs.readFileSync(path.join(d, p)); return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength); } });
};
const n = Number(repeats);
const results = {};
try {
  const mm = await bundle('matmul');
  console.log(`adapter: ${mm.adapter}`);
  const mlp = await bundle('mlp');

  const tf = await import('@tensorflow/tfjs');
  await import('@tensorflow/tfjs-backend-webgpu');
  await tf.setBackend('webgpu');
  await tf.ready();
  const a = tf.randomNormal([1024, 1024]), b = tf.randomNormal([1024, 1024]);
  results.matmul = await timePair(async () => { await mm.run('step'); await mm.capture('c'); },
                                  async () => { const c = tf.matMul(a, b); await c.data(); c.dispose(); }, n);
  const w1 = tf.variable(tf.randomNormal([784, 256], 0, 0.05)), b1 = tf.variable(tf.zeros([256]));
  const w2 = tf.variable(tf.randomNormal([256, 10], 0, 0.05)), b2 = tf.variable(tf.zeros([10]));
  const x = tf.randomNormal([64, 784]), y = tf.oneHot(tf.randomUniform([64], 0, 10, 'int32'), 10);
  const opt = tf.train.sgd(0.05);
  results.mlp = await timePair(() => mlp.step(), async () => {
    const cost = opt.minimize(() => tf.losses.softmaxCrossEntropy(y, tf.relu(x.matMul(w1).add(b1)).matMul(w2).add(b2)), true);
    await cost.data();
    cost.dispose();
  }, 4 * n);  // a step is short: more samples
  for (const [name, r] of Object.entries(results)) {
    console.log(`${name}: alk ${r.alk.toFixed(1)} ms, tfjs-webgpu ${r.anchor.toFixed(1)} ms`);
    console.log(`RATIO webgpu_${name} alk=${r.alk.toFixed(2)} anchor=${r.anchor.toFixed(2)} ratio=${(r.alk / r.anchor).toFixed(3)}`);
  }
  process.exit(0);
} catch (e) {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
}
