// The Vulkan backend's core: discovery, memory, transfers, shaders and their caches, the
// command stream's barriers, recorded command buffers. Skips without a Vulkan device.
#include "required.h"
#include <gtest/gtest.h>

#ifdef ALK_HAVE_VULKAN
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "alk/error.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/shader.h"
#include "backend/vulkan/stream.h"
#include "vulkan_test_util.h"

// LeakSanitizer: Mesa 22.3's lavapipe leaks 48 bytes per compute pipeline it creates
// (unreachable inside libvulkan_lvp.so, whatever the application frees). Not alk's memory;
// the hook is the sanitizer's documented way to say so for this test binary.
extern "C" const char* __lsan_default_suppressions() { return "leak:libvulkan_lvp.so\n"; }

namespace alk::vk {
namespace {

TEST(VulkanDevices, DiscoveryOrderAndLimits) {
  if (devices().empty()) {
    ALK_SKIP_OR_FAIL_IF_REQUIRED("vulkan", "no Vulkan device: " + unavailable_reason());
  }
  const auto& list = devices();
  for (size_t i = 0; i < list.size(); ++i) {
    const DeviceInfo& d = list[i];
    SCOPED_TRACE(d.describe());
    EXPECT_EQ(d.index, static_cast<int>(i));
    if (i > 0) {
      EXPECT_LE(list[i - 1].kind, d.kind) << "discrete, integrated, virtual, then CPU";
    }
    EXPECT_FALSE(d.name.empty());
    EXPECT_GT(d.min_storage_offset_alignment, 0u);
    EXPECT_GE(d.max_storage_buffer_range, 1u << 27);  // the Vulkan minimum
    EXPECT_GE(d.max_push_constants, 128u);            // ditto: Map kernels rely on it
    EXPECT_GE(d.max_workgroup_invocations, 256u);     // Map kernels use 256 per group
    EXPECT_NE(d.compute_queue_family, UINT32_MAX);
    EXPECT_FALSE(d.heaps.empty());
  }
  std::cout << list[0].describe();
}

TEST(VulkanDevices, ParseNames) {
  EXPECT_EQ(parse_device_name("vulkan"), 0);
  EXPECT_EQ(parse_device_name("vulkan:0"), 0);
  EXPECT_EQ(parse_device_name("vulkan:12"), 12);
  EXPECT_EQ(parse_device_name("vulkan:"), -1);
  EXPECT_EQ(parse_device_name("vulkan:x"), -1);
  EXPECT_EQ(parse_device_name("vulkan:-1"), -1);
  EXPECT_EQ(parse_device_name("cuda:0"), -1);
}

TEST(VulkanDevices, MissingDeviceIndexIsAnError) {
  if (devices().empty()) {
    ALK_SKIP_OR_FAIL_IF_REQUIRED("vulkan", "no Vulkan device: " + unavailable_reason());
  }
  EXPECT_THROW(Context::get(static_cast<int>(devices().size())), Error);
}

// The binary must start and report why when there is no loader: run this test binary
// again with a loader name that cannot be opened.
TEST(VulkanDevices, NoLoaderIsReportedNotFatal) {
  if (const char* l = std::getenv("ALK_VK_LOADER"); l && std::string_view(l) == "/nonexistent/libvulkan.so.1") {
    EXPECT_TRUE(devices().empty());
    EXPECT_NE(unavailable_reason().find("no Vulkan loader"), std::string::npos) << unavailable_reason();
    EXPECT_THROW(Context::get(0), Error);
    return;
  }
  std::string out;
  EXPECT_EQ(testing::run_this_binary("ALK_VK_LOADER=/nonexistent/libvulkan.so.1",
                                     "--gtest_filter=VulkanDevices.NoLoaderIsReportedNotFatal", out),
            0)
      << out;
}

// Discrete GPUs upload and download through staging buffers; unified-memory devices
// (lavapipe) map tensors directly. Run the transfer, stream and Map tests again on the
// staging path, whatever this device is.
TEST(VulkanStream, StagingPathPassesTheSameTests) {
  if (std::getenv("ALK_VK_FORCE_STAGING")) GTEST_SKIP() << "already on the staging path";
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  // Then with small state in host-visible device-local memory (a discrete GPU's BAR:
  // replays are one submit), and without it (replays add a staging copy).
  for (const char* env : {"ALK_VK_FORCE_STAGING=1", "ALK_VK_FORCE_STAGING=1 ALK_VK_NO_MAPPED_STATE=1"}) {
    std::string out;
    EXPECT_EQ(testing::run_this_binary(
                  env, "--gtest_filter='VulkanStream.*:VulkanMap.*:VulkanDevice.*:VulkanCompile.*' --gtest_brief=1", out),
              0)
        << env << "\n" << out;
  }
}

TEST(VulkanPool, AlignmentReuseAndDedicatedBlocks) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  Pool& pool = ctx->pool();
  const size_t align = ctx->binding_alignment();
  EXPECT_EQ(align % ctx->info().min_storage_offset_alignment, 0u);
  EXPECT_EQ(align % 64, 0u);
  const PoolStats before = pool.stats();
  std::vector<std::shared_ptr<Allocation>> live;
  for (size_t bytes : {1, 3, 64, 65, 1000, 4096, 7}) {
    live.push_back(pool.allocate(bytes));
    EXPECT_EQ(live.back()->offset() % align, 0u) << bytes;
    EXPECT_EQ(live.back()->bytes(), bytes);
  }
  // No two live allocations overlap.
  for (size_t i = 0; i < live.size(); ++i)
    for (size_t j = i + 1; j < live.size(); ++j)
      if (live[i]->buffer() == live[j]->buffer()) {
        EXPECT_TRUE(live[i]->offset() + live[i]->bytes() <= live[j]->offset() ||
                    live[j]->offset() + live[j]->bytes() <= live[i]->offset());
      }
  // A freed range is handed out again (first fit), and neighbours coalesce.
  const VkBuffer buf = live[2]->buffer();
  const size_t off = live[2]->offset();
  live[2].reset();
  auto again = pool.allocate(64);
  EXPECT_EQ(again->buffer(), buf);
  EXPECT_EQ(again->offset(), off);
  // Large requests get their own block; freed, it is kept (cached_bytes) and handed to the
  // next request it fits, same size or up to a quarter smaller, and trim() returns it.
  pool.trim();
  const PoolStats mid = pool.stats();
  EXPECT_EQ(mid.cached_bytes, 0u);
  const size_t large = 2 * pool.options().dedicated_bytes + 1;
  auto big = pool.allocate(large);
  EXPECT_EQ(pool.stats().blocks, mid.blocks + 1);
  EXPECT_EQ(big->offset(), 0u);
  const VkBuffer big_buffer = big->buffer();
  big.reset();
  EXPECT_EQ(pool.stats().blocks, mid.blocks + 1);
  EXPECT_GE(pool.stats().cached_bytes, large);
  EXPECT_EQ(pool.stats().used_bytes, mid.used_bytes);
  big = pool.allocate(large - large / 8);
  EXPECT_EQ(big->buffer(), big_buffer);
  EXPECT_EQ(pool.stats().cached_bytes, 0u);
  // Two live at once: the second gets a block of its own. Far smaller: not the kept one.
  auto second = pool.allocate(large);
  EXPECT_NE(second->buffer(), big_buffer);
  second.reset();
  big.reset();
  auto half = pool.allocate(large / 2 + pool.options().dedicated_bytes / 4);
  EXPECT_EQ(pool.stats().blocks, mid.blocks + 3);
  half.reset();
  pool.trim();
  EXPECT_EQ(pool.stats().blocks, mid.blocks);
  EXPECT_EQ(pool.stats().cached_bytes, 0u);
  live.clear();
  again.reset();
  EXPECT_EQ(pool.stats().allocations, before.allocations);
  EXPECT_EQ(pool.stats().used_bytes, before.used_bytes);
}

TEST(VulkanStream, UploadDownloadOddSizesAndOffsets) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  std::mt19937 rng(1);
  for (size_t bytes : {size_t(1), size_t(3), size_t(17), size_t(4099), size_t(1) << 20, (size_t(17) << 20) + 5}) {
    std::vector<uint8_t> data(bytes);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    auto a = ctx->pool().allocate(bytes + 13);
    ctx->stream().upload(a, 13, data.data(), bytes);
    std::vector<uint8_t> back(bytes);
    ctx->stream().download(a, 13, back.data(), bytes);
    EXPECT_EQ(back, data) << bytes << " bytes";
    // A partial read from an odd offset inside.
    if (bytes > 5) {
      std::vector<uint8_t> part(bytes - 5);
      ctx->stream().download(a, 16, part.data(), part.size() - 1);
      EXPECT_TRUE(std::equal(part.begin(), part.end() - 1, data.begin() + 3));
    }
  }
  auto a = ctx->pool().allocate(8);
  uint8_t x[9] = {};
  EXPECT_THROW(ctx->stream().upload(a, 0, x, 9), Error);
  EXPECT_THROW(ctx->stream().download(a, 4, x, 5), Error);
}

