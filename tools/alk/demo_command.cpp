// `alk demo`: the main job. Until the training stack lands it shows the engine at work:
// a fused expression, its generated kernel, and a gradient.
#include <iostream>

#include "alk/alk.h"
#include "tools/alk/commands.h"

namespace alk::cli {

void add_demo_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "train a small GPT and sample from it (the main job)");
  cmd->callback([] {
    std::cout << "alk demo: training arrives with the training issue.\n";
    manual_seed(0);
    Tensor w = randn({4, 3}).requires_grad_();
    Tensor x = randn({2, 4});
    Tensor loss = mean(gelu(matmul(x, w) + 0.5));
    loss.backward();
    std::cout << "loss = " << loss << "\ndloss/dw = " << w.grad() << "\n";
  });
}

}  // namespace alk::cli
