// `alk onnx export` (tools/alk/onnx_export.h): the forward of a GPT or of the MNIST CNN, from a
// run directory of `alk train` or freshly initialized, as an ONNX file (opset 17).
#include "tools/alk/onnx_export.h"

#include <iostream>

#include "alk/io.h"
#include "alk/nn.h"
#include "alk/tokenizer.h"
#include "alk/train.h"
#include "train/job.h"
#ifdef ALK_HAVE_ONNX
#include "alk/onnx.h"
#endif

namespace alk::cli {

int run_onnx_export(const std::string& model_kind, const std::string& run_dir, const std::string& out_path) {
  const Loc loc = Loc::current();
#ifdef ALK_HAVE_ONNX
  std::vector<std::pair<std::string, Tensor>> state;
  train::Config c;
  if (!run_dir.empty()) {
    c = train::config_from_json(read_file(run_dir + "/config.json", "onnx export", loc), train::Config{}, loc);
    check(c.task == model_kind, "onnx export", loc, run_dir, " holds a ", c.task, " run, not ", model_kind);
    const auto files = train::find_checkpoint(run_dir, loc);
    check(files.has_value(), "onnx export", loc, "no checkpoint in ", run_dir);
    state = load_safetensors(files->model, loc).tensors;
  }
  if (model_kind == "mnist") {
    auto net = train::mnist_cnn();
    if (!state.empty()) net->load_state_dict(state, true, loc);
    net->eval();
    onnx::export_sequential(*net, {1, 1, 28, 28}, out_path, loc);
  } else if (model_kind == "gpt") {
    nn::GPTConfig g;
    if (!run_dir.empty()) g = train::gpt_config(c, Tokenizer::load(run_dir + "/tokenizer", loc).vocab_size());
    nn::GPT model(g);
    if (!state.empty()) model.load_state_dict(state, true, loc);
    model.eval();
    onnx::export_gpt(model, out_path, loc);
  } else {
    fail("onnx export", loc, "unknown model '", model_kind, "' (gpt or mnist)");
  }
  std::cout << "wrote " << out_path << "\n";
  return 0;
#else
  (void)run_dir;
  (void)out_path;
  fail("onnx export", loc, "alk was built without ONNX support; cannot export ", model_kind);
#endif
}

void add_onnx_export_subcommand(CLI::App& onnx_cmd) {
  static std::string kind = "mnist", run_dir, out_path;
  auto* cmd = onnx_cmd.add_subcommand("export", "write an alk model's forward as an ONNX file (opset 17)");
  cmd->add_option("--model", kind, "gpt or mnist")->capture_default_str();
  cmd->add_option("--run", run_dir, "a run directory of `alk train` (default: a freshly initialized model)");
  cmd->add_option("--out", out_path, "the .onnx file to write")->required();
  cmd->callback([] {
    int rc = run_onnx_export(kind, run_dir, out_path);
    if (rc) throw CLI::RuntimeError(rc);
  });
}

}  // namespace alk::cli
