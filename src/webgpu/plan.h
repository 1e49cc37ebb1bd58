// The WebGPU plan of one or more compiled Programs: GPU buffers, shaders, and per program
// its dispatch list, inputs, captures and the copies that carry state to the next step.
//
// Buffers: WebGPU forbids binding one buffer both writable and readable in a dispatch
// (per buffer, not per range), so the memory plan's single arena cannot be one GPU buffer.
// Instead every kernel output gets a GPU buffer of its own (a value), reads find the value
// that last wrote the bytes they cover, and a value's buffer is reused by a later output of
// the same size once its last reader has run (liveness, as the memory plan does for the
// arena). Tensors that exist before the step (parameters, optimizer state, the lr buffer,
// the traced inputs) are "state": their bytes are exported, shared by every program.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "alk/compile.h"
#include "alk/nn.h"
#include "io/json.h"

namespace alk::webgpu {

struct PlanBuffer {
  size_t bytes = 0;
  DType dtype = DType::F32;      // what the CPU holds (the GPU holds i64 as i32, f64 as f32)
  std::string state;             // non-empty: the tensor name in weights.safetensors
  Shape shape;                   // state only
  std::vector<unsigned char> init;  // state only: GPU-layout bytes
};

struct PlanDispatch {
  int shader = 0;
  std::string label;  // op and the caller's file:line, for error messages
  std::vector<int> buffers;
  std::vector<uint32_t> params;  // non-empty: bound after the buffers as a read-only storage buffer
  std::array<uint32_t, 3> groups{1, 1, 1};
  bool random = false;  // params are {seed, offset} (u32 pairs); a run k steps on adds k * rng_used to the offset
};

struct PlanTensor {
  int buffer = -1;
  DType dtype = DType::F32;
  Shape shape, strides;
  int64_t offset = 0;  // elements
};

struct PlanProgram {
  std::string name;
  std::vector<PlanTensor> inputs;
  std::vector<PlanDispatch> dispatches;
  struct Copy {
    int from, to;
    size_t bytes;
  };
  std::vector<Copy> copies;
  std::vector<std::pair<std::string, PlanTensor>> captures;
  uint64_t rng_used = 0;  // generator offsets one step consumes
};

struct Plan {
  std::vector<PlanBuffer> buffers;
  std::vector<std::string> shaders;      // WGSL every adapter runs (f16 packed in u32 words)
  std::vector<std::string> shaders_f16;  // per shader: its shader-f16 variant, or empty (no f16)
  static std::string shader_path(size_t i, bool f16);  // "kernels/k<i>.wgsl" / ".f16.wgsl"
  std::vector<PlanProgram> programs;
  int lr_buffer = -1;
  json::Value to_json(const json::Value& meta) const;
};

struct PlanRequest {
  std::vector<std::pair<std::string, const Program*>> programs;
  nn::NamedTensors names;  // names for state tensors (parameters, optimizer state)
  Tensor lr;               // optional: the optimizer's lr buffer (setLr)
};

Plan build_plan(const PlanRequest& r, Loc loc);

std::string gpu_dtype_name(DType t);  // "f32", "i32" (i64 narrowed), "u8"...

}  // namespace alk::webgpu
