// The text around a user kernel's body (alk/kernel_spec.h): per target, the tensors, sizes
// and attributes as the names the body uses, the body as a function of the invocation index
// (so `return` ends one invocation), and an entry point looping over the grid. A #line
// directive before the body makes every compiler count the body's lines from 1, so its
// messages point at the user's text.
#include <cstdlib>
#include <algorithm>
#include <string>

#include "alk/error.h"
#include "alk/kernel_spec.h"

namespace alk {

namespace {

struct Named {
  const KernelTensor* tensor;
  bool output;
  int rank;
};

std::vector<Named> tensors_of(const KernelSpec& spec, std::span<const int> ranks) {
  if (ranks.size() != spec.inputs.size() + 1)
    fail("user kernel " + spec.name, spec.defined_at, "expected ", spec.inputs.size() + 1, " tensor ranks, got ",
         ranks.size());
  std::vector<Named> out;
  for (size_t j = 0; j < spec.inputs.size(); ++j) out.push_back({&spec.inputs[j], false, ranks[j]});
  out.push_back({&spec.output, true, ranks.back()});
  return out;
}

std::string c_type(DType t, KernelTarget target, const KernelSpec& spec) {
  const bool cuda = target == KernelTarget::Cuda;
  switch (t) {
    case DType::F32: return "float";
    case DType::F64: return "double";
    case DType::I32: return cuda ? "int" : "int32_t";
    case DType::I64: return cuda ? "long long" : "int64_t";
    case DType::U8: return cuda ? "unsigned char" : "uint8_t";
    case DType::Bool: return "bool";
    default: break;
  }
  fail("user kernel " + spec.name, spec.defined_at, dtype_name(t), " has no ", kernel_target_name(target),
       " type for kernel bodies (f32 f64 i32 i64 u8 bool)");
}

std::string shader_type(DType t, KernelTarget target, const KernelSpec& spec) {
  const bool glsl = target == KernelTarget::Glsl;
  if (t == DType::F32) return glsl ? "float" : "f32";
  if (t == DType::I32) return glsl ? "int" : "i32";
  fail("user kernel " + spec.name, spec.defined_at, dtype_name(t), " has no ", kernel_target_name(target),
       " type for kernel bodies (f32 i32)");
}

std::string line_directive(const KernelSpec& spec, KernelTarget t) {
  if (t == KernelTarget::Wgsl) return "";  // WGSL has no #line: its bodies start on a line alk counts
  return "#line 1 \"" + spec.name + " body\"\n";
}

// C++ and CUDA: the body as a function of i, the tensors, their sizes and the attributes.
std::string c_like(const KernelSpec& spec, KernelTarget t, std::span<const int> ranks) {
  const bool cuda = t == KernelTarget::Cuda;
  const std::string index = cuda ? "long long" : "int64_t";
  const std::vector<Named> tensors = tensors_of(spec, ranks);
  std::string params = index + " i", args = "i", entry_params, entry_args;
  int size_slot = 0;
  for (size_t j = 0; j < tensors.size(); ++j) {
    const Named& n = tensors[j];
    const std::string ty = c_type(n.tensor->dtype, t, spec);
    const std::string ptr = std::string(n.output ? "" : "const ") + ty + (cuda ? "* __restrict__ " : "* __restrict ");
    params += ", " + ptr + n.tensor->name;
    args += ", " + n.tensor->name;
    if (cuda) {
      entry_params += ptr + n.tensor->name + ", ";
    } else {
      entry_args += ", static_cast<" + std::string(n.output ? "" : "const ") + ty + "*>(alk_tensors[" + std::to_string(j) + "])";
    }
    std::vector<std::string> names{n.tensor->name + "_numel"};
    for (int d = 0; d < n.rank; ++d) names.push_back(n.tensor->name + "_size" + std::to_string(d));
    for (const std::string& s : names) {
      params += ", " + index + " " + s;
      args += ", " + s;
      if (cuda) entry_params += index + " " + s + ", ";
      else entry_args += ", alk_sizes[" + std::to_string(size_slot) + "]";
      ++size_slot;
    }
  }
  for (size_t j = 0; j < spec.attrs.size(); ++j) {
    const KernelAttr& a = spec.attrs[j];
    const std::string ty = c_type(a.dtype, t, spec);
    params += ", " + ty + " " + a.name;
    args += ", " + a.name;
    if (cuda) entry_params += ty + " " + a.name + ", ";
    else entry_args += ", static_cast<" + ty + ">(alk_attrs[" + std::to_string(j) + "])";
  }
  std::string s;
  if (cuda) {
    // NVRTC has no <cstdint>: the fixed-width names, so one text can be the C++ and the CUDA body.
    s += "// user kernel " + spec.name + " (CUDA)\ntypedef unsigned char uint8_t;\ntypedef int int32_t;\n"
         "typedef unsigned int uint32_t;\ntypedef long long int64_t;\ntypedef unsigned long long uint64_t;\n";
    s += spec.helpers[static_cast<int>(t)] + "\n";
    s += "__device__ __forceinline__ void alk_body(" + params + ") {\n" + line_directive(spec, t) + spec.body_for(t) +
         "\n}\n";
    s += "extern \"C\" __global__ void alk_user_kernel(" + entry_params + "long long alk_count) {\n"
         "  const long long step = static_cast<long long>(gridDim.x) * blockDim.x;\n"
         "  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < alk_count; i += step)\n"
         "    alk_body(" + args + ");\n}\n";
  } else {
    s += "// user kernel " + spec.name + " (C++)\n#include <cmath>\n#include <cstdint>\n#include <cstring>\n";
    s += spec.helpers[static_cast<int>(t)] + "\n";
    s += "static inline void alk_body(" + params + ") {\n" + line_directive(spec, t) + spec.body_for(t) + "\n}\n";
    s += "extern \"C\" void alk_user_kernel(void* const* alk_tensors, const int64_t* alk_sizes, const double* alk_attrs,\n"
         "                                int64_t alk_begin, int64_t alk_end) {\n"
         "  for (int64_t i = alk_begin; i < alk_end; ++i) alk_body(" + args.substr(0, 1) + entry_args + ");\n}\n";
  }
  return s;
}

// GLSL and WGSL: globals for the tensors and the params words, the sizes and attributes as
// locals of the body's function.
std::string shader(const KernelSpec& spec, KernelTarget t, std::span<const int> ranks) {
  const bool glsl = t == KernelTarget::Glsl;
  const std::vector<Named> tensors = tensors_of(spec, ranks);
  const size_t words = user_kernel_param_words(spec, ranks);
  const std::string wg = std::to_string(spec.workgroup_size);
  std::string s, locals;
  size_t w = 0;
  auto word = [&](size_t k) { return (glsl ? "p_[" : "alk_params[") + std::to_string(k) + "]"; };
  for (const Named& n : tensors) {
    std::vector<std::string> names{n.tensor->name + "_numel"};
    for (int d = 0; d < n.rank; ++d) names.push_back(n.tensor->name + "_size" + std::to_string(d));
    for (const std::string& nm : names)
      locals += glsl ? "  const uint " + nm + " = " + word(w++) + ";\n" : "  let " + nm + " = " + word(w++) + ";\n";
  }
  for (const KernelAttr& a : spec.attrs) {
    const std::string ty = shader_type(a.dtype, t, spec), v = word(w++);
    if (glsl)
      locals += "  const " + ty + " " + a.name + " = " + (a.dtype == DType::F32 ? "uintBitsToFloat(" : "int(") + v + ");\n";
    else
      locals += "  let " + a.name + " = bitcast<" + ty + ">(" + v + ");\n";
  }
  const std::string count = word(w);
  if (glsl) {
    s += "#version 450\n#extension GL_GOOGLE_cpp_style_line_directive : require\n// user kernel " + spec.name +
         " (GLSL)\nlayout(local_size_x = " + wg + ") in;\n";
    for (size_t j = 0; j < tensors.size(); ++j) {
      const Named& n = tensors[j];
      s += "layout(std430, binding = " + std::to_string(j) + ") " + (n.output ? "" : "readonly ") + "buffer Tensor" +
           std::to_string(j) + " { " + shader_type(n.tensor->dtype, t, spec) + " " + n.tensor->name + "[]; };\n";
    }
    if (words <= 32)
      s += "layout(push_constant) uniform Params { uint p_[" + std::to_string(words) + "]; };\n";
    else
      s += "layout(std430, binding = " + std::to_string(tensors.size()) + ") readonly buffer Params { uint p_[]; };\n";
    s += spec.helpers[static_cast<int>(t)] + "\n";
    s += "void alk_body(uint i) {\n" + locals + line_directive(spec, t) + spec.body_for(t) + "\n}\n";
    s += "void main() {\n  for (uint i = gl_GlobalInvocationID.x; i < " + count + "; i += gl_NumWorkGroups.x * " + wg +
         "u) alk_body(i);\n}\n";
  } else {
    s += "// user kernel " + spec.name + " (WGSL)\n";
    for (size_t j = 0; j < tensors.size(); ++j) {
      const Named& n = tensors[j];
      s += "@group(0) @binding(" + std::to_string(j) + ") var<storage, " + (n.output ? "read_write" : "read") + "> " +
           n.tensor->name + ": array<" + shader_type(n.tensor->dtype, t, spec) + ">;\n";
    }
    s += "@group(0) @binding(" + std::to_string(tensors.size()) + ") var<storage, read> alk_params: array<u32>;\n";
    s += spec.helpers[static_cast<int>(t)] + "\n";
    s += "fn alk_body(i: u32) {\n" + locals + "  // body\n" + spec.body_for(t) + "\n}\n";
    s += "@compute @workgroup_size(" + wg + ")\nfn main(@builtin(global_invocation_id) gid: vec3<u32>, "
         "@builtin(num_workgroups) groups: vec3<u32>) {\n"
         "  for (var i = gid.x; i < " + count + "; i += groups.x * " + wg + "u) { alk_body(i); }\n}\n";
  }
  return s;
}

}  // namespace

const char* kernel_target_name(KernelTarget t) {
  switch (t) {
    case KernelTarget::Cpp: return "C++";
    case KernelTarget::Cuda: return "CUDA";
    case KernelTarget::Glsl: return "GLSL";
    case KernelTarget::Wgsl: return "WGSL";
  }
  return "?";
}

size_t user_kernel_param_words(const KernelSpec& spec, std::span<const int> ranks) {
  size_t words = spec.attrs.size() + 1;  // the attributes, the count
  for (int r : ranks) words += 1 + static_cast<size_t>(std::max(r, 0));
  return words;
}

std::string user_kernel_source(const KernelSpec& spec, KernelTarget t, std::span<const int> ranks) {
  if (spec.body_for(t).empty())
    fail("user kernel " + spec.name, spec.defined_at, "has no ", kernel_target_name(t), " body");
  return t == KernelTarget::Cpp || t == KernelTarget::Cuda ? c_like(spec, t, ranks) : shader(spec, t, ranks);
}

void fail_user_kernel_compile(const KernelSpec& spec, KernelTarget t, const std::string& compiler_log, Loc loc) {
  // Keep the compiler's lines about the body, as the #line directive names it: "<name> body:LINE:"
  // (g++, glslang) or "<name> body(LINE):" (NVRTC), spelled "body line LINE:"; the other lines
  // (about alk's own text: a body can break what follows it) are kept as they are.
  const std::string tag = spec.name + " body";
  std::string about_body, rest;
  size_t start = 0;
  while (start < compiler_log.size()) {
    size_t end = compiler_log.find('\n', start);
    if (end == std::string::npos) end = compiler_log.size();
    const std::string line = compiler_log.substr(start, end - start);
    start = end + 1;
    size_t at = line.find(tag);
    std::string where;
    if (at != std::string::npos) {
      at += tag.size();
      if (at < line.size() && line[at] == ':') {
        const size_t colon = line.find(':', at + 1);
        where = line.substr(at + 1, colon == std::string::npos ? std::string::npos : colon - at - 1);
        at = colon == std::string::npos ? line.size() : colon + 1;
      } else if (at < line.size() && line[at] == '(') {
        const size_t close = line.find(')', at);
        where = line.substr(at + 1, close == std::string::npos ? std::string::npos : close - at - 1);
        at = close == std::string::npos ? line.size() : line.find(':', close) + 1;
      }
    }
    if (!where.empty() && where.find_first_not_of("0123456789") == std::string::npos) {
      about_body += "  body line " + where + ":" + line.substr(std::min(at, line.size())) + "\n";
    } else if (!line.empty() && rest.size() < 4000) {
      rest += "  " + line + "\n";
    }
  }
  fail("user kernel " + spec.name, loc, "the ", kernel_target_name(t), " body does not compile (kernel defined at ",
       spec.defined_at.file_name(), ":", spec.defined_at.line(), "):\n",
       about_body.empty() ? rest : about_body);
}

}  // namespace alk
