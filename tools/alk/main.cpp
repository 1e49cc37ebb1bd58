// The alk command line. Subcommands: kernels (print the kernels an op generates), demo.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <new>
#include <string_view>

#include "alk/alk.h"
#include "tools/alk/commands.h"

namespace {

bool debug_errors() {
  const char* v = std::getenv("ALK_DEBUG");
  if (v == nullptr) return false;
  std::string_view s(v);
  return s.find("errors") != std::string_view::npos || s.find("all") != std::string_view::npos;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"alk: tensors, autodiff and generated kernels for every backend"};
  app.require_subcommand(1);
  alk::cli::add_kernels_command(app);
  alk::cli::add_demo_command(app);
  alk::cli::add_train_command(app);
  alk::cli::add_sample_command(app);
  alk::cli::add_generate_command(app);
  alk::cli::add_serve_command(app);
  alk::cli::add_tokenizer_command(app);
  alk::cli::add_inspect_command(app);
  alk::cli::add_devices_command(app);
  alk::cli::add_onnx_command(app);
  alk::cli::add_export_command(app);
  alk::cli::add_ops_command(app);
  alk::cli::add_eval_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const alk::Error& e) {
    // The file:line inside alk says nothing to someone running the CLI; it is there for
    // alk's developers with ALK_DEBUG=errors (or all).
    if (debug_errors())
      std::cerr << e.what() << "\n";
    else
      std::cerr << "alk " << e.op() << ": " << e.detail() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "alk: out of memory\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "alk: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
