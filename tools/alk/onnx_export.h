// The ONNX export of alk models (src/onnx/export.cpp), as a CLI entry point. `alk onnx export`
// calls it; `alk export --target onnx` (tools/alk/export_command.cpp) can call run_onnx_export
// with its own arguments.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace alk::cli {

// Writes `out_path` (opset 17) holding the forward of the model in `run_dir` (a run directory of
// `alk train`: its config and checkpoint) or, with run_dir empty, of a freshly initialized model
// of `model_kind` ("gpt" or "mnist"). Returns 0, or throws alk::Error.
int run_onnx_export(const std::string& model_kind, const std::string& run_dir, const std::string& out_path);
// `alk onnx export [--model gpt|mnist] [--run DIR] --out FILE.onnx` under `onnx_cmd`.
void add_onnx_export_subcommand(CLI::App& onnx_cmd);

}  // namespace alk::cli