TEST(VulkanStream, DeviceCopy) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  std::vector<uint8_t> data(1001);
  std::iota(data.begin(), data.end(), 0);
  auto a = ctx->pool().allocate(1001), b = ctx->pool().allocate(1010);
  ctx->stream().upload(a, 0, data.data(), data.size());
  ctx->stream().copy(a, 1, b, 7, 1000);
  std::vector<uint8_t> back(1000);
  ctx->stream().download(b, 7, back.data(), back.size());
  EXPECT_TRUE(std::equal(back.begin(), back.end(), data.begin() + 1));
}

// A small template kernel, written the way template ops will be: bindings in the order
// the caller lists them, a std430 push-constant block.
const char* kAddOne = R"(#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer In { float x[]; };
layout(std430, binding = 1) writeonly buffer Out { float y[]; };
layout(push_constant) uniform Params { uint n; float add; } p;
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i < p.n) y[i] = x[i] + p.add;
}
)";

struct AddOneParams {
  uint32_t n;
  float add;
};

std::span<const uint8_t> bytes_of(const AddOneParams& p) { return {reinterpret_cast<const uint8_t*>(&p), sizeof p}; }

TEST(VulkanStream, BarriersOnlyBetweenDependentDispatches) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  const Pipeline& pipe = ctx->pipeline(kAddOne, 2, sizeof(AddOneParams));
  const uint32_t n = 1000;
  std::vector<float> x(n);
  std::iota(x.begin(), x.end(), 0.0f);
  const size_t bytes = n * 4;
  auto a = ctx->pool().allocate(bytes), b = ctx->pool().allocate(bytes), c = ctx->pool().allocate(bytes),
       d = ctx->pool().allocate(bytes);
  Stream& s = ctx->stream();
  s.upload(a, 0, x.data(), bytes);
  s.synchronize();
  const StreamStats start = s.stats();
  AddOneParams p{n, 1.0f};
  auto bind = [&](const std::shared_ptr<Allocation>& in, const std::shared_ptr<Allocation>& out) {
    return std::vector<Binding>{{in, 0, bytes, false}, {out, 0, bytes, true}};
  };
  s.dispatch(pipe, bind(a, b), bytes_of(p), {(n + 63) / 64});
  s.dispatch(pipe, bind(a, c), bytes_of(p), {(n + 63) / 64});  // independent: reads a, writes c
  EXPECT_EQ(s.stats().barriers - start.barriers, 0);
  s.dispatch(pipe, bind(b, d), bytes_of(p), {(n + 63) / 64});  // reads b (written above): barrier
  EXPECT_EQ(s.stats().barriers - start.barriers, 1);
  s.dispatch(pipe, bind(c, a), bytes_of(p), {(n + 63) / 64});  // writes a (read before the barrier? no: after it, c only)
  EXPECT_EQ(s.stats().barriers - start.barriers, 1);
  s.dispatch(pipe, bind(d, c), bytes_of(p), {(n + 63) / 64});  // writes c, which the previous one reads: barrier
  EXPECT_EQ(s.stats().barriers - start.barriers, 2);
  std::vector<float> out(n);
  s.download(c, 0, out.data(), bytes);  // c = d + 1 = b + 2 = x + 3
  s.download(a, 0, x.data(), bytes);   // a = c(old) + 1 = x + 2
  for (uint32_t i = 0; i < n; ++i) {
    ASSERT_EQ(out[i], static_cast<float>(i) + 3.0f) << i;
    ASSERT_EQ(x[i], static_cast<float>(i) + 2.0f) << i;
  }
}

