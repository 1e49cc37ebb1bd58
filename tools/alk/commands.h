#pragma once
#include <CLI/CLI.hpp>

namespace alk::cli {
void add_kernels_command(CLI::App& app);
void add_demo_command(CLI::App& app);
}  // namespace alk::cli
