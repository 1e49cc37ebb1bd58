// The GPT training job on the CPU: bit-identical resume, the run directory's files,
// sampling, an interrupted run, and that training lowers the loss.
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "alk/train.h"
#include "error_expect.h"
#include "io/json.h"
#include "io/temp_dir.h"
#include "testing.h"

namespace alk {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// ~20 KB of varied sentences from small word lists, driven by a fixed LCG.
std::string varied_corpus(size_t bytes = 20000) {
  const char* subj[] = {"The cat", "A dog", "My neighbour", "The old king", "Every bird", "The river", "A child",
                        "The baker"};
  const char* verb[] = {"sees", "chases", "remembers", "finds", "carries", "paints", "follows", "loves"};
  const char* obj[] = {"the moon", "a red ball", "the quiet garden", "some bread", "the long road",
                       "a golden ring", "the morning light", "an open door"};
  const char* tail[] = {".", " today.", " again.", " in the rain.", " before dinner.", " with joy."};
  std::string s;
  uint64_t x = 12345;
  auto next = [&](uint64_t n) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return (x >> 33) % n;
  };
  while (s.size() < bytes) {
    s += subj[next(8)];
    s += " ";
    s += verb[next(8)];
    s += " ";
    s += obj[next(8)];
    s += tail[next(6)];
    s += next(5) == 0 ? "\n" : " ";
  }
  return s;
}

train::Config tiny_config(const std::string& corpus, const std::string& out) {
  train::Config c;
  c.task = "gpt";
  c.corpus = corpus;
  c.out = out;
  c.vocab_size = 300;
  c.ctx = 16;
  c.dim = 16;
  c.heads = 2;
  c.layers = 1;
  c.batch = 2;
  c.steps = 8;
  c.eval_every = 4;
  c.eval_batches = 2;
  c.ckpt_every = 4;
  c.log_every = 1;
  c.sample_tokens = 0;
  return c;
}

