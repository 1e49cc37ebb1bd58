#include "backend/cpu/kernel_cache.h"

namespace alk {

const expr::Expr& KernelCache::get(uint64_t key, const expr::Expr& e, const std::function<std::string()>& emit) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_hash_.find(key);
  if (it != by_hash_.end()) {
    ++hits_;
    return it->second.second;
  }
  ++misses_;
  auto& slot = by_hash_[key];
  slot = {emit(), e};
  return slot.second;
}

std::string KernelCache::source(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_hash_.find(key);
  return it == by_hash_.end() ? std::string() : it->second.first;
}

KernelCache& cpu_kernel_cache() {
  static KernelCache cache;
  return cache;
}

}  // namespace alk
