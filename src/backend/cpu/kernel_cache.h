// Compiled Map kernels, keyed by a hash of their emitted source text. On the CPU,
// "compiling" checks and keeps the expression the evaluator runs; the cache is what
// GPU backends will key their compiled modules by, and its counters are observable.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "expr/expr.h"

namespace alk {

class KernelCache {
 public:
  const expr::Expr& get(const std::string& source, const expr::Expr& e);
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }
  size_t size() const { return by_hash_.size(); }

 private:
  std::mutex mu_;
  std::unordered_map<uint64_t, std::pair<std::string, expr::Expr>> by_hash_;
  int64_t hits_ = 0, misses_ = 0;
};

KernelCache& cpu_kernel_cache();
uint64_t source_hash(const std::string& source);

}  // namespace alk