TEST(VulkanStream, LongRunsAreSubmittedInPieces) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  const Pipeline& pipe = ctx->pipeline(kAddOne, 2, sizeof(AddOneParams));
  const uint32_t n = 64;
  std::vector<float> x(n, 0.0f);
  auto a = ctx->pool().allocate(n * 4), b = ctx->pool().allocate(n * 4);
  Stream& s = ctx->stream();
  s.upload(a, 0, x.data(), n * 4);
  s.synchronize();
  const int64_t submits = s.stats().submits;
  AddOneParams p{n, 1.0f};
  std::vector<Binding> ab{{a, 0, n * 4, false}, {b, 0, n * 4, true}}, ba{{b, 0, n * 4, false}, {a, 0, n * 4, true}};
  for (int i = 0; i < 500; ++i) s.dispatch(pipe, i % 2 ? ba : ab, bytes_of(p), {1});  // dependent chain
  EXPECT_GE(s.stats().submits - submits, 1) << "no submit before the host reads";
  s.download(b, 0, x.data(), n * 4);  // b = a + 1 after 499 steps... a chain of 500 +1s ends in b
  for (float v : x) ASSERT_EQ(v, 499.0f);
}

TEST(VulkanStream, FreedBuffersLiveUntilTheirCommandsFinish) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  const Pipeline& pipe = ctx->pipeline(kAddOne, 2, sizeof(AddOneParams));
  const uint32_t n = 4096;
  std::vector<float> x(n, 5.0f);
  auto out = ctx->pool().allocate(n * 4);
  {
    auto in = ctx->pool().allocate(n * 4);
    ctx->stream().upload(in, 0, x.data(), n * 4);
    AddOneParams p{n, 2.0f};
    std::vector<Binding> b{{in, 0, n * 4, false}, {out, 0, n * 4, true}};
    ctx->stream().dispatch(pipe, b, bytes_of(p), {n / 64});
  }  // `in` is dropped by the caller here; the pending dispatch still holds it
  std::vector<float> y(n);
  ctx->stream().download(out, 0, y.data(), n * 4);
  for (float v : y) ASSERT_EQ(v, 7.0f);
}

