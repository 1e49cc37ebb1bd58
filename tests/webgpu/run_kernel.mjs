// Runs one WGSL map kernel in Node (npm `webgpu`, Dawn) over buffers given as files and
// writes the output buffer's bytes: the bridge of WebgpuGolden.* (tests/webgpu/test_webgpu.cpp),
// which runs the golden WGSL files as checked in.
//   node run_kernel.mjs JOB.json OUT.bin
// JOB: {"wgsl": path, "entry": name, "bindings": [path, ...], "output": index, "groups": n}
// Binding i is storage buffer @binding(i) of @group(0), filled with the file's bytes; the
// output binding's bytes come back. Dispatches `groups` workgroups (the kernels loop over
// the elements with a grid stride, so fewer groups than elements / 256 is fine).
import fs from 'node:fs';
import { create, globals } from 'webgpu';

Object.assign(globalThis, globals);
const [jobPath, outPath] = process.argv.slice(2);
const gpu = create([]);  // module scope: Dawn's instance must outlive every await on it (collected, it crashes)
try {
  const job = JSON.parse(fs.readFileSync(jobPath, 'utf8'));
  const adapter = await gpu.requestAdapter();
  if (!adapter) throw new Error('no WebGPU adapter');
  const device = await adapter.requestDevice();
  device.pushErrorScope('validation');
  const module = device.createShaderModule({ code: fs.readFileSync(job.wgsl, 'utf8') });
  const info = await module.getCompilationInfo();
  const errors = info.messages.filter((m) => m.type === 'error');
  if (errors.length) throw new Error(errors.map((m) => `${m.lineNum}:${m.linePos}: ${m.message}`).join('\n'));
  const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: job.entry } });
  const buffers = job.bindings.map((file) => {
    const bytes = fs.readFileSync(file);
    const size = Math.max(4, Math.ceil(bytes.length / 4) * 4);
    const buffer = device.createBuffer({ size, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC });
    const padded = new Uint8Array(size);
    padded.set(bytes);
    device.queue.writeBuffer(buffer, 0, padded);
    return buffer;
  });
  const bindGroup = device.createBindGroup({
    layout: pipeline.getBindGroupLayout(0),
    entries: buffers.map((buffer, binding) => ({ binding, resource: { buffer } })),
  });
  const out = buffers[job.output];
  const readback = device.createBuffer({ size: out.size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(job.groups);
  pass.end();
  encoder.copyBufferToBuffer(out, 0, readback, 0, out.size);
  device.queue.submit([encoder.finish()]);
  const error = await device.popErrorScope();
  if (error) throw new Error(error.message);
  await readback.mapAsync(GPUMapMode.READ);
  fs.writeFileSync(outPath, new Uint8Array(readback.getMappedRange().slice(0)));
  process.exit(0);
} catch (e) {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
}
