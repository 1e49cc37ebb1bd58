#include "backend/cuda/context.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "runtime/disk_cache.h"

namespace alk::cuda {

namespace {

std::string first_lines(const std::string& s, int n) {
  std::istringstream in(s);
  std::string out, line;
  for (int i = 1; i <= n && std::getline(in, line); ++i) out += std::to_string(i) + ": " + line + "\n";
  return out;
}

// Allocation sizes are rounded so freed blocks fit later requests of similar size: 512 B
// steps below 1 MiB, 2 MiB steps above (activations and arenas are large and repeat).
size_t rounded(size_t bytes) {
  if (bytes == 0) bytes = 1;
  const size_t step = bytes < (size_t{1} << 20) ? 512 : (size_t{2} << 20);
  return (bytes + step - 1) / step * step;
}

struct CubinCache {
  std::mutex mutex;
  std::unordered_map<std::string, std::string> memory;  // key -> cubin
  CompileStats stats;
};
CubinCache& cubin_cache() {
  static CubinCache c;
  return c;
}

constexpr std::string_view kMagic{"ALKCUBN1", 8};

}  // namespace

const std::vector<DeviceProps>& devices() {
  static const std::vector<DeviceProps> list = [] {
    std::vector<DeviceProps> out;
    const Driver* d = driver();
    if (!d) return out;
    int n = 0;
    if (d->cuDeviceGetCount(&n) != CUDA_SUCCESS) return out;
    for (int i = 0; i < n; ++i) {
      CUdevice dev = 0;
      if (d->cuDeviceGet(&dev, i) != CUDA_SUCCESS) continue;
      DeviceProps p;
      p.index = i;
      char name[256] = {};
      d->cuDeviceGetName(name, sizeof name - 1, dev);
      p.name = name;
      int l2 = 0;
      d->cuDeviceGetAttribute(&p.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
      d->cuDeviceGetAttribute(&p.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
      d->cuDeviceGetAttribute(&p.multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
      d->cuDeviceGetAttribute(&p.max_shared_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev);
      d->cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev);
      p.l2_bytes = static_cast<size_t>(l2);
      d->cuDeviceTotalMem_v2(&p.memory_bytes, dev);
      // alk's kernels use warp shuffles with masks, bf16 conversions and atomics on
      // 16-bit floats: Volta (7.0) is the oldest device they compile for.
      if (p.cc_major < 7) continue;
      out.push_back(p);
    }
    return out;
  }();
  return list;
}

std::string arch_of(const DeviceProps& p) {
  std::string a = "sm_" + std::to_string(p.cc_major) + std::to_string(p.cc_minor);
  return p.cc_major == 9 && p.cc_minor == 0 ? a + "a" : a;
}

namespace {
std::vector<std::string> nvrtc_options(const Nvrtc& nv, const std::string& arch) {
  std::vector<std::string> options = {"--gpu-architecture=" + arch, "-std=c++17", "--device-as-default-execution-space"};
  if (!nv.include_dir.empty()) options.push_back("--include-path=" + nv.include_dir);
  return options;
}
// One NVRTC compile: the cubin (empty when it failed) and the program's log.
std::pair<std::string, std::string> nvrtc_compile(const Nvrtc& nv, const std::string& source,
                                                  const std::vector<std::string>& options, const std::string& arch) {
  nvrtcProgram prog = nullptr;
  if (nvrtcResult r = nv.nvrtcCreateProgram(&prog, source.c_str(), "alk_kernel.cu", 0, nullptr, nullptr); r != 0)
    fail(std::string("nvrtcCreateProgram failed: ") + nv.nvrtcGetErrorString(r));
  std::vector<const char*> opts;
  for (const std::string& o : options) opts.push_back(o.c_str());
  const nvrtcResult compiled = nv.nvrtcCompileProgram(prog, static_cast<int>(opts.size()), opts.data());
  size_t log_size = 0;
  nv.nvrtcGetProgramLogSize(prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size) nv.nvrtcGetProgramLog(prog, log.data());
  std::string cubin;
  if (compiled == 0) {
    size_t bytes = 0;
    nv.nvrtcGetCUBINSize(prog, &bytes);
    cubin.resize(bytes);
    if (bytes) nv.nvrtcGetCUBIN(prog, cubin.data());
  }
  nv.nvrtcDestroyProgram(&prog);
  if (compiled != 0 || cubin.empty())
    fail("CUDA compile (NVRTC, " + arch + ") failed: " + nv.nvrtcGetErrorString(compiled) + "\n" + log +
         "source (first lines):\n" + first_lines(source, 12));
  return {std::move(cubin), std::move(log)};
}
}  // namespace

std::string ptxas_report(const std::string& source, const std::string& arch) {
  const Nvrtc* nv = nvrtc();
  if (!nv) fail("cannot compile CUDA kernels: " + nvrtc_unavailable_reason());
  std::vector<std::string> options = nvrtc_options(*nv, arch);
  options.push_back("--ptxas-options=-v");
  return nvrtc_compile(*nv, source, options, arch).second;
}

std::string compile_cubin(const std::string& source, const std::string& arch) {
  const Nvrtc* nv = nvrtc();
  if (!nv) fail("cannot compile CUDA kernels: " + nvrtc_unavailable_reason());
  int major = 0, minor = 0;
  nv->nvrtcVersion(&major, &minor);
  const std::vector<std::string> options = nvrtc_options(*nv, arch);
  std::string key = "nvrtc " + std::to_string(major) + "." + std::to_string(minor);
  for (const std::string& o : options) key += " " + o;
  key += "\n" + source;

  CubinCache& cache = cubin_cache();
  {
    std::lock_guard lock(cache.mutex);
    if (auto it = cache.memory.find(key); it != cache.memory.end()) {
      ++cache.stats.memory_hits;
      return it->second;
    }
  }
  static const std::string dir = cache_dir("cuda");
  char name[40];
  std::snprintf(name, sizeof name, "/%016llx.cubin", static_cast<unsigned long long>(fnv1a(key)));
  const std::string path = dir.empty() ? std::string() : dir + name;
  if (!path.empty())
    if (std::optional<std::string> cubin = read_cache_entry(path, kMagic, key); cubin && !cubin->empty()) {
      std::lock_guard lock(cache.mutex);
      ++cache.stats.disk_hits;
      return cache.memory.emplace(key, std::move(*cubin)).first->second;
    }

  std::string cubin = nvrtc_compile(*nv, source, options, arch).first;
  if (!path.empty()) write_cache_entry(path, kMagic, key, cubin);
  std::lock_guard lock(cache.mutex);
  ++cache.stats.compiles;
  return cache.memory.emplace(key, std::move(cubin)).first->second;
}

CompileStats compile_stats() {
  std::lock_guard lock(cubin_cache().mutex);
  return cubin_cache().stats;
}

// ---- Context ----

Context& Context::get(int index) {
  static std::mutex m;
  static std::map<int, Context*> opened;  // never destroyed: buffers in statics free into them at exit
  std::lock_guard lock(m);
  auto& c = opened[index];
  if (!c) {
    const auto& list = devices();
    const DeviceProps* props = nullptr;
    for (const DeviceProps& p : list)
      if (p.index == index) props = &p;
    if (!props) fail("no CUDA device " + std::to_string(index));
    c = new Context(*props);
  }
  return *c;
}

Context::Context(const DeviceProps& props) : props_(props), arch_(arch_of(props)) {
  const Driver& d = *driver();
  CUdevice dev = 0;
  check(d.cuDeviceGet(&dev, props.index), "cuDeviceGet");
  check(d.cuDevicePrimaryCtxRetain(&ctx_, dev), "cuDevicePrimaryCtxRetain");
  check(d.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
  check(d.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  // The index flag exists before any capture, so no recording ever contains its clearing.
  check(d.cuMemAlloc_v2(&flag_, 32), "cuMemAlloc");
  check(d.cuMemsetD8Async(flag_, 0, 32, stream_), "cuMemsetD8Async");
  check(d.cuStreamSynchronize(stream_), "cuStreamSynchronize");
}

void Context::make_current() const { check(driver()->cuCtxSetCurrent(ctx_), "cuCtxSetCurrent"); }

CUdeviceptr Context::allocate(size_t bytes) {
  const size_t size = rounded(bytes);
  {
    std::lock_guard lock(mutex_);
    stats_.in_use_bytes += static_cast<int64_t>(size);
    stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.in_use_bytes);
    if (auto it = free_blocks_.find(size); it != free_blocks_.end()) {
      const CUdeviceptr p = it->second;
      free_blocks_.erase(it);
      cached_bytes_ -= static_cast<int64_t>(size);
      return p;
    }
  }
  make_current();
  CUdeviceptr p = 0;
  CUresult r = driver()->cuMemAlloc_v2(&p, size);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {  // what the cache holds may make room
    synchronize();
    trim();
    r = driver()->cuMemAlloc_v2(&p, size);
  }
  if (r == CUDA_ERROR_OUT_OF_MEMORY)
    fail("cuda:" + std::to_string(props_.index) + " is out of memory allocating " + std::to_string(bytes) + " bytes");
  check(r, "cuMemAlloc");
  return p;
}

void Context::release(CUdeviceptr ptr, size_t bytes) {
  std::lock_guard lock(mutex_);
  const size_t size = rounded(bytes);
  stats_.in_use_bytes -= static_cast<int64_t>(size);
  free_blocks_.emplace(size, ptr);
  cached_bytes_ += static_cast<int64_t>(size);
}

void Context::trim() {
  std::multimap<size_t, CUdeviceptr> blocks;
  {
    std::lock_guard lock(mutex_);
    blocks.swap(free_blocks_);
    cached_bytes_ = 0;
  }
  if (blocks.empty()) return;
  make_current();
  check(driver()->cuStreamSynchronize(stream_), "cuStreamSynchronize");  // queued work may still use them
  for (auto& [size, p] : blocks) driver()->cuMemFree_v2(p);
}

Context::MemoryStats Context::memory_stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

int64_t Context::cached_bytes() const {
  std::lock_guard lock(mutex_);
  return cached_bytes_;
}

CUdeviceptr Context::scratch(size_t bytes) {
  if (capturing_) {  // the smallest block an earlier op of this recording is done with
    auto best = captured_free_.end();
    for (auto it = captured_free_.begin(); it != captured_free_.end(); ++it)
      if (it->second >= bytes && (best == captured_free_.end() || it->second < best->second)) best = it;
    if (best != captured_free_.end()) {
      scratch_.push_back(*best);
      captured_free_.erase(best);
      return scratch_.back().first;
    }
  }
  const CUdeviceptr p = allocate(bytes);
  scratch_.emplace_back(p, bytes);
  return p;
}

void Context::release_scratch() {
  if (capturing_) {  // kept for the recording, free for its later ops
    captured_free_.insert(captured_free_.end(), scratch_.begin(), scratch_.end());
    scratch_.clear();
    return;
  }
  for (auto& [p, bytes] : scratch_) release(p, bytes);
  scratch_.clear();
}

void Context::upload(CUdeviceptr dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (capturing_) fail("an upload while a CUDA graph is being recorded");
  make_current();
  const Driver& d = *driver();
  // Small and medium uploads go through pinned memory, so the copy is asynchronous and
  // the caller's buffer is free at return; huge ones are copied from pageable memory
  // (the driver stages those itself, synchronously).
  constexpr size_t kStagedLimit = size_t{64} << 20;
  if (bytes > kStagedLimit) {
    check(d.cuMemcpyHtoDAsync_v2(dst, src, bytes, stream_), "cuMemcpyHtoDAsync");
    return;
  }
  Staging* slot = nullptr;
  for (Staging& s : staging_)
    if (s.bytes >= bytes && d.cuEventQuery(s.done) == CUDA_SUCCESS) {
      slot = &s;
      break;
    }
  if (!slot) {
    constexpr size_t kMaxStagingBlocks = 16;
    if (staging_.size() >= kMaxStagingBlocks) {  // wait for the oldest and grow it if needed
      Staging& s = staging_.front();
      check(d.cuEventSynchronize(s.done), "cuEventSynchronize");
      if (s.bytes < bytes) {
        d.cuMemFreeHost(s.host);
        s.host = nullptr;
        s.bytes = std::max(bytes, size_t{1} << 20);
        check(d.cuMemHostAlloc(&s.host, s.bytes, 0), "cuMemHostAlloc");
      }
      slot = &s;
    } else {
      Staging s;
      s.bytes = std::max(bytes, size_t{1} << 20);
      check(d.cuMemHostAlloc(&s.host, s.bytes, 0), "cuMemHostAlloc");
      check(d.cuEventCreate(&s.done, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
      staging_.push_back(s);
      slot = &staging_.back();
    }
  }
  std::memcpy(slot->host, src, bytes);
  check(d.cuMemcpyHtoDAsync_v2(dst, slot->host, bytes, stream_), "cuMemcpyHtoDAsync");
  check(d.cuEventRecord(slot->done, stream_), "cuEventRecord");
}

void Context::download(CUdeviceptr src, void* dst, size_t bytes) {
  if (capturing_) fail("a download while a CUDA graph is being recorded");
  make_current();
  if (bytes) check(driver()->cuMemcpyDtoHAsync_v2(dst, src, bytes, stream_), "cuMemcpyDtoHAsync");
  synchronize();
}

void Context::copy(CUdeviceptr src, CUdeviceptr dst, size_t bytes) {
  if (bytes == 0) return;
  make_current();
  check(driver()->cuMemcpyDtoDAsync_v2(dst, src, bytes, stream_), "cuMemcpyDtoDAsync");
}

void Context::memset0(CUdeviceptr dst, size_t bytes) {
  if (bytes == 0 || compile_only) return;
  check(driver()->cuMemsetD8Async(dst, 0, bytes, stream_), "cuMemsetD8Async");
}

void Context::synchronize() {
  if (capturing_) return;
  make_current();
  check(driver()->cuStreamSynchronize(stream_), "cuStreamSynchronize (a kernel failed)");
  check_index_flag();
}

bool Context::loaded(std::string_view entry) const {
  std::lock_guard lock(mutex_);
  for (const auto& [key, f] : functions_)
    if (key.size() > entry.size() && key[entry.size()] == '\n' && key.compare(0, entry.size(), entry) == 0) return true;
  return false;
}

CUfunction Context::function(const std::string& source, const std::string& entry, int dynamic_shared) {
  const std::string key = entry + "\n" + source;
  CUfunction f = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (auto it = functions_.find(key); it != functions_.end()) f = it->second;
  }
  if (!f) {
    const std::string cubin = compile_cubin(source, arch_);
    make_current();
    CUmodule mod = nullptr;
    check(driver()->cuModuleLoadData(&mod, cubin.data()), "cuModuleLoadData");
    check(driver()->cuModuleGetFunction(&f, mod, entry.c_str()), ("cuModuleGetFunction(" + entry + ")").c_str());
    std::lock_guard lock(mutex_);
    functions_.emplace(key, f);
  }
  // Beyond 48 KiB a function must opt in to its dynamic shared memory; one source may be
  // launched with several sizes (attention: head dims with the same lanes per row).
  if (dynamic_shared > 48 * 1024) {
    std::lock_guard lock(mutex_);
    int& allowed = shared_opt_in_[f];
    if (dynamic_shared > allowed) {
      check(driver()->cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dynamic_shared),
            "cuFuncSetAttribute(max dynamic shared memory)");
      allowed = dynamic_shared;
    }
  }
  return f;
}

void Context::launch(CUfunction f, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block, unsigned shared,
                     Args& args) {
  if (compile_only || grid_x == 0 || grid_y == 0 || grid_z == 0) return;
  make_current();
  finish_timing();
  check(driver()->cuLaunchKernel(f, grid_x, grid_y, grid_z, block, 1, 1, shared, stream_, args.pointers(), nullptr),
        "cuLaunchKernel");
}

void Context::finish_timing() {
  if (!timing_start_) return;
  check(driver()->cuEventRecord(timing_start_, stream_), "cuEventRecord");
  timing_start_ = nullptr;
}

CUdeviceptr Context::index_flag() { return flag_; }

uint64_t Context::add_index_launch(IndexLaunch l) {
  std::lock_guard lock(mutex_);
  const uint64_t id = next_launch_++;
  index_launches_.emplace(id, std::move(l));
  index_pending_ = true;
  return id;
}

void Context::check_index_flag() {
  {
    std::lock_guard lock(mutex_);
    if (!index_pending_ || !flag_) return;
  }
  uint64_t words[3] = {};
  check(driver()->cuMemcpyDtoHAsync_v2(words, flag_, sizeof words, stream_), "cuMemcpyDtoHAsync");
  check(driver()->cuStreamSynchronize(stream_), "cuStreamSynchronize");
  if (words[0] == 0) return;
  check(driver()->cuMemsetD8Async(flag_, 0, 32, stream_), "cuMemsetD8Async");
  IndexLaunch l;
  {
    std::lock_guard lock(mutex_);
    auto it = index_launches_.find(words[0]);
    if (it == index_launches_.end()) fail("a CUDA index kernel reported index " + std::to_string(words[2]) + " out of range");
    l = it->second;
  }
  const auto value = static_cast<int64_t>(words[2]);
  throw Error(l.op, l.what + " " + std::to_string(value) + " is out of range for dim " + std::to_string(l.dim) +
                        " of size " + std::to_string(l.size) + " (valid range [0, " + std::to_string(l.size) + "))",
              l.loc);
}

void Context::begin_capture() {
  make_current();
  check(driver()->cuStreamBeginCapture_v2(stream_, CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture");
  capturing_ = true;
}

Context::Graph Context::end_capture() {
  capturing_ = false;
  CUgraph graph = nullptr;
  check(driver()->cuStreamEndCapture(stream_, &graph), "cuStreamEndCapture");
  Graph g;
  g.scratch.swap(scratch_);
  g.scratch.insert(g.scratch.end(), captured_free_.begin(), captured_free_.end());
  captured_free_.clear();
  CUresult r = driver()->cuGraphInstantiateWithFlags(&g.exec, graph, 0);
  driver()->cuGraphDestroy(graph);
  check(r, "cuGraphInstantiate");
  return g;
}

void Context::destroy(Graph& g) {
  if (g.exec) {
    synchronize();
    driver()->cuGraphExecDestroy(g.exec);
  }
  g.exec = nullptr;
  for (auto& [p, bytes] : g.scratch) release(p, bytes);
  g.scratch.clear();
}

void Context::replay(const Graph& g) {
  make_current();
  check(driver()->cuGraphLaunch(g.exec, stream_), "cuGraphLaunch");
}

}  // namespace alk::cuda
