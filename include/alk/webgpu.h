// WebGPU export: compiled Programs (alk::compile) written as a bundle that a browser or
// Node (npm `webgpu`) replays with a small dependency-free JavaScript runtime.
//
//   alk::Program step = alk::compile(...);   // traced (called twice) before export
//   alk::webgpu::ExportOptions o;
//   o.programs = {{"step", &step}, {"forward", &forward}};
//   o.names = model.named_parameters();      // weights.safetensors names
//   o.lr = opt.lr_tensor();                  // runtime setLr(lr)
//   alk::webgpu::export_bundle("bundle", o);
//
// The bundle: plan.json (buffers with sizes and dtypes, per program its dispatches with
// bindings and workgroup counts, inputs, captures, carried state), kernels/*.wgsl,
// weights.safetensors (every tensor that exists before a step: parameters, optimizer state,
// the lr, the traced inputs), alk_webgpu.mjs (load, step, forward, capture, setLr, save,
// sample) and index.html. WebGPU has no 64-bit types: i64 tensors become i32 (every exported
// value is checked to fit; the runtime checks inputs too) and f64 becomes f32.
// Random ops draw the CPU's numbers (Philox): the runtime moves their offsets each step as the
// CPU's generator moves (a bundle's k-th step = the program's k-th replay after the trace).
// f16 tensors: each kernel touching them also ships as kernels/k<i>.f16.wgsl (array<f16>,
// "enable f16;"), which the runtime uses where the adapter has shader-f16 (model.f16 reports).
// Trace under alk::Autocast(DType::F16) for mixed precision.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "alk/compile.h"
#include "alk/tensor.h"

namespace alk::webgpu {

struct ExportOptions {
  std::vector<std::pair<std::string, const Program*>> programs;  // name -> a traced program
  std::vector<std::pair<std::string, Tensor>> names;            // names of state tensors
  Tensor lr;                                                     // optional: the optimizer's lr buffer
  std::vector<std::pair<std::string, std::string>> files;        // extra files: bundle path -> contents
  std::string meta_json = "{}";                                  // plan.json "meta" (the page reads it)
};

struct ExportSummary {
  int64_t dispatches = 0, shaders = 0, buffers = 0;
  int64_t shaders_f16 = 0;  // shaders with a shader-f16 variant (kernels/k<i>.f16.wgsl)
  int64_t state_bytes = 0, buffer_bytes = 0;  // exported state; all GPU buffers
};

ExportSummary export_bundle(const std::string& dir, const ExportOptions& options, Loc loc = Loc::current());

}  // namespace alk::webgpu
