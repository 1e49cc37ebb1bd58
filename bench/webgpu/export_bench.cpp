// Writes the two WebGPU bundles bench/webgpu/bench.mjs times against TensorFlow.js:
//   DIR/matmul  c = a @ b, a and b [1024, 1024] f32 (the program captures c)
//   DIR/mlp     an MLP 784-256-10 (relu), batch 64, cross-entropy, one SGD step (captures loss)
//   bench_webgpu_export DIR
#include <iostream>

#include "alk/alk.h"
#include "alk/webgpu.h"

int main(int argc, char** argv) {
  using namespace alk;
  if (argc != 2) {
    std::cerr << "usage: bench_webgpu_export DIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  manual_seed(1);
  {
    Tensor a = randn({1024, 1024}), b = randn({1024, 1024});
    a.realize();
    b.realize();
    Program p = compile([&](const std::vector<Tensor>&) { capture("c", matmul(a, b)); });
    p({});
    p({});
    webgpu::ExportOptions o;
    o.programs = {{"step", &p}};
    o.names = {{"a", a}, {"b", b}};
    const auto s = webgpu::export_bundle(dir + "/matmul", o);
    std::cout << "matmul: " << s.dispatches << " dispatches\n";
  }
  {
    Tensor w1 = randn({784, 256}) * 0.05, b1 = zeros({256}), w2 = randn({256, 10}) * 0.05, b2 = zeros({10});
    std::vector<std::pair<std::string, Tensor>> params = {{"w1", w1}, {"b1", b1}, {"w2", w2}, {"b2", b2}};
    for (auto& [n, t] : params) {
      t = t.contiguous();
      t.realize();
      t.requires_grad_();
    }
    optim::SGD opt(params, 0.05);
    Tensor x = randn({64, 784});
    Tensor y = cast(randint(0, 10, {64}), DType::I64);
    x.realize();
    y.realize();
    Program p = compile([&](const std::vector<Tensor>& in) {
      Tensor h = relu(matmul(in[0], params[0].second) + params[1].second);
      Tensor loss = nn::cross_entropy(matmul(h, params[2].second) + params[3].second, in[1]);
      capture("loss", loss);
      loss.backward();
      opt.step();
      opt.zero_grad();
    });
    p({x, y});
    p({x, y});
    webgpu::ExportOptions o;
    o.programs = {{"step", &p}};
    o.names = params;
    o.lr = opt.lr_tensor();
    const auto s = webgpu::export_bundle(dir + "/mlp", o);
    std::cout << "mlp: " << s.dispatches << " dispatches, first loss " << p.captured("loss").item() << "\n";
  }
  return 0;
}
