// `alk generate` and `alk sample` on a small trained run directory, run as a user runs them:
// --print-ids gives the engine's greedy ids for the run's model, the text mode prints the
// prompt and their text, sample agrees with generate, and requests that cannot run fail
// with a message instead of output.
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "alk/generate.h"
#include "alk/train.h"
#include "io/temp_dir.h"
#include "testing.h"
#include "train/run_model.h"

#ifdef ALK_CLI_PATH
namespace alk {
namespace {

using testing::TempDir;

// stdout of the CLI with `args` (stderr dropped), and its exit status.
std::pair<std::string, int> run_cli(const std::string& args) {
  const std::string cmd = std::string(ALK_CLI_PATH) + " " + args + " 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {"", -1};
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  return {out, ::pclose(p)};
}

class GenerateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string text;
    for (int i = 0; i < 400; ++i) text += i % 3 ? "the cat sees the moon. " : "a dog finds the road. ";
    testing::write_file(dir_ / "corpus.txt", text);
    train::Config c;
    c.corpus = dir_ / "corpus.txt";
    c.out = run_ = dir_ / "run";
    c.device = "cpu";
    c.vocab_size = 280, c.ctx = 32, c.dim = 16, c.heads = 2, c.layers = 1, c.batch = 2, c.steps = 6;
    c.eval_every = 6, c.eval_batches = 1, c.ckpt_every = 6, c.sample_tokens = 0;
    std::ostringstream log;
    train::run(c, false, log);
  }
  TempDir dir_;
  std::string run_;
};

TEST_F(GenerateCli, PrintIdsGivesTheEnginesGreedyIdsAndSampleAgrees) {
  train::RunModel m = train::load_run_model(run_);
  Generator gen(m.model);
  GenerateRequest r;
  r.prompt = {5, 6, 7};
  r.sampling.temperature = 0;
  r.sampling.max_tokens = 10;
  const std::vector<int32_t> want = gen.generate(r);
  auto [out, status] = run_cli("generate --from " + run_ + " --prompt-ids 5,6,7 --tokens 10 --temperature 0 --print-ids");
  ASSERT_EQ(status, 0) << out;
  std::istringstream in(out);
  std::vector<int32_t> got;
  for (int32_t id; in >> id;) got.push_back(id);
  EXPECT_EQ(got, want);
  // Text mode: the prompt, then the ids' text; `alk sample` is the same engine.
  const std::string prompt = "the cat";
  auto [text, text_status] = run_cli("generate --from " + run_ + " --prompt '" + prompt + "' --tokens 8 --temperature 0");
  ASSERT_EQ(text_status, 0);
  r.prompt = m.tokenizer.encode(prompt);
  r.sampling.max_tokens = 8;
  const std::string expected = prompt + m.tokenizer.decode(gen.generate(r));
  EXPECT_EQ(text, expected + "\n");
  auto [sampled, sample_status] = run_cli("sample --from " + run_ + " --prompt '" + prompt + "' --tokens 8 --temperature 0");
  ASSERT_EQ(sample_status, 0);
  EXPECT_EQ(sampled, expected + "\n");
}

TEST_F(GenerateCli, BatchesSeedsAndRefusals) {
  auto [three, status] =
      run_cli("generate --from " + run_ + " --prompt-ids 1,2 --tokens 5 --batch 3 --temperature 1 --seed 9 --print-ids");
  ASSERT_EQ(status, 0) << three;
  // Sequence b of a batch uses seed + b: the second line is what seed 10 gives alone.
  auto [alone, alone_status] =
      run_cli("generate --from " + run_ + " --prompt-ids 1,2 --tokens 5 --temperature 1 --seed 10 --print-ids");
  ASSERT_EQ(alone_status, 0);
  std::istringstream lines(three);
  std::string first, second;
  std::getline(lines, first);
  std::getline(lines, second);
  EXPECT_EQ(second, alone.substr(0, alone.find('\n')));
  EXPECT_NE(run_cli("generate --from " + run_ + " --prompt-ids 1,2 --tokens 40").second, 0);  // past the context
  EXPECT_NE(run_cli("generate --from " + run_ + " --prompt-ids 1,x --tokens 4").second, 0);
  EXPECT_NE(run_cli("generate --from " + run_ + " --prompt-ids 1 --tokens 4 --top-p 0").second, 0);
  EXPECT_NE(run_cli("generate --from " + run_ + " --prompt-ids 1 --tokens 4 --batch 4 --memory-budget 1KB").second, 0);
}

}  // namespace
}  // namespace alk
#endif
