// The reference for alk's ONNX import: runs a model with onnxruntime-node (CPU, 2 threads, or
// $ORT_THREADS) on
// .npy inputs, writes each output as <out dir>/<output name>.npy and prints the best wall
// time of N runs as "ORT_MS <ms>".
//   node bench/onnx/ort_reference.js MODEL.onnx OUT_DIR REPEAT NAME=FILE.npy ...
// Only the dtypes the benchmarks use (f32, i64, i32) are read and written.
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

const DTYPES = { '<f4': ['float32', Float32Array], '<i8': ['int64', BigInt64Array], '<i4': ['int32', Int32Array] };

function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.toString('latin1', 1, 6) !== 'NUMPY') throw new Error(`${file}: not .npy`);
  const major = buf[6];
  const headerLen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = major === 1 ? 10 : 12;
  const header = buf.toString('latin1', start, start + headerLen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  if (/'fortran_order':\s*True/.test(header)) throw new Error(`${file}: Fortran order`);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').map((s) => s.trim()).filter((s) => s).map(Number);
  const [type, Arr] = DTYPES[descr] || (() => { throw new Error(`${file}: dtype ${descr}`); })();
  const data = buf.subarray(start + headerLen);
  const copy = new Uint8Array(data.length);
  copy.set(data);
  return new ort.Tensor(type, new Arr(copy.buffer), shape);
}

function writeNpy(file, t) {
  const descr = { float32: '<f4', int64: '<i8', int32: '<i4' }[t.type];
  if (!descr) throw new Error(`output dtype ${t.type}`);
  const shape = t.dims.length === 1 ? `(${t.dims[0]},)` : `(${t.dims.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  const pad = 64 - ((10 + header.length + 1) % 64);
  header += ' '.repeat(pad % 64) + '\n';
  const pre = Buffer.alloc(10);
  pre.write('\x93NUMPY', 0, 'latin1');
  pre[6] = 1;
  pre[7] = 0;
  pre.writeUInt16LE(header.length, 8);
  const data = Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
  fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(header, 'latin1'), data]));
}

async function main() {
  const [model, outDir, repeatText, ...inputs] = process.argv.slice(2);
  const repeat = Math.max(1, Number(repeatText));
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ['cpu'], intraOpNumThreads: Number(process.env.ORT_THREADS || 2), interOpNumThreads: 1, graphOptimizationLevel: 'all',
  });
  const feeds = {};
  for (const arg of inputs) {
    const eq = arg.indexOf('=');
    feeds[arg.slice(0, eq)] = readNpy(arg.slice(eq + 1));
  }
  let result;
  let best = Infinity;
  for (let r = 0; r < repeat; r++) {
    const t0 = process.hrtime.bigint();
    result = await session.run(feeds);
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    best = Math.min(best, ms);
  }
  fs.mkdirSync(outDir, { recursive: true });
  for (const name of session.outputNames) writeNpy(path.join(outDir, `${name.replace(/[/\\]/g, '_')}.npy`), result[name]);
  console.log(`ORT_MS ${best.toFixed(3)}`);
}

main().catch((e) => { console.error(e); process.exit(1); });
