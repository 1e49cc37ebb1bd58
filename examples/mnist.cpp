// A small CNN on MNIST with the C++ API (the same model as `alk train --task mnist`).
//   ./build/example_mnist [mnist_dir]     (default: found like alk train does; `make mnist`)
#include <iostream>

#include "alk/alk.h"
#include "alk/data.h"
#include "alk/nn.h"
#include "alk/optim.h"

int main(int argc, char** argv) {
  using namespace alk;
  const std::string dir = argc > 1 ? argv[1] : find_mnist_dir();
  if (dir.empty()) return std::cerr << "MNIST not found: run `make mnist`\n", 1;
  MnistSplit train = load_mnist(dir, true), test = load_mnist(dir, false);
  Tensor x_train = normalize_images(train.images), x_test = normalize_images(test.images);
  manual_seed(0);
  nn::Sequential net;
  net.add(std::make_shared<nn::Conv2d>(1, 16, 3, 1, 1)).add(std::make_shared<nn::Act>(nn::Activation::ReLU));
  net.add(std::make_shared<nn::MaxPool2d>(2)).add(std::make_shared<nn::Conv2d>(16, 32, 3, 1, 1));
  net.add(std::make_shared<nn::Act>(nn::Activation::ReLU)).add(std::make_shared<nn::MaxPool2d>(2));
  net.add(std::make_shared<nn::Flatten>()).add(std::make_shared<nn::Linear>(32 * 7 * 7, 10));
  optim::AdamW opt(net.named_parameters(), 2e-3);
  for (int64_t step = 0; step < 600; ++step) {
    Tensor rows = randint(0, x_train.shape()[0], {64});
    Tensor loss = nn::cross_entropy(net(index_select(x_train, 0, rows)), index_select(train.labels, 0, rows));
    loss.backward();
    opt.step();
    opt.zero_grad();
    if (step % 100 == 0) std::cout << "step " << step << " loss " << loss.item() << "\n";
  }
  NoGradGuard no_grad;
  net.eval();
  Tensor hits = eq(argmax(net(x_test.slice(0, 0, 2000)), 1), test.labels.slice(0, 0, 2000));
  std::cout << "accuracy on 2000 test images: " << mean(hits.to(DType::F32)).item() * 100 << "%\n";
}
