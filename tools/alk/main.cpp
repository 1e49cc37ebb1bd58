// The alk command line. Subcommands: kernels (print the kernels an op generates), demo.
#include <CLI/CLI.hpp>
#include <iostream>

#include "alk/alk.h"
#include "tools/alk/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"alk: tensors, autodiff and generated kernels for every backend"};
  app.require_subcommand(1);
  alk::cli::add_kernels_command(app);
  alk::cli::add_demo_command(app);
  alk::cli::add_train_command(app);
  alk::cli::add_sample_command(app);
  alk::cli::add_tokenizer_command(app);
  alk::cli::add_inspect_command(app);
  alk::cli::add_devices_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const alk::Error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
