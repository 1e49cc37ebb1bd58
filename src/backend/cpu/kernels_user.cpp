// User kernels on the CPU (alk/kernel_spec.h): the C++ body inside alk's entry point, built by
// the JIT's compiler and disk cache (jit.h's compile_function), run over the grid on the
// thread pool. The C++ body is every user kernel's reference.
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "alk/kernel_spec.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/jit.h"
#include "backend/cpu/template_ops.h"
#include "backend/cpu/thread_pool.h"

namespace alk {
namespace {

using EntryFn = void (*)(void* const* tensors, const int64_t* sizes, const double* attrs, int64_t begin, int64_t end);

// Built entry points by their full source (the JIT's disk cache keeps them across runs).
EntryFn entry_for(const KernelSpec& spec, const std::string& source, Loc loc) {
  static std::mutex mu;
  static std::unordered_map<std::string, EntryFn> built;
  std::lock_guard lock(mu);
  if (auto it = built.find(source); it != built.end()) return it->second;
  std::string log;
  void* fn = cpu::jit::compile_function(source, "alk_user_kernel", cpu::isa(), log);
  if (!fn) fail_user_kernel_compile(spec, KernelTarget::Cpp, log, loc);
  return built[source] = reinterpret_cast<EntryFn>(fn);
}

void run_user_kernel(const Kernel& k, const std::vector<cpu::View>& in, const cpu::View& out) {
  const auto& p = std::get<UserKernelParams>(k.node.params);
  const KernelSpec& spec = *p.spec;
  std::vector<int> ranks;
  std::vector<void*> tensors;
  std::vector<int64_t> sizes;
  auto add = [&](const cpu::View& v, const char* what) {
    if (!v.is_contiguous())
      fail("user kernel " + spec.name, k.node.loc, what, " is not contiguous (the front end passes contiguous tensors)");
    ranks.push_back(static_cast<int>(v.rank()));
    tensors.push_back(static_cast<char*>(v.data) + v.offset * static_cast<int64_t>(dtype_size(v.dtype)));
    sizes.push_back(v.numel());
    sizes.insert(sizes.end(), v.shape.begin(), v.shape.end());
  };
  for (const cpu::View& v : in) add(v, "an input");
  add(out, "the output");
  const EntryFn fn = entry_for(spec, user_kernel_source(spec, KernelTarget::Cpp, ranks), k.node.loc);
  // Invocations are independent (a GPU runs them in any order), so chunks of them run in parallel.
  cpu::parallel_for(p.invocations, 16, [&](int64_t begin, int64_t end) {
    fn(tensors.data(), sizes.data(), p.attrs.data(), begin, end);
  });
}

[[maybe_unused]] const bool registered =
    (cpu::template_ops().add(OpId::UserKernel, kAllDTypes, run_user_kernel, "the C++ body, built by the host compiler"),
     true);

}  // namespace
}  // namespace alk
