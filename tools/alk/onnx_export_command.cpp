// `alk onnx export` (tools/alk/onnx_export.h).
#include "tools/alk/onnx_export.h"

#include <iostream>

#include "alk/error.h"

namespace alk::cli {

int run_onnx_export(const std::string& model_kind, const std::string& run_dir, const std::string& out_path) {
  (void)run_dir;
  (void)out_path;
  fail("onnx export", Loc::current(), "export of '", model_kind, "' is not implemented yet");
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
