// Runs a model without inputs in onnxruntime-node (CPU, no graph optimizations) and prints its
// outputs as JSON lists by name.
const ort = require('onnxruntime-node');
(async () => {
  const s = await ort.InferenceSession.create(process.argv[2], { executionProviders: ['cpu'], graphOptimizationLevel: 'disabled' });
  const r = await s.run({});
  const out = {};
  for (const k of s.outputNames) out[k] = Array.from(r[k].data, Number);
  console.log(JSON.stringify(out));
})().catch((e) => { console.log(JSON.stringify({ error: String(e) })); });
