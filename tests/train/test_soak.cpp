// Soak: 10,000 compiled training steps of a test-sized GPT with a checkpoint every 1,000
// must not grow the process: resident memory sampled every 1,000 steps stays flat after
// the warm-up, and the kernel cache holds the same kernels at the end as after the first
// checkpoint (a replay compiles nothing new).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "alk/compile.h"
#include "alk/io.h"
#include "alk/nn.h"
#include "alk/optim.h"
#include "backend/cpu/kernel_cache.h"
#include "io/temp_dir.h"
#include "testing.h"

namespace alk {
namespace {

// Resident set size now (not the peak), from /proc/self/statm.
int64_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

TEST(Soak, TenThousandCompiledStepsWithCheckpointsKeepMemoryFlat) {
  manual_seed(3);
  nn::GPTConfig cfg;
  cfg.vocab = 48, cfg.ctx = 16, cfg.dim = 16, cfg.heads = 2, cfg.layers = 1;
  nn::GPT model(cfg);
  optim::AdamW opt(model.named_parameters(), 1e-3);
  Program step = testing::compiled_lm_step(model, opt);
  testing::TempDir dir;
  std::vector<int64_t> ids(2 * 16), next(2 * 16);
  std::vector<int64_t> rss;  // after each checkpoint
  size_t kernels_after_first = 0;
  for (int s = 1; s <= 10000; ++s) {
    for (size_t i = 0; i < ids.size(); ++i) {
      ids[i] = static_cast<int64_t>((i * 5 + static_cast<size_t>(s)) % 48);
      next[i] = (ids[i] + 1) % 48;
    }
    step({tensor(ids, {2, 16}), tensor(next, {2, 16})});
    if (s % 1000 == 0) {
      const double loss = step.captured("loss").item();
      ASSERT_TRUE(std::isfinite(loss)) << "step " << s;
      save_safetensors(dir / "model.safetensors", model.state_dict());  // atomic: temp file, then rename
      rss.push_back(rss_bytes());
      if (s == 1000) kernels_after_first = cpu_kernel_cache().size();
    }
  }
  EXPECT_EQ(cpu_kernel_cache().size(), kernels_after_first) << "replays compiled new kernels";
  // After the first two samples (allocator and page-cache warm-up), resident memory may
  // wander by allocator noise, not grow with the step count.
  std::string curve;
  for (int64_t r : rss) curve += std::to_string(r / 1024) + " KB ";
  std::printf("[soak] resident memory every 1000 steps: %s\n", curve.c_str());
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "resident memory is not flat under ASan (its quarantine keeps freed blocks): " << curve;
#else
  for (size_t i = 2; i < rss.size(); ++i) EXPECT_LT(rss[i] - rss[1], int64_t{4} << 20) << curve;
#endif
}

}  // namespace
}  // namespace alk
