#include "tools/alk/commands.h"

namespace alk::cli {
// Placeholder until the training-stack work lands this command.
void add_tokenizer_command(CLI::App& app) { (void)app; }
}  // namespace alk::cli
