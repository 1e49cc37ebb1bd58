// Writes the WebGPU bundle (include/alk/webgpu.h): the plan, its shaders, the state as
// safetensors, and the runtime and page embedded into the library at build time.
#include <filesystem>

#include "alk/io.h"
#include "alk/webgpu.h"
#include "graph/graph.h"
#include "webgpu/plan.h"

namespace alk::webgpu {

namespace embedded {
extern const std::string_view alk_webgpu_mjs;
extern const std::string_view index_html;
}  // namespace embedded

namespace {
DType gpu_dtype(DType t) {
  if (t == DType::I64) return DType::I32;
  if (t == DType::F64) return DType::F32;
  return t;
}
}  // namespace

ExportSummary export_bundle(const std::string& dir, const ExportOptions& o, Loc loc) {
  check(!o.programs.empty(), "export", loc, "webgpu: no program to export");
  for (const auto& [name, p] : o.programs) check(p != nullptr, "export", loc, "webgpu: program '", name, "' is null");
  PlanRequest r;
  r.programs = o.programs;
  r.names = o.names;
  r.lr = o.lr;
  const Plan plan = build_plan(r, loc);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(dir) / "kernels", ec);
  check(!ec, "export", loc, "webgpu: cannot create ", dir, ": ", ec.message());
  ExportSummary s;
  for (size_t i = 0; i < plan.shaders.size(); ++i) {
    write_file_atomic(dir + "/" + Plan::shader_path(i, false), plan.shaders[i], loc);
    if (!plan.shaders_f16[i].empty()) {
      write_file_atomic(dir + "/" + Plan::shader_path(i, true), plan.shaders_f16[i], loc);
      ++s.shaders_f16;
    }
  }
  std::vector<std::pair<std::string, Tensor>> weights;
  for (const PlanBuffer& b : plan.buffers) {
    s.buffer_bytes += static_cast<int64_t>(b.bytes);
    if (b.state.empty()) continue;
    s.state_bytes += static_cast<int64_t>(b.bytes);
    weights.emplace_back(b.state, tensor_from_host(b.init.data(), b.shape, gpu_dtype(b.dtype), cpu_device()));
  }
  save_safetensors(dir + "/weights.safetensors", weights, {{"format", "alk-webgpu-1"}}, loc);
  json::Value meta = json::parse(o.meta_json, json::kDefaultMaxDepth, loc);
  write_file_atomic(dir + "/plan.json", json::dump(plan.to_json(meta), 1, loc), loc);
  write_file_atomic(dir + "/alk_webgpu.mjs", embedded::alk_webgpu_mjs, loc);
  write_file_atomic(dir + "/index.html", embedded::index_html, loc);
  for (const auto& [path, text] : o.files) {
    check(!path.empty() && path.find("..") == std::string::npos && path[0] != '/', "export", loc,
          "webgpu: extra file path '", path, "' must be relative and stay inside the bundle");
    write_file_atomic(dir + "/" + path, text, loc);
  }
  for (const PlanProgram& p : plan.programs) s.dispatches += static_cast<int64_t>(p.dispatches.size());
  s.shaders = static_cast<int64_t>(plan.shaders.size());
  s.buffers = static_cast<int64_t>(plan.buffers.size());
  return s;
}

}  // namespace alk::webgpu
