#include "backend/vulkan/kernels/index_errors.h"

#include <array>
#include <unordered_map>

#include "backend/vulkan/context.h"

namespace alk::vk {

namespace {
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
// Contexts live for the process (Context::get), so a plain map keyed by address is enough.
std::unordered_map<const Context*, std::unique_ptr<IndexErrors>>& registry() {
  static auto* r = new std::unordered_map<const Context*, std::unique_ptr<IndexErrors>>;
  return *r;
}
}  // namespace

IndexErrors::IndexErrors(Context& ctx) : ctx_(ctx), flag_(ctx.pool().allocate(16)) {
  const std::array<uint32_t, 4> zero{};
  ctx_.stream().upload(flag_, 0, zero.data(), 16);
}

IndexErrors& IndexErrors::of(Context& ctx) {
  std::lock_guard lock(registry_mutex());
  auto& slot = registry()[&ctx];
  if (!slot) slot = std::make_unique<IndexErrors>(ctx);
  return *slot;
}

uint32_t IndexErrors::add(IndexLaunch launch, const Encoder& enc) {
  std::lock_guard lock(mutex_);
  const uint32_t id = next_++;
  if (next_ == 0) next_ = 1;
  launches_[id] = std::move(launch);
  if (dynamic_cast<const Recording*>(&enc)) {
    ++recorded_;
    recorded_ids_.insert(id);
  } else {
    pending_ = true;
  }
  return id;
}

void IndexErrors::check() {
  std::unique_lock lock(mutex_);
  if (!pending_ && recorded_ == 0) return;
  std::array<uint32_t, 4> words{};
  // Launches registered from here on (other threads) may still be pending: kept.
  const uint32_t upto = next_;
  auto forget_checked = [&] {
    for (auto it = launches_.begin(); it != launches_.end();)
      it = recorded_ids_.count(it->first) || it->first >= upto ? std::next(it) : launches_.erase(it);
  };
  lock.unlock();
  ctx_.stream().download(flag_, 0, words.data(), 16);
  lock.lock();
  pending_ = next_ != upto;  // launches registered meanwhile are checked next time
  if (words[0] == 0) {
    forget_checked();  // clean: these stream launches can no longer fail
    return;
  }
  const std::array<uint32_t, 4> zero{};
  ctx_.stream().upload(flag_, 0, zero.data(), 16);
  auto it = launches_.find(words[0]);
  const int64_t value = static_cast<int64_t>((static_cast<uint64_t>(words[3]) << 32) | words[2]);
  if (it == launches_.end()) fail("an index kernel reported index " + std::to_string(value) + " out of range");
  const IndexLaunch l = it->second;
  forget_checked();
  throw Error(l.op,
              l.what + " " + std::to_string(value) + " is out of range for dim " + std::to_string(l.dim) + " of size " +
                  std::to_string(l.size) + " (valid range [0, " + std::to_string(l.size) + "))",
              l.loc);
}

void check_index_errors(Context& ctx) {
  {
    std::lock_guard lock(registry_mutex());
    if (!registry().count(&ctx)) return;
  }
  IndexErrors::of(ctx).check();
}

}  // namespace alk::vk
