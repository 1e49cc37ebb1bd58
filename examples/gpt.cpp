// A character-level GPT on a text file with the C++ API: model, AdamW, training loop, sampling.
//   ./build/example_gpt [file.txt]        (default: data/kjv.txt, made by `make demo`)
#include <fstream>
#include <iostream>
#include <sstream>

#include "alk/alk.h"
#include "alk/nn.h"
#include "alk/optim.h"

int main(int argc, char** argv) {
  std::ifstream f(argc > 1 ? argv[1] : "data/kjv.txt");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str().substr(0, 1 << 20);
  if (text.size() < 10000) return std::cerr << "need a text file of at least 10 kB\n", 1;
  alk::manual_seed(0);
  alk::nn::GPT model({.vocab = 256, .ctx = 64, .dim = 64, .heads = 4, .layers = 2});
  alk::optim::AdamW opt(model.named_parameters(), 3e-3, {.weight_decay = 0.1});
  const int64_t B = 8, T = 64;
  for (int step = 1; step <= 200; ++step) {
    std::vector<int64_t> x(B * T), y(B * T);
    for (int64_t b = 0; b < B; ++b) {
      size_t at = (static_cast<size_t>(step) * 7919 + b * 104729) % (text.size() - T - 1);
      for (int64_t t = 0; t < T; ++t) {
        x[b * T + t] = static_cast<unsigned char>(text[at + t]);
        y[b * T + t] = static_cast<unsigned char>(text[at + t + 1]);
      }
    }
    alk::Tensor loss = alk::nn::cross_entropy(model(alk::tensor(x, {B, T})), alk::tensor(y, {B, T}));
    loss.backward();
    opt.step();
    opt.zero_grad();
    if (step % 20 == 0) std::cout << "step " << step << " loss " << loss.item() << "\n";
  }
  alk::NoGradGuard no_grad;  // greedy sampling, one byte at a time
  std::vector<int64_t> ids{'T', 'h', 'e', ' '};
  for (int i = 0; i < 80; ++i) {
    int64_t t = std::min<int64_t>(static_cast<int64_t>(ids.size()), T);
    std::vector<int64_t> window(ids.end() - t, ids.end());
    ids.push_back(static_cast<int64_t>(alk::argmax(model(alk::tensor(window, {1, t})).select(1, t - 1)).item()));
  }
  std::cout << std::string(ids.begin(), ids.end()) << "\n";
}
