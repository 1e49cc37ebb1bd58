#include "backend/cpu/kernel_cache.h"

namespace alk {

const expr::Expr& KernelCache::get(const std::string& key, const expr::Expr& e) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_key_.find(key);
  if (it != by_key_.end()) {
    ++hits_;
    return it->second;
  }
  ++misses_;
  return by_key_.emplace(key, e).first->second;
}

KernelCache& cpu_kernel_cache() {
  static KernelCache cache;
  return cache;
}

}  // namespace alk
