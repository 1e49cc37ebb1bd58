// `alk ops`: the coverage table of the op registry (include/alk/op_registry.h): every op of
// the op table x every backend compiled into this binary, the dtype families each runs, whether
// the op's backward runs there, and why a backend refuses an op. `--markdown` prints
// docs/ops.md (regenerate it with `alk ops --markdown > docs/ops.md`). `--json` prints every
// op's spec (src/opspecs), `alk ops describe NAME` one op's call as JSON Schema.
#include <iostream>

#include "alk/op_registry.h"
#include "opspecs/op_specs.h"
#include "webgpu/wgsl_templates.h"
#include "tools/alk/commands.h"

namespace alk::cli {

void add_ops_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("ops", "which backend runs which op: dtypes, backward, refusals (the op registry)");
  static bool markdown = false, as_json = false;
  static std::string described;
  cmd->add_flag("--markdown", markdown, "print the table as docs/ops.md holds it");
  cmd->add_flag("--json", as_json, "print every op's spec: inputs, attributes, backends (the operations registry)");
  auto* describe = cmd->add_subcommand("describe", "one op's call as JSON Schema");
  describe->add_option("name", described, "the op (alk ops --json lists them)")->required();
  cmd->callback([describe] {
    // The exporter's table is a backend too; naming it keeps it linked into this binary.
    (void)webgpu::template_ops();
    if (describe->parsed()) {
      std::cout << opspecs::op_schema_json(described) << "\n";
    } else if (as_json) {
      std::cout << opspecs::op_specs_json() << "\n";
    } else {
      std::cout << (markdown ? op_coverage_markdown() : op_coverage_text());
    }
  });
}

}  // namespace alk::cli
