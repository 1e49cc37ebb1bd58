#include "backend/cuda/template_ops.h"

#include "backend/cuda/cuda_device.h"

namespace alk::cuda {

TemplateOpTable<TemplateOp>& template_ops() {
  static TemplateOpTable<TemplateOp> table("cuda");
  return table;
}

namespace {
std::vector<void (*)(SampleSources&)>& sample_lists() {
  static std::vector<void (*)(SampleSources&)> lists;
  return lists;
}

// A host function (src/dist's collectives) runs on the host when its kernel is queued: it
// queues its own work on the stream, in stream order, and owns no output of its own.
void host_call_op(Context& ctx, const Kernel& k, const Arg&) {
  if (!ctx.compile_only) std::get<HostCallParams>(k.node.params).fn->run(k);
}

const bool registered = [] {
  auto& ops = template_ops();
  ops.add(OpId::HostCall, kAllDTypes, {nullptr, host_call_op}, "runs on the host, queueing its own work on the stream");
  return true;
}();
}  // namespace

bool add_sample_sources(void (*samples)(SampleSources& out)) {
  sample_lists().push_back(samples);
  return true;
}

std::vector<std::pair<std::string, std::string>> template_sources() {
  SampleSources out;
  for (auto* samples : sample_lists()) samples(out);
  return out;
}

}  // namespace alk::cuda
