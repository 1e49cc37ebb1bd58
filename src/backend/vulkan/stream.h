// Recording and submitting work. Dispatches and copies go into a command buffer; a
// pipeline barrier is recorded only before a command whose buffer ranges conflict with
// one recorded since the last barrier (it reads or writes what an earlier command wrote,
// or writes what an earlier command reads: the arena reuses memory, so the last case is
// common). Independent dispatches run back to back.
//
// The Stream owns the command buffer being filled (a batch). flush() submits it with a
// fence; synchronize() also waits. A batch holds a shared_ptr to every allocation (and
// anything else handed to keep()) its commands use, dropped when its fence signals, so
// freeing a tensor while the GPU still reads it is safe. Every command buffer starts with
// a memory barrier from earlier submissions' (and the host's) writes and ends with one
// making its writes visible to the host, so batches and recordings compose in submission
// order with no further bookkeeping.
//
// A Recording is the same list of commands recorded once into a command buffer of its
// own and replayed any number of times (alk::compile's step on Vulkan).
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "backend/vulkan/loader.h"
#include "backend/vulkan/memory.h"

namespace alk::vk {

class Context;
struct Pipeline;

// One storage-buffer binding of a dispatch: `bytes` bytes at `offset` from the start of
// `alloc`. alloc->offset() + offset must be a multiple of Context::binding_alignment()
// and bytes at most maxStorageBufferRange.
struct Binding {
  std::shared_ptr<Allocation> alloc;
  size_t offset = 0;
  size_t bytes = 0;
  bool write = false;
};

struct Groups {
  uint32_t x = 1, y = 1, z = 1;
};

// What dispatches and copies can be recorded into: the Stream, or a Recording.
class Encoder {
 public:
  virtual ~Encoder() = default;
  // push: the push-constant bytes (pipeline.push_bytes of them, or none).
  virtual void dispatch(const Pipeline& pipeline, std::span<const Binding> bindings, std::span<const uint8_t> push,
                        Groups groups) = 0;
  virtual void copy(const std::shared_ptr<Allocation>& src, size_t src_offset, const std::shared_ptr<Allocation>& dst,
                    size_t dst_offset, size_t bytes) = 0;
  // Keeps x alive as long as the recorded commands may run.
  virtual void keep(std::shared_ptr<const void> x) = 0;
  // Names the commands encoded next (a kernel's label): the rows of ALK_VK_PROFILE's table.
  virtual void label(std::string) {}
};

struct StreamStats {
  int64_t dispatches = 0, copies = 0, barriers = 0, submits = 0;
};

namespace detail {
struct Range {
  VkBuffer buffer;
  size_t begin, end;
};
// One command buffer being recorded and everything its commands need.
struct Commands {
  VkCommandBuffer cb = VK_NULL_HANDLE;
  std::vector<VkDescriptorPool> pools;
  std::vector<Range> reads, writes;  // since the last barrier
  std::vector<std::shared_ptr<const void>> keep;
  std::vector<std::shared_ptr<Allocation>> used;
  StreamStats stats;
  bool empty() const { return cb == VK_NULL_HANDLE; }
};
}  // namespace detail

class Recording;

class Stream final : public Encoder {
 public:
  explicit Stream(Context& ctx);
  ~Stream() override;  // waits for everything submitted
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  void dispatch(const Pipeline& pipeline, std::span<const Binding> bindings, std::span<const uint8_t> push,
                Groups groups) override;
  void copy(const std::shared_ptr<Allocation>& src, size_t src_offset, const std::shared_ptr<Allocation>& dst,
            size_t dst_offset, size_t bytes) override;
  void keep(std::shared_ptr<const void> x) override;

  // Host -> device. On unified memory a memcpy (after waiting for pending commands that
  // use the allocation); else through a staging buffer and a copy in the stream (the
  // call returns at once).
  void upload(const std::shared_ptr<Allocation>& dst, size_t offset, const void* src, size_t bytes);
  // Device -> host: waits for the commands that write the allocation, then copies.
  void download(const std::shared_ptr<Allocation>& src, size_t offset, void* dst, size_t bytes);
  void flush();
  void synchronize();

  // A Recording to fill (its commands run only when replayed).
  std::shared_ptr<Recording> record();
  // Submits a finished recording after everything recorded so far.
  void replay(const std::shared_ptr<Recording>& r);

  StreamStats stats() const;  // totals over everything recorded into the stream
  Context& context() { return ctx_; }

 private:
  friend class Recording;
  struct InFlight {
    uint64_t serial;
    VkFence fence;
    detail::Commands commands;
    std::shared_ptr<Recording> recording;
  };
  detail::Commands& current();  // begins a command buffer on first use
  void submit(VkCommandBuffer cb, detail::Commands&& commands, std::shared_ptr<Recording> recording);
  void flush_locked();
  void wait_for(uint64_t serial);  // until every batch up to serial has completed
  void poll();                     // retires batches whose fences have signaled
  void retire(InFlight& f);
  void wait_unused(const Allocation& a);

  Context& ctx_;
  mutable std::mutex mutex_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  std::vector<VkCommandBuffer> free_cbs_;
  std::vector<VkFence> free_fences_;
  detail::Commands current_;
  uint64_t serial_ = 1;     // the batch being recorded
  uint64_t completed_ = 0;  // every batch up to this one has finished
  std::deque<InFlight> in_flight_;
  StreamStats totals_;
};

class Recording final : public Encoder {
 public:
  Recording(Context& ctx);
  ~Recording() override;
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;
  void dispatch(const Pipeline& pipeline, std::span<const Binding> bindings, std::span<const uint8_t> push,
                Groups groups) override;
  void copy(const std::shared_ptr<Allocation>& src, size_t src_offset, const std::shared_ptr<Allocation>& dst,
            size_t dst_offset, size_t bytes) override;
  void keep(std::shared_ptr<const void> x) override;
  void label(std::string name) override { label_ = std::move(name); }
  // Ends recording; afterwards only replay (Stream::replay) is allowed.
  void finish();
  // ALK_VK_PROFILE=1: each replay's commands are timed on the GPU (a timestamp after every
  // command; a command's time runs from the previous one's end, so work that overlaps is
  // counted once) and summed by label; the table goes to stderr at exit as
  // `[alk vulkan profile]`. Replays then wait for the previous one (one set of queries).
  bool profiled() const { return !query_pools_.empty(); }
  bool finished() const { return finished_; }
  const StreamStats& stats() const { return commands_.stats; }

 private:
  friend class Stream;
  void timestamp(VkPipelineStageFlagBits stage);  // the next query (ALK_VK_PROFILE)
  void after_command();
  void collect();  // a finished replay's times into the profile
  Context& ctx_;
  VkCommandPool pool_ = VK_NULL_HANDLE;  // its own: recording needs no lock shared with the stream
  detail::Commands commands_;
  bool finished_ = false;
  bool profile_ = false;
  std::vector<VkQueryPool> query_pools_;  // kQueriesPerPool each
  uint32_t queries_ = 0;
  std::string label_;
  std::vector<std::string> labels_;  // of command i, timed by queries i and i + 1
};

}  // namespace alk::vk
