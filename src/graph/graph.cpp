#include "graph/graph.h"

#include <sys/mman.h>

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <new>

namespace alk {

namespace {
std::atomic<int64_t> g_live_buffers{0}, g_live_bytes{0};
constexpr size_t kAlign = 64;  // a cache line, and an AVX-512 vector

// Freed blocks of 1 MB and more are kept for reuse, keyed by size class (the size rounded
// up to 1/8 of its power of two): a fresh large block from the OS costs a page fault and
// a page clear per 4 KB, which for a training step's buffers costs more than the kernels.
class BlockCache {
 public:
  static constexpr size_t kMinCached = size_t{1} << 20;
  static constexpr size_t kMaxCachedBytes = size_t{2} << 30;

  static size_t size_class(size_t n) {
    if (n < kMinCached) return (n + kAlign - 1) / kAlign * kAlign;
    size_t p = size_t{1} << (63 - __builtin_clzll(n));  // highest power of two <= n
    size_t step = p / 8;
    return (n + step - 1) / step * step;
  }

  void* take(size_t cls) {
    if (cls >= kMinCached) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(cls);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= cls;
        return p;
      }
    }
    void* p = ::operator new(cls == 0 ? kAlign : cls, std::align_val_t{align_of(cls)});
    if (cls >= kHuge) ::madvise(p, cls, MADV_HUGEPAGE);  // 2 MB pages: far fewer TLB misses streaming it
    return p;
  }

  // Large blocks start on a 2 MB boundary so the kernel can back them with huge pages.
  static constexpr size_t kHuge = size_t{4} << 20;
  static size_t align_of(size_t cls) { return cls >= kHuge ? size_t{2} << 20 : kAlign; }

  void give(void* p, size_t cls) {
    if (cls >= kMinCached) {
      std::lock_guard<std::mutex> lock(mu_);
      if (cached_bytes_ + cls <= kMaxCachedBytes) {
        free_[cls].push_back(p);
        cached_bytes_ += cls;
        return;
      }
    }
    ::operator delete(p, std::align_val_t{align_of(cls)});
  }

  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [cls, blocks] : free_)
      for (void* p : blocks) ::operator delete(p, std::align_val_t{align_of(cls)});
    free_.clear();
    cached_bytes_ = 0;
  }

  ~BlockCache() { release(); }

 private:
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_bytes_ = 0;
};

BlockCache& block_cache() {
  static BlockCache cache;
  return cache;
}

}  // namespace

Buffer::Buffer(size_t n) : bytes(n) {
  data = block_cache().take(BlockCache::size_class(n));
  ++g_live_buffers;
  g_live_bytes += static_cast<int64_t>(n);
}

Buffer::~Buffer() {
  block_cache().give(data, BlockCache::size_class(bytes));
  --g_live_buffers;
  g_live_bytes -= static_cast<int64_t>(bytes);
}

void release_cached_memory() { block_cache().release(); }

namespace {
// ALK_LEAKS=1: buffers still alive when the program exits (tensors a static or a leak holds).
struct LeakReport {
  ~LeakReport() {
    const char* v = std::getenv("ALK_LEAKS");
    if (!v || !*v || std::strcmp(v, "0") == 0) return;
    std::fprintf(stderr, "[alk leaks] %lld buffers (%lld bytes) alive at exit\n",
                 static_cast<long long>(g_live_buffers.load()), static_cast<long long>(g_live_bytes.load()));
  }
} g_leak_report;
}  // namespace

int64_t Buffer::live_count() { return g_live_buffers; }
int64_t Buffer::live_bytes() { return g_live_bytes; }

int64_t Node::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

Tensor make_node(OpId op, Shape shape, DType dtype, std::vector<Tensor> inputs, Params params, Loc loc) {
  auto node = std::make_shared<Node>();
  node->op = op;
  node->shape = shape;
  node->dtype = dtype;
  node->params = std::move(params);
  node->loc = loc;
  node->inputs.reserve(inputs.size());
  for (auto& t : inputs) node->inputs.push_back(t.impl_ptr());
  auto impl = std::make_shared<TensorImpl>();
  impl->strides = contiguous_strides(shape);
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  impl->node = std::move(node);
  Tensor out(std::move(impl));
  if (eager_mode()) out.realize();
  return out;
}

Tensor make_buffer_tensor(Shape shape, DType dtype) {
  auto node = std::make_shared<Node>();
  node->shape = shape;
  node->dtype = dtype;
  node->buffer = std::make_shared<Buffer>(static_cast<size_t>(node->numel()) * dtype_size(dtype));
  auto impl = std::make_shared<TensorImpl>();
  impl->strides = contiguous_strides(shape);
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  impl->node = std::move(node);
  return Tensor(std::move(impl));
}

Tensor alias(const Tensor& t) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = t.impl()->shape;
  impl->strides = t.impl()->strides;
  impl->offset = t.impl()->offset;
  impl->dtype = t.impl()->dtype;
  impl->node = t.impl()->node;
  return Tensor(std::move(impl));
}

Tensor make_view(const Tensor& t, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = t.impl()->dtype;
  impl->node = t.impl()->node;
  return Tensor(std::move(impl));
}

namespace {
bool& eager_flag() {
  static bool eager = [] {
    const char* v = std::getenv("ALK_EAGER");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return eager;
}
}  // namespace

bool eager_mode() { return eager_flag(); }
void set_eager_mode(bool on) { eager_flag() = on; }

}  // namespace alk
