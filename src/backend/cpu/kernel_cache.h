// Prepared Map kernels, keyed by map_kernel_key (alk/kernel.h): the expression's canonical
// text plus the storage dtypes, so a kernel's C++ text is emitted only once (on a miss). The
// key is the full text, not a hash of it: kernels whose hashes collide never share an entry.
// On the CPU, "compiling" keeps the expression the evaluator runs; the compiled tier (jit.h)
// builds its body later, once it has seen the inputs' layouts (which of them are uniform
// changes the text: ALK_DEBUG=kernels prints the text it builds).
#pragma once
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

#include "alk/expr.h"

namespace alk {

class KernelCache {
 public:
  // `emit` produces the kernel's source text; it is called only on a miss.
  const expr::Expr& get(const std::string& key, const expr::Expr& e, const std::function<std::string()>& emit);
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }
  size_t size() const { return by_key_.size(); }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::pair<std::string, expr::Expr>> by_key_;
  int64_t hits_ = 0, misses_ = 0;
};

KernelCache& cpu_kernel_cache();

}  // namespace alk
