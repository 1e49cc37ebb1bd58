// Prepared Map kernels, keyed by map_kernel_key (alk/kernel.h): the expression's canonical
// text plus the storage dtypes. The key is the full text, not a hash of it: kernels whose
// hashes collide never share an entry. On the CPU, "compiling" keeps the expression the
// evaluator runs; the compiled tier (jit.h) emits and builds its C++ later, once it has seen
// the inputs' layouts (which of them are uniform changes the text: ALK_DEBUG=kernels prints
// the text it builds), so nothing is emitted here.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "alk/expr.h"

namespace alk {

class KernelCache {
 public:
  // The cached copy of `e` under `key` (the first one seen).
  const expr::Expr& get(const std::string& key, const expr::Expr& e);
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }
  size_t size() const { return by_key_.size(); }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, expr::Expr> by_key_;
  int64_t hits_ = 0, misses_ = 0;
};

KernelCache& cpu_kernel_cache();

}  // namespace alk
