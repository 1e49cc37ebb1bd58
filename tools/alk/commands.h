// One function per subcommand; each lives in its own *_command.cpp.
#pragma once
#include <CLI/CLI.hpp>

namespace alk::cli {
void add_kernels_command(CLI::App& app);
void add_demo_command(CLI::App& app);
void add_tokenizer_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_sample_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_serve_command(CLI::App& app);  // serve_command.cpp: the OpenAI-compatible HTTP server
void add_devices_command(CLI::App& app);
void add_onnx_command(CLI::App& app);  // onnx_command.cpp (a stub without ALK_ONNX)
void add_export_command(CLI::App& app);
void add_ops_command(CLI::App& app);  // ops_command.cpp: the op registry's coverage table
void add_eval_command(CLI::App& app);  // eval_command.cpp: perplexity of a model on a text
}  // namespace alk::cli