TEST(VulkanStream, RecordOnceReplayMany) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  const Pipeline& pipe = ctx->pipeline(kAddOne, 2, sizeof(AddOneParams));
  const uint32_t n = 300;
  std::vector<float> x(n, 1.0f);
  auto a = ctx->pool().allocate(n * 4), b = ctx->pool().allocate(n * 4);
  ctx->stream().upload(a, 0, x.data(), n * 4);
  // One step: b = a + 1; a = b + 1 (dependent: one barrier between).
  auto rec = ctx->stream().record();
  AddOneParams p{n, 1.0f};
  std::vector<Binding> ab{{a, 0, n * 4, false}, {b, 0, n * 4, true}}, ba{{b, 0, n * 4, false}, {a, 0, n * 4, true}};
  rec->dispatch(pipe, ab, bytes_of(p), {(n + 63) / 64});
  rec->dispatch(pipe, ba, bytes_of(p), {(n + 63) / 64});
  rec->finish();
  EXPECT_EQ(rec->stats().barriers, 1);
  EXPECT_THROW(rec->dispatch(pipe, ab, bytes_of(p), {1}), Error);
  for (int i = 0; i < 5; ++i) ctx->stream().replay(rec);
  std::vector<float> y(n);
  ctx->stream().download(a, 0, y.data(), n * 4);
  for (float v : y) ASSERT_EQ(v, 11.0f);  // 1 + 2 per replay
}

