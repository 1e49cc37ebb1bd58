// What the Hugging Face fixture tests share: paths, the reference file
// (tests/fixtures/hf/reference/<model>.safetensors: input_ids.N, logits.N, greedy.N) and
// the two comparisons.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <memory>
#include <string>
#include <vector>

#include "alk/generate.h"
#include "alk/io.h"
#include "alk/nn.h"
#include "alk/pretrained.h"
#include "alk/train.h"
#include "io/temp_dir.h"
#include "train/run_model.h"

namespace alk {

inline std::string hf_fixture(const std::string& name) {
  return std::string(ALK_SOURCE_DIR) + "/tests/fixtures/hf/" + name;
}

struct HfReference {
  std::vector<Tensor> ids, logits, greedy;
};

inline HfReference load_hf_reference(const std::string& model) {
  const SafetensorsFile f = load_safetensors(hf_fixture("reference/" + model + ".safetensors"));
  HfReference r;
  auto find = [&](const std::string& name) {
    for (auto& [n, t] : f.tensors)
      if (n == name) return t;
    return Tensor();
  };
  for (size_t i = 0;; ++i) {
    const Tensor ids = find("input_ids." + std::to_string(i));
    if (!ids.defined()) break;
    r.ids.push_back(ids);
    r.logits.push_back(find("logits." + std::to_string(i)));
    r.greedy.push_back(find("greedy." + std::to_string(i)));
  }
  EXPECT_GE(r.ids.size(), 2u) << model;
  return r;
}

// alk's f32 logits for every reference input within tol of transformers'.
inline void expect_logits_match(nn::GPT& model, const HfReference& ref, double tol) {
  NoGradGuard no_grad;
  for (size_t i = 0; i < ref.ids.size(); ++i) {
    const Tensor got = model(ref.ids[i].reshape({1, -1}).to(model.wte->weight.device())).select(0, 0);
    ASSERT_EQ(got.shape(), ref.logits[i].shape()) << "input " << i;
    const std::vector<float> a = got.to(DType::F32).to_vector<float>(), b = ref.logits[i].to_vector<float>();
    double worst = 0;
    for (size_t k = 0; k < a.size(); ++k) worst = std::max(worst, std::abs(static_cast<double>(a[k]) - b[k]));
    EXPECT_LE(worst, tol) << "input " << i << " (" << ref.ids[i].numel() << " tokens)";
  }
}

// Greedy continuations with the KV-cache engine equal to transformers' generate(do_sample=False).
inline void expect_greedy_match(const std::shared_ptr<nn::GPT>& model, const HfReference& ref) {
  Generator gen(model, {.slots = 1});
  for (size_t i = 0; i < ref.ids.size(); ++i) {
    if (!ref.greedy[i].defined()) continue;
    GenerateRequest req;
    for (int64_t id : ref.ids[i].to_vector<int64_t>()) req.prompt.push_back(static_cast<int32_t>(id));
    req.sampling.temperature = 0;
    req.sampling.max_tokens = ref.greedy[i].numel();
    const std::vector<int32_t> out = gen.generate(req);
    std::vector<int32_t> want;
    for (int64_t id : ref.greedy[i].to_vector<int64_t>()) want.push_back(static_cast<int32_t>(id));
    EXPECT_EQ(out, want) << "input " << i;
  }
}

// 20 steps of alk train --init-from on a small text, then the run exported in transformers'
// layout and read back: equal logits to the tuned model, different from the fixture's.
inline void fine_tune_and_export(const std::string& model) {
  testing::TempDir dir;
  std::string text;
  for (int i = 0; i < 60; ++i)
    text += "The cat sat on the mat. The dog ate " + std::to_string(i % 7) + " bones and slept in the sun.\n";
  testing::write_file(dir / "corpus.txt", text);
  train::Config c;
  c.init_from = hf_fixture(model);
  c.corpus = dir / "corpus.txt";
  c.out = dir / "run";
  c.device = "cpu";
  c.steps = 20;
  c.batch = 4;
  c.ctx = 32;
  c.lr = 3e-3;
  c.warmup = 2;
  c.eval_every = 10;
  c.eval_batches = 2;
  c.ckpt_every = 20;
  c.sample_tokens = 0;
  std::ostringstream log;
  const train::Result r = train::run(c, false, log);
  ASSERT_EQ(r.losses.size(), 20u) << log.str();
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += r.losses[static_cast<size_t>(i)], last += r.losses[r.losses.size() - 1 - static_cast<size_t>(i)];
  EXPECT_LT(last, first * 0.8) << log.str();

  const train::RunModel run = train::load_run_model(dir / "run", "cpu");
  ASSERT_TRUE(run.hf.has_value());
  save_pretrained(*run.model, *run.hf, dir / "export", run.hf_dir);
  for (const char* name : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    EXPECT_TRUE(std::filesystem::exists(dir / ("export/" + std::string(name)))) << name;
  const Pretrained back = load_pretrained(dir / "export", "cpu");
  const Pretrained original = load_pretrained(hf_fixture(model), "cpu");
  const Tensor x = tensor(std::vector<int64_t>{1, 5, 9, 30, 200, 7}, {1, 6});
  const std::vector<float> tuned = (*run.model)(x).to_vector<float>();
  EXPECT_EQ((*back.model)(x).to_vector<float>(), tuned);
  EXPECT_NE((*original.model)(x).to_vector<float>(), tuned);
  EXPECT_EQ(back.tokenizer.encode("The cat", true), original.tokenizer.encode("The cat", true));
}

}  // namespace alk
