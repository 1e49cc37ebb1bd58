// The LLaMA-family fixtures through alk's forward: logits within 1e-4 of the reference,
// greedy continuations equal, fine-tuning and export (GPT builds the LLaMA layout: RMSNorm,
// rotary with llama3 scaling, SwiGLU, grouped-query attention).
#include <gtest/gtest.h>

#include "alk/alk.h"
#include "alk/pretrained.h"
#include "graph/graph.h"
#include "io/temp_dir.h"
#include "pretrained/hf_fixtures.h"

namespace alk {
namespace {

TEST(HfFixturesLlama, LlamaLogitsAndGreedyMatchTheFixtureReference) {
  const Pretrained p = load_pretrained(hf_fixture("llama"), "cpu");  // bf16 shards read into f32 parameters
  EXPECT_EQ(p.model->cfg.kv_heads, 2);
  const HfReference ref = load_hf_reference("llama");
  expect_logits_match(*p.model, ref, 1e-4);
  expect_greedy_match(p.model, ref);
}

TEST(HfFixturesLlama, Qwen2LogitsAndGreedyMatchTheFixtureReference) {
  const Pretrained p = load_pretrained(hf_fixture("qwen2"), "cpu");  // f16, q/k/v biases, tied head
  EXPECT_TRUE(p.model->cfg.qkv_bias);
  const HfReference ref = load_hf_reference("qwen2");
  expect_logits_match(*p.model, ref, 1e-4);
  expect_greedy_match(p.model, ref);
}

TEST(HfFixturesLlama, LlamaFineTunesThenExportsWithEqualLogits) { fine_tune_and_export("llama"); }

// Written back in the checkpoint's dtype: the same keys, shapes and bytes as the fixture.
TEST(HfFixturesLlama, LlamaExportInBf16KeepsEveryTensor) {
  testing::TempDir dir;
  const Pretrained p = load_pretrained(hf_fixture("llama"), "cpu");
  save_pretrained(*p.model, p.info, dir / "out", hf_fixture("llama"), DType::BF16);
  const SafetensorsCheckpoint original = SafetensorsCheckpoint::open(hf_fixture("llama"));
  const SafetensorsCheckpoint written = SafetensorsCheckpoint::open(dir / "out");
  EXPECT_EQ(written.names(), original.names());
  for (const std::string& name : original.names())
    EXPECT_EQ(host_bytes(written.read(name, cpu_device())), host_bytes(original.read(name, cpu_device()))) << name;
}

}  // namespace
}  // namespace alk