std::vector<json::Value> metrics(const std::string& dir) {
  std::ifstream f(dir + "/metrics.jsonl");
  std::vector<json::Value> out;
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

std::map<int64_t, json::Value> by_step(const std::vector<json::Value>& lines) {
  std::map<int64_t, json::Value> out;
  for (auto& v : lines) {
    int64_t s = v.at("step").as_int();
    EXPECT_FALSE(out.count(s)) << "step " << s << " logged twice";
    out.emplace(s, v);
  }
  return out;
}

// Everything but the wall-clock rate, which is the only thing allowed to differ.
void expect_same_metric(const json::Value& a, const json::Value& b) {
  EXPECT_EQ(a.at("step").as_int(), b.at("step").as_int());
  EXPECT_EQ(a.at("loss").as_double(), b.at("loss").as_double()) << "step " << a.at("step").as_int();
  EXPECT_EQ(a.at("lr").as_double(), b.at("lr").as_double());
  ASSERT_EQ(a.find("val_loss") != nullptr, b.find("val_loss") != nullptr);
  if (a.find("val_loss")) {
    EXPECT_EQ(a.at("val_loss").as_double(), b.at("val_loss").as_double());
  }
}

class Resume : public ::testing::Test {
 protected:
  void SetUp() override {
    corpus_ = dir_ / "corpus.txt";
    testing::write_file(corpus_, varied_corpus());
  }
  TempDir dir_;
  std::string corpus_;
  std::ostringstream log_;
};

TEST_F(Resume, ResumedRunIsBitIdentical) {
  train::Config a = tiny_config(corpus_, dir_ / "a");
  train::Result ra = train::run(a, false, log_);
  ASSERT_EQ(ra.steps_done, 8);
  ASSERT_EQ(ra.losses.size(), 8u);
  EXPECT_FALSE(ra.interrupted);

  train::Config b = tiny_config(corpus_, dir_ / "b");
  b.steps = 4;
  train::Result rb1 = train::run(b, false, log_);
  ASSERT_EQ(rb1.losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(rb1.losses[i], ra.losses[i]) << "step " << i + 1;
  b.steps = 8;
  train::Result rb2 = train::run(b, true, log_);
  EXPECT_EQ(rb2.steps_done, 8);
  ASSERT_EQ(rb2.losses.size(), 4u) << "the resumed run should only run steps 5..8";
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(rb2.losses[i], ra.losses[i + 4]) << "step " << i + 5;
  EXPECT_EQ(rb2.val_loss, ra.val_loss);

  auto ma = by_step(metrics(dir_ / "a")), mb = by_step(metrics(dir_ / "b"));
  for (int64_t s = 1; s <= 8; ++s) {
    ASSERT_TRUE(ma.count(s)) << "run A has no metrics line for step " << s;
    EXPECT_EQ(ma.at(s).at("loss").as_double(), ra.losses[static_cast<size_t>(s - 1)]);
    EXPECT_TRUE(mb.count(s)) << "resumed run B has no metrics line for step " << s;
    if (mb.count(s)) expect_same_metric(ma.at(s), mb.at(s));
  }
  EXPECT_EQ(mb.size(), 8u);
}

// With dropout the masks come from the global generator: resuming must restore its state.
TEST_F(Resume, ResumeWithDropoutRestoresTheGenerator) {
  train::Config a = tiny_config(corpus_, dir_ / "a");
  a.dropout = 0.2;
  a.eval_every = 0;
  train::Result ra = train::run(a, false, log_);
  ASSERT_EQ(ra.losses.size(), 8u);
  train::Config plain = tiny_config(corpus_, dir_ / "plain");
  plain.eval_every = 0;
  plain.steps = 2;
  train::Result rp = train::run(plain, false, log_);
  EXPECT_NE(rp.losses[0], ra.losses[0]) << "dropout had no effect";

  train::Config b = a;
  b.out = dir_ / "b";
  b.steps = 4;
  train::run(b, false, log_);
  b.steps = 8;
  train::Result rb = train::run(b, true, log_);
  ASSERT_EQ(rb.losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(rb.losses[i], ra.losses[i + 4]) << "step " << i + 5;
}

TEST_F(Resume, RunDirectoryHasItsFilesAndSamples) {
  train::Config c = tiny_config(corpus_, dir_ / "run");
  c.steps = 4;
  train::Result r = train::run(c, false, log_);
  const std::string d = c.out;
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "config.json", "metrics.jsonl", "loss.svg",
                        "tokenizer/vocab.json", "tokenizer/merges.txt"})
    EXPECT_TRUE(fs::exists(d + "/" + f)) << f;
  EXPECT_EQ(testing::read_file(d + "/loss.svg").rfind("<svg", 0), 0u);
  // config.json reads back as the run's config.
  train::Config back = train::config_from_json(testing::read_file(d + "/config.json"), train::Config{});
  EXPECT_EQ(back.dim, 16);
  EXPECT_EQ(back.steps, 4);
  EXPECT_EQ(back.out, c.out);
  // One JSON object per line; val_loss on eval steps only.
  auto m = metrics(d);
  ASSERT_EQ(m.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(m[i].is_object());
    EXPECT_EQ(m[i].at("step").as_int(), static_cast<int64_t>(i + 1));
    EXPECT_EQ(m[i].at("loss").as_double(), r.losses[i]);
    EXPECT_GT(m[i].at("lr").as_double(), 0);
    EXPECT_TRUE(m[i].at("tokens_per_s").is_number());
    EXPECT_EQ(m[i].find("val_loss") != nullptr, i == 3) << i;
  }
  EXPECT_EQ(m[3].at("val_loss").as_double(), r.val_loss);
  EXPECT_TRUE(std::isfinite(r.val_loss));
  EXPECT_GT(r.val_loss, 0);

  const std::string s1 = train::sample(d, "The cat", 12, 0.8, 40, 7);
  const std::string s2 = train::sample(d, "The cat", 12, 0.8, 40, 7);
  EXPECT_EQ(s1.rfind("The cat", 0), 0u) << s1;
  EXPECT_GT(s1.size(), std::string("The cat").size());
  EXPECT_EQ(s1, s2);
  // Greedy decoding ignores the seed.
  EXPECT_EQ(train::sample(d, "A dog", 8, 0, 40, 1), train::sample(d, "A dog", 8, 0, 40, 2));
  EXPECT_ALK_ERROR(train::sample(dir_ / "nowhere", "x", 3), "sample", "nowhere/config.json");
}

TEST_F(Resume, InterruptStopsAfterOneStepWithACheckpoint) {
  train::Config a = tiny_config(corpus_, dir_ / "a");
  train::Result ra = train::run(a, false, log_);
  ASSERT_EQ(ra.losses.size(), 8u);

  train::Config c = tiny_config(corpus_, dir_ / "i");
  std::atomic<bool> stop{true};
  train::Result r1 = train::run(c, false, log_, &stop);
  EXPECT_TRUE(r1.interrupted);
  EXPECT_EQ(r1.steps_done, 1);
  ASSERT_EQ(r1.losses.size(), 1u);
  EXPECT_EQ(r1.losses[0], ra.losses[0]);
  EXPECT_TRUE(fs::exists(c.out + "/model.safetensors"));
  EXPECT_TRUE(fs::exists(c.out + "/optimizer.safetensors"));
  // Resuming continues from step 2 and reproduces the uninterrupted run.
  train::Result r2 = train::run(c, true, log_);
  EXPECT_FALSE(r2.interrupted);
  EXPECT_EQ(r2.steps_done, 8);
  ASSERT_EQ(r2.losses.size(), 7u);
  for (size_t i = 0; i < 7; ++i) EXPECT_EQ(r2.losses[i], ra.losses[i + 1]) << "step " << i + 2;
  auto m = metrics(c.out);
  std::vector<int64_t> steps;
  for (auto& v : m) steps.push_back(v.at("step").as_int());
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
}

TEST_F(Resume, ResumeWithoutCheckpointIsAnError) {
  train::Config c = tiny_config(corpus_, dir_ / "empty");
  // train::run takes no Loc (include/alk/train.h): the error names checkpoint.cpp; the op and
  // the missing files are checked.
  try {
    train::run(c, true, log_);
    ADD_FAILURE() << "resumed from an empty directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "resume") << e.what();
    EXPECT_NE(std::string(e.what()).find("no checkpoint in " + (dir_ / "empty")), std::string::npos) << e.what();
  }
}

TEST(Train, LossDecreasesOnARepetitiveCorpus) {
  TempDir dir;
  std::string text;
  while (text.size() < 12000) text += "the cat sat on the mat. the dog sat on the log. ";
  testing::write_file(dir / "corpus.txt", text);
  train::Config c = tiny_config(dir / "corpus.txt", dir / "run");
  c.steps = 30;
  c.batch = 4;
  c.lr = 1e-2;
  c.min_lr = 1e-3;
  c.warmup = 3;
  c.eval_every = 0;
  c.ckpt_every = 0;
  std::ostringstream log;
  train::Result r = train::run(c, false, log);
  ASSERT_EQ(r.losses.size(), 30u);
  double first = 0, last = 0;
  for (size_t i = 0; i < 5; ++i) {
    first += r.losses[i] / 5;
    last += r.losses[25 + i] / 5;
  }
  for (double l : r.losses) EXPECT_TRUE(std::isfinite(l));
  // Starts near ln(vocab) and falls well below it.
  EXPECT_LT(last, first - 1.0) << "first 5: " << first << ", last 5: " << last;
}

}  // namespace
}  // namespace alk
