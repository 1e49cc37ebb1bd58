#include "backend/cpu/kernel_cache.h"

namespace alk {

const expr::Expr& KernelCache::get(const std::string& key, const expr::Expr& e, const std::function<std::string()>& emit) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_key_.find(key);
  if (it != by_key_.end()) {
    ++hits_;
    return it->second.second;
  }
  ++misses_;
  auto& slot = by_key_[key];
  slot = {emit(), e};
  return slot.second;
}

KernelCache& cpu_kernel_cache() {
  static KernelCache cache;
  return cache;
}

}  // namespace alk
