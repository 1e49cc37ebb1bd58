// `alk demo`: a one-screen look at the engine: a lazy op chain fused into one kernel, the
// kernel's generated source, and a gradient. (`make demo` runs the main job, `alk train`.)
#include <iostream>

#include "alk/alk.h"
#include "tools/alk/commands.h"

namespace alk::cli {

void add_demo_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "show the engine: a fused op chain, its kernel, a gradient");
  cmd->callback([] {
    manual_seed(0);
    Tensor w = randn({4, 3}).requires_grad_();
    Tensor x = randn({2, 4});
    Tensor h = gelu(matmul(x, w) + 0.5) * 2.0;
    std::cout << "gelu(x @ w + 0.5) * 2 runs as a matmul with a fused epilogue; the elementwise part alone:\n"
              << generated_kernel(gelu(x + 0.5) * 2.0, "cpp") << "\n";
    Tensor loss = mean(h);
    loss.backward();
    std::cout << "loss = " << loss << "\ndloss/dw = " << w.grad() << "\n";
  });
}

}  // namespace alk::cli
