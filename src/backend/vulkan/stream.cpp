#include "backend/vulkan/stream.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string_view>

#include "backend/vulkan/context.h"
#include "backend/vulkan/shader.h"

namespace alk::vk {

namespace {

using detail::Commands;
using detail::Range;

constexpr VkPipelineStageFlags kWorkStages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
constexpr VkAccessFlags kWrites = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
constexpr VkAccessFlags kReadsWrites =
    VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;

// Descriptor pools are sized for many small dispatches; a full one is replaced by a new one.
constexpr uint32_t kSetsPerPool = 128, kBuffersPerPool = 128 * 12;
constexpr int64_t kDispatchesPerBatch = 256;

void begin(VkCommandBuffer cb, VkCommandBufferUsageFlags flags) {
  const Api& vk = *api();
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = flags;
  check(vk.vkBeginCommandBuffer(cb, &bi), "vkBeginCommandBuffer");
  // Whatever earlier submissions and the host wrote is visible to this buffer's commands.
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = kWrites | VK_ACCESS_HOST_WRITE_BIT;
  mb.dstAccessMask = kReadsWrites;
  vk.vkCmdPipelineBarrier(cb, kWorkStages | VK_PIPELINE_STAGE_HOST_BIT, kWorkStages, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

void end(VkCommandBuffer cb) {
  const Api& vk = *api();
  // A fence alone does not make device writes visible to the host.
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = kWrites;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vk.vkCmdPipelineBarrier(cb, kWorkStages, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
  check(vk.vkEndCommandBuffer(cb), "vkEndCommandBuffer");
}

bool overlaps(const Range& a, const std::vector<Range>& list) {
  for (const Range& b : list)
    if (a.buffer == b.buffer && a.begin < b.end && b.begin < a.end) return true;
  return false;
}

// Records a barrier before a command reading `reads` and writing `writes` when it
// conflicts with a command since the last barrier, then notes its ranges.
void order(Commands& c, const std::vector<Range>& reads, const std::vector<Range>& writes) {
  bool conflict = false;
  for (const Range& r : reads) conflict = conflict || overlaps(r, c.writes);
  for (const Range& w : writes) conflict = conflict || overlaps(w, c.writes) || overlaps(w, c.reads);
  if (conflict) {
    // Make every pending write visible (not only the conflicting ones: a later command
    // would need them too, and one barrier is cheaper than several); the execution
    // dependency alone covers write-after-read.
    std::vector<VkBufferMemoryBarrier> barriers;
    for (const Range& w : c.writes) {
      VkBufferMemoryBarrier b{VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER};
      b.srcAccessMask = kWrites;
      b.dstAccessMask = kReadsWrites;
      b.srcQueueFamilyIndex = b.dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED;
      b.buffer = w.buffer;
      b.offset = w.begin;
      b.size = w.end - w.begin;
      barriers.push_back(b);
    }
    api()->vkCmdPipelineBarrier(c.cb, kWorkStages, kWorkStages, 0, 0, nullptr, static_cast<uint32_t>(barriers.size()),
                                barriers.data(), 0, nullptr);
    ++c.stats.barriers;
    c.reads.clear();
    c.writes.clear();
  }
  c.reads.insert(c.reads.end(), reads.begin(), reads.end());
  c.writes.insert(c.writes.end(), writes.begin(), writes.end());
}

VkDescriptorSet allocate_set(Context& ctx, Commands& c, VkDescriptorSetLayout layout) {
  const Api& vk = *api();
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!c.pools.empty()) {
      VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
      ai.descriptorPool = c.pools.back();
      ai.descriptorSetCount = 1;
      ai.pSetLayouts = &layout;
      VkDescriptorSet set;
      VkResult r = vk.vkAllocateDescriptorSets(ctx.device(), &ai, &set);
      if (r == VK_SUCCESS) return set;
      if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL) check(r, "vkAllocateDescriptorSets");
    }
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kBuffersPerPool};
    VkDescriptorPoolCreateInfo pi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    pi.maxSets = kSetsPerPool;
    pi.poolSizeCount = 1;
    pi.pPoolSizes = &size;
    VkDescriptorPool pool;
    check(vk.vkCreateDescriptorPool(ctx.device(), &pi, nullptr, &pool), "vkCreateDescriptorPool");
    c.pools.push_back(pool);
  }
  fail("cannot allocate a descriptor set");
}

void encode_dispatch(Context& ctx, Commands& c, const Pipeline& p, std::span<const Binding> bindings,
                     std::span<const uint8_t> push, Groups g) {
  const Api& vk = *api();
  if (bindings.size() != p.bindings)
    fail("dispatch with " + std::to_string(bindings.size()) + " buffers for a pipeline of " + std::to_string(p.bindings));
  if (push.size() != p.push_bytes)
    fail("dispatch with " + std::to_string(push.size()) + " push-constant bytes for a pipeline of " +
         std::to_string(p.push_bytes));
  const DeviceInfo& info = ctx.info();
  for (int d = 0; d < 3; ++d) {
    const uint32_t n = d == 0 ? g.x : d == 1 ? g.y : g.z;
    if (n > info.max_workgroup_count[d]) fail("workgroup count " + std::to_string(n) + " exceeds the device's limit");
  }
  std::vector<Range> reads, writes;
  std::vector<VkDescriptorBufferInfo> infos(bindings.size());
  for (size_t k = 0; k < bindings.size(); ++k) {
    const Binding& b = bindings[k];
    const size_t at = b.alloc->offset() + b.offset;
    if (at % ctx.binding_alignment() != 0)
      fail("binding " + std::to_string(k) + " at byte " + std::to_string(at) + " is not aligned to " +
           std::to_string(ctx.binding_alignment()));
    if (b.bytes == 0 || b.offset + b.bytes > b.alloc->bytes() + (ctx.binding_alignment() - 1) ||
        b.bytes > info.max_storage_buffer_range)
      fail("binding " + std::to_string(k) + ": " + std::to_string(b.bytes) + " bytes at " + std::to_string(b.offset) +
           " does not fit its allocation of " + std::to_string(b.alloc->bytes()) + " or maxStorageBufferRange");
    infos[k] = VkDescriptorBufferInfo{b.alloc->buffer(), at, b.bytes};
    Range r{infos[k].buffer, at, at + b.bytes};
    (b.write ? writes : reads).push_back(r);
    c.used.push_back(b.alloc);
  }
  order(c, reads, writes);
  VkDescriptorSet set = allocate_set(ctx, c, p.set_layout);
  std::vector<VkWriteDescriptorSet> w(bindings.size());
  for (size_t k = 0; k < bindings.size(); ++k) {
    w[k] = VkWriteDescriptorSet{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    w[k].dstSet = set;
    w[k].dstBinding = static_cast<uint32_t>(k);
    w[k].descriptorCount = 1;
    w[k].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    w[k].pBufferInfo = &infos[k];
  }
  vk.vkUpdateDescriptorSets(ctx.device(), static_cast<uint32_t>(w.size()), w.data(), 0, nullptr);
  vk.vkCmdBindPipeline(c.cb, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline);
  vk.vkCmdBindDescriptorSets(c.cb, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1, &set, 0, nullptr);
  if (!push.empty())
    vk.vkCmdPushConstants(c.cb, p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, static_cast<uint32_t>(push.size()), push.data());
  vk.vkCmdDispatch(c.cb, g.x, g.y, g.z);
  ++c.stats.dispatches;
}

void encode_copy(Commands& c, const std::shared_ptr<Allocation>& src, size_t src_offset,
                 const std::shared_ptr<Allocation>& dst, size_t dst_offset, size_t bytes) {
  if (bytes == 0) return;
  if (src_offset + bytes > src->bytes() || dst_offset + bytes > dst->bytes())
    fail("copy of " + std::to_string(bytes) + " bytes outside its allocations");
  VkBufferCopy region{src->offset() + src_offset, dst->offset() + dst_offset, bytes};
  order(c, {Range{src->buffer(), region.srcOffset, region.srcOffset + bytes}},
        {Range{dst->buffer(), region.dstOffset, region.dstOffset + bytes}});
  api()->vkCmdCopyBuffer(c.cb, src->buffer(), dst->buffer(), 1, &region);
  c.used.push_back(src);
  c.used.push_back(dst);
  ++c.stats.copies;
}

void release(Context& ctx, Commands& c) {
  for (VkDescriptorPool p : c.pools) api()->vkDestroyDescriptorPool(ctx.device(), p, nullptr);
  c = Commands{};
}

// ALK_VK_PROFILE=1: GPU time by label over every replay, printed at exit.
struct Profile {
  std::mutex mu;
  std::map<std::string, std::pair<int64_t, double>> by_label;  // calls, ns
  int64_t replays = 0;
  ~Profile() {
    if (!replays) return;
    double total = 0;
    std::vector<std::pair<double, std::string>> rows;
    for (auto& [name, t] : by_label) rows.emplace_back(t.second, name), total += t.second;
    std::sort(rows.rbegin(), rows.rend());
    std::fprintf(stderr, "[alk vulkan profile] %lld replays, %.3f ms of GPU time each\n", static_cast<long long>(replays),
                 1e-6 * total / static_cast<double>(replays));
    for (auto& [ns, name] : rows)
      std::fprintf(stderr, "[alk vulkan profile] %9.3f ms %5.1f%% %7lld x %s\n", 1e-6 * ns / static_cast<double>(replays),
                   100 * ns / std::max(total, 1e-9), static_cast<long long>(by_label[name].first / replays), name.c_str());
  }
};
Profile& profile() {
  static Profile p;
  return p;
}
constexpr uint32_t kQueriesPerPool = 1024;

void add(StreamStats& total, const StreamStats& s) {
  total.dispatches += s.dispatches;
  total.copies += s.copies;
  total.barriers += s.barriers;
}

}  // namespace

// ---- Stream ----------------------------------------------------------------------------

Stream::Stream(Context& ctx) : ctx_(ctx) {
  VkCommandPoolCreateInfo ci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  ci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  ci.queueFamilyIndex = ctx.info().compute_queue_family;
  check(api()->vkCreateCommandPool(ctx.device(), &ci, nullptr, &pool_), "vkCreateCommandPool");
}

Stream::~Stream() {
  try {
    synchronize();
  } catch (...) {  // a lost device: nothing left to wait for
  }
  const Api& vk = *api();
  while (!in_flight_.empty()) {  // only after a failed wait
    release(ctx_, in_flight_.front().commands);
    vk.vkDestroyFence(ctx_.device(), in_flight_.front().fence, nullptr);
    in_flight_.pop_front();
  }
  release(ctx_, current_);
  for (VkFence f : free_fences_) vk.vkDestroyFence(ctx_.device(), f, nullptr);
  vk.vkDestroyCommandPool(ctx_.device(), pool_, nullptr);  // frees its command buffers
}

detail::Commands& Stream::current() {
  if (current_.empty()) {
    VkCommandBuffer cb;
    if (!free_cbs_.empty()) {
      cb = free_cbs_.back();
      free_cbs_.pop_back();
    } else {
      VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
      ai.commandPool = pool_;
      ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
      ai.commandBufferCount = 1;
      check(api()->vkAllocateCommandBuffers(ctx_.device(), &ai, &cb), "vkAllocateCommandBuffers");
    }
    begin(cb, VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT);
    current_.cb = cb;
  }
  return current_;
}

void Stream::dispatch(const Pipeline& pipeline, std::span<const Binding> bindings, std::span<const uint8_t> push,
                      Groups groups) {
  std::lock_guard lock(mutex_);
  Commands& c = current();
  const StreamStats before = c.stats;
  encode_dispatch(ctx_, c, pipeline, bindings, push, groups);
  for (const Binding& b : bindings) b.alloc->last_use = serial_;
  totals_.dispatches += c.stats.dispatches - before.dispatches;
  totals_.barriers += c.stats.barriers - before.barriers;
  // A long run of launches with no read in between (a training step) is submitted in
  // pieces, so the device starts while the host still records the rest.
  if (c.stats.dispatches >= kDispatchesPerBatch) flush_locked();
}

void Stream::copy(const std::shared_ptr<Allocation>& src, size_t src_offset, const std::shared_ptr<Allocation>& dst,
                  size_t dst_offset, size_t bytes) {
  std::lock_guard lock(mutex_);
  Commands& c = current();
  const StreamStats before = c.stats;
  encode_copy(c, src, src_offset, dst, dst_offset, bytes);
  src->last_use = dst->last_use = serial_;
  totals_.copies += c.stats.copies - before.copies;
  totals_.barriers += c.stats.barriers - before.barriers;
}

void Stream::keep(std::shared_ptr<const void> x) {
  std::lock_guard lock(mutex_);
  current().keep.push_back(std::move(x));
}

void Stream::submit(VkCommandBuffer cb, detail::Commands&& commands, std::shared_ptr<Recording> recording) {
  const Api& vk = *api();
  VkFence fence;
  if (!free_fences_.empty()) {
    fence = free_fences_.back();
    free_fences_.pop_back();
  } else {
    VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    check(vk.vkCreateFence(ctx_.device(), &fi, nullptr, &fence), "vkCreateFence");
  }
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  VkResult r = vk.vkQueueSubmit(ctx_.queue(), 1, &si, fence);
  if (r != VK_SUCCESS) {
    free_fences_.push_back(fence);
    check(r, "vkQueueSubmit");
  }
  in_flight_.push_back(InFlight{serial_, fence, std::move(commands), std::move(recording)});
  ++serial_;
  ++totals_.submits;
}

void Stream::flush_locked() {
  if (current_.empty()) return;
  end(current_.cb);
  VkCommandBuffer cb = current_.cb;
  submit(cb, std::move(current_), nullptr);
  current_ = Commands{};
  poll();
}

void Stream::flush() {
  std::lock_guard lock(mutex_);
  flush_locked();
}

void Stream::retire(InFlight& f) {
  const Api& vk = *api();
  if (f.recording && f.recording->profiled()) f.recording->collect();
  check(vk.vkResetFences(ctx_.device(), 1, &f.fence), "vkResetFences");
  free_fences_.push_back(f.fence);
  if (!f.recording) free_cbs_.push_back(f.commands.cb);
  release(ctx_, f.commands);  // drops the allocations it kept alive
  completed_ = f.serial;
}

void Stream::poll() {
  while (!in_flight_.empty()) {
    VkResult r = api()->vkGetFenceStatus(ctx_.device(), in_flight_.front().fence);
    if (r == VK_NOT_READY) return;
    check(r, "vkGetFenceStatus");
    retire(in_flight_.front());
    in_flight_.pop_front();
  }
}

void Stream::wait_for(uint64_t serial) {
  if (serial >= serial_) flush_locked();
  while (completed_ < serial && !in_flight_.empty()) {
    InFlight& f = in_flight_.front();
    check(api()->vkWaitForFences(ctx_.device(), 1, &f.fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
    retire(f);
    in_flight_.pop_front();
  }
}

void Stream::synchronize() {
  std::lock_guard lock(mutex_);
  flush_locked();
  wait_for(serial_ - 1);
}

void Stream::wait_unused(const Allocation& a) {
  if (a.last_use > completed_) wait_for(a.last_use);
}

void Stream::upload(const std::shared_ptr<Allocation>& dst, size_t offset, const void* src, size_t bytes) {
  if (offset + bytes > dst->bytes())
    fail("upload of " + std::to_string(bytes) + " bytes at " + std::to_string(offset) + " into " +
         std::to_string(dst->bytes()));
  if (bytes == 0) return;
  std::lock_guard lock(mutex_);
  if (void* p = dst->mapped()) {
    wait_unused(*dst);
    std::memcpy(static_cast<char*>(p) + offset, src, bytes);
    return;
  }
  std::shared_ptr<Allocation> staging = ctx_.staging().allocate(bytes);
  std::memcpy(staging->mapped(), src, bytes);
  Commands& c = current();
  encode_copy(c, staging, 0, dst, offset, bytes);
  dst->last_use = staging->last_use = serial_;
  ++totals_.copies;
}

void Stream::download(const std::shared_ptr<Allocation>& src, size_t offset, void* dst, size_t bytes) {
  if (offset + bytes > src->bytes())
    fail("download of " + std::to_string(bytes) + " bytes at " + std::to_string(offset) + " from " +
         std::to_string(src->bytes()));
  if (bytes == 0) return;
  std::lock_guard lock(mutex_);
  if (const void* p = src->mapped()) {
    wait_unused(*src);
    std::memcpy(dst, static_cast<const char*>(p) + offset, bytes);
    return;
  }
  std::shared_ptr<Allocation> staging = ctx_.staging().allocate(bytes);
  Commands& c = current();
  encode_copy(c, src, offset, staging, 0, bytes);
  src->last_use = staging->last_use = serial_;
  ++totals_.copies;
  wait_for(serial_);
  std::memcpy(dst, staging->mapped(), bytes);
}

StreamStats Stream::stats() const {
  std::lock_guard lock(mutex_);
  return totals_;
}

std::shared_ptr<Recording> Stream::record() { return std::make_shared<Recording>(ctx_); }

void Stream::replay(const std::shared_ptr<Recording>& r) {
  if (!r->finished()) fail("replay of a recording that is not finished");
  std::lock_guard lock(mutex_);
  flush_locked();
  if (r->profiled()) wait_for(serial_ - 1);  // one set of queries: replays one at a time
  for (const auto& a : r->commands_.used) a->last_use = serial_;
  add(totals_, r->commands_.stats);
  submit(r->commands_.cb, Commands{}, r);
}

// ---- Recording -------------------------------------------------------------------------

Recording::Recording(Context& ctx) : ctx_(ctx) {
  const Api& vk = *api();
  VkCommandPoolCreateInfo ci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  ci.queueFamilyIndex = ctx.info().compute_queue_family;
  check(vk.vkCreateCommandPool(ctx.device(), &ci, nullptr, &pool_), "vkCreateCommandPool");
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  check(vk.vkAllocateCommandBuffers(ctx.device(), &ai, &commands_.cb), "vkAllocateCommandBuffers");
  // Simultaneous use: a replay may be submitted while the previous one still runs.
  begin(commands_.cb, VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT);
  const char* env = std::getenv("ALK_VK_PROFILE");
  profile_ = env && std::string_view(env) == "1";
  if (profile_ && !ctx.info().timestamp_bits) {
    std::fprintf(stderr, "[alk vulkan profile] %s has no timestamps on its compute queue: not profiled\n",
                 ctx.info().name.c_str());
    profile_ = false;
  }
  if (profile_) timestamp(VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT);
}

void Recording::timestamp(VkPipelineStageFlagBits stage) {
  const Api& vk = *api();
  if (queries_ % kQueriesPerPool == 0) {
    VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qi.queryCount = kQueriesPerPool;
    VkQueryPool pool;
    check(vk.vkCreateQueryPool(ctx_.device(), &qi, nullptr, &pool), "vkCreateQueryPool");
    query_pools_.push_back(pool);
    // Every replay resets the pool's queries before writing them again.
    vk.vkCmdResetQueryPool(commands_.cb, pool, 0, kQueriesPerPool);
  }
  vk.vkCmdWriteTimestamp(commands_.cb, stage, query_pools_.back(), queries_ % kQueriesPerPool);
  ++queries_;
}

void Recording::after_command() {
  if (!profile_) return;
  timestamp(VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT);
  labels_.push_back(label_.empty() ? "(unlabelled)" : label_);
}

void Recording::collect() {
  const Api& vk = *api();
  std::vector<uint64_t> ticks(queries_);
  for (size_t p = 0; p < query_pools_.size(); ++p) {
    const uint32_t n = std::min<uint32_t>(kQueriesPerPool, queries_ - static_cast<uint32_t>(p) * kQueriesPerPool);
    check(vk.vkGetQueryPoolResults(ctx_.device(), query_pools_[p], 0, n, n * sizeof(uint64_t), ticks.data() + p * kQueriesPerPool,
                                   sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
          "vkGetQueryPoolResults");
  }
  const uint32_t bits = ctx_.info().timestamp_bits;
  const uint64_t mask = bits >= 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - 1;
  const double ns_per_tick = ctx_.info().timestamp_period;
  Profile& prof = profile();
  std::lock_guard lock(prof.mu);
  ++prof.replays;
  for (size_t i = 0; i < labels_.size(); ++i) {
    auto& row = prof.by_label[labels_[i]];
    ++row.first;
    row.second += static_cast<double>((ticks[i + 1] - ticks[i]) & mask) * ns_per_tick;
  }
}

Recording::~Recording() {
  // The stream holds a shared_ptr to a recording while a replay is pending, so none is.
  release(ctx_, commands_);
  for (VkQueryPool p : query_pools_) api()->vkDestroyQueryPool(ctx_.device(), p, nullptr);
  api()->vkDestroyCommandPool(ctx_.device(), pool_, nullptr);
}

void Recording::dispatch(const Pipeline& pipeline, std::span<const Binding> bindings, std::span<const uint8_t> push,
                         Groups groups) {
  if (finished_) fail("dispatch into a finished recording");
  encode_dispatch(ctx_, commands_, pipeline, bindings, push, groups);
  after_command();
}

void Recording::copy(const std::shared_ptr<Allocation>& src, size_t src_offset, const std::shared_ptr<Allocation>& dst,
                     size_t dst_offset, size_t bytes) {
  if (finished_) fail("copy into a finished recording");
  encode_copy(commands_, src, src_offset, dst, dst_offset, bytes);
  after_command();
}

void Recording::keep(std::shared_ptr<const void> x) { commands_.keep.push_back(std::move(x)); }

void Recording::finish() {
  if (finished_) return;
  end(commands_.cb);
  finished_ = true;
}

}  // namespace alk::vk
