// `alk ops`: the coverage table of the op registry (include/alk/op_registry.h): every op of
// the op table x every backend compiled into this binary, the dtype families each runs, whether
// the op's backward runs there, and why a backend refuses an op. `--markdown` prints
// docs/ops.md (regenerate it with `alk ops --markdown > docs/ops.md`).
#include <iostream>

#include "alk/op_registry.h"
#include "webgpu/wgsl_templates.h"
#include "tools/alk/commands.h"

namespace alk::cli {

void add_ops_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("ops", "which backend runs which op: dtypes, backward, refusals (the op registry)");
  static bool markdown = false;
  cmd->add_flag("--markdown", markdown, "print the table as docs/ops.md holds it");
  cmd->callback([] {
    // The exporter's table is a backend too; naming it keeps it linked into this binary.
    (void)webgpu::template_ops();
    std::cout << (markdown ? op_coverage_markdown() : op_coverage_text());
  });
}

}  // namespace alk::cli
