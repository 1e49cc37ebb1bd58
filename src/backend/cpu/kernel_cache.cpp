#include "backend/cpu/kernel_cache.h"

namespace alk {

uint64_t source_hash(const std::string& source) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : source) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

const expr::Expr& KernelCache::get(const std::string& source, const expr::Expr& e) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t h = source_hash(source);
  auto it = by_hash_.find(h);
  if (it != by_hash_.end() && it->second.first == source) {
    ++hits_;
    return it->second.second;
  }
  ++misses_;
  auto& slot = by_hash_[h];
  slot = {source, e};
  return slot.second;
}

KernelCache& cpu_kernel_cache() {
  static KernelCache cache;
  return cache;
}

}  // namespace alk