TEST(VulkanShaders, CompileErrorCarriesLogAndSource) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  try {
    compile_glsl("#version 450\nlayout(local_size_x = 1) in;\nvoid main() { undefined_thing = 1; }\n", "bad.comp");
    FAIL() << "expected a compile error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("undefined_thing"), std::string::npos) << what;
    EXPECT_NE(what.find("3: void main()"), std::string::npos) << what;  // the source's first lines, numbered
  }
}

TEST(VulkanShaders, MemoryAndDiskCache) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / ("alk_vk_cache_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  ShaderCache cache(dir.string(), "test-device|1");
  // A source unique to this run, so no earlier run's entry exists.
  const std::string src = std::string(kAddOne) + "// " + dir.string() + "\n";
  const std::vector<uint32_t> first = cache.spirv(src);
  EXPECT_EQ(cache.stats().compiles, 1);
  EXPECT_EQ(cache.spirv(src), first);
  EXPECT_EQ(cache.stats().memory_hits, 1);
  EXPECT_EQ(cache.stats().compiles, 1);
  // The disk: a fresh cache (a new process, as far as it knows) finds the entry.
  ShaderCache again(dir.string(), "test-device|1");
  EXPECT_EQ(again.spirv(src), first);
  EXPECT_EQ(again.stats().disk_hits, 1);
  EXPECT_EQ(again.stats().compiles, 0);
  // Another device or driver: another entry.
  ShaderCache other(dir.string(), "test-device|2");
  EXPECT_NE(other.path_for(src), again.path_for(src));
  // A damaged entry is recompiled, never trusted, and rewritten.
  const std::string path = again.path_for(src);
  ASSERT_TRUE(fs::exists(path));
  for (int damage = 0; damage < 3; ++damage) {
    {
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      if (damage == 0) {  // a changed byte of the stored source: not the source asked for
        f.seekp(20);
        f.put('#');
      } else if (damage == 1) {  // truncated
        f.close();
        fs::resize_file(path, fs::file_size(path) - 7);
      } else {  // garbage SPIR-V magic
        f.seekp(static_cast<std::streamoff>(24 + src.size()));
        f.write("\0\0\0\0", 4);
      }
    }
    ShaderCache fresh(dir.string(), "test-device|1");
    EXPECT_EQ(fresh.spirv(src), first) << damage;
    EXPECT_EQ(fresh.stats().compiles, 1) << damage;
    EXPECT_EQ(fresh.stats().disk_rejected, 1) << damage;
    ShaderCache repaired(dir.string(), "test-device|1");
    EXPECT_EQ(repaired.spirv(src), first);
    EXPECT_EQ(repaired.stats().disk_hits, 1) << damage;
  }
  fs::remove_all(dir);
}

TEST(VulkanShaders, PipelinesAreCachedBySource) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  const Pipeline& a = ctx->pipeline(kAddOne, 2, sizeof(AddOneParams));
  const Pipeline& b = ctx->pipeline(std::string(kAddOne), 2, sizeof(AddOneParams));
  EXPECT_EQ(&a, &b);
  const Pipeline& c = ctx->pipeline(std::string(kAddOne) + "\n", 2, sizeof(AddOneParams));
  EXPECT_NE(&a, &c);
  ctx->save_pipeline_cache();  // must not fail (no directory is fine too)
}

}  // namespace
}  // namespace alk::vk

#else
TEST(VulkanDevices, NotBuilt) { ALK_SKIP_OR_FAIL_IF_REQUIRED("vulkan", "built without the Vulkan backend (ALK_VULKAN=OFF)"); }
#endif
