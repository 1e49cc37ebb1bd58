// `alk inspect FILE.safetensors`: the header of a checkpoint (metadata, then one line per
// tensor: name, dtype, shape, bytes). Reads and validates the header only, not the data.
#include <algorithm>
#include <iomanip>
#include <iostream>

#include "alk/io.h"
#include "io/json.h"
#include "tools/alk/commands.h"

namespace alk::cli {

namespace {

// Shown as is, unless it holds control characters (newlines would break the listing):
// then as a JSON string literal.
std::string printable(const std::string& s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return json::dump(json::Value(s));
  return s;
}

int run_inspect(const std::string& path) {
  SafetensorsHeader h = read_safetensors_header(path);
  std::cout << path << ": " << h.entries.size() << " tensors, " << h.data_bytes << " data bytes, header "
            << h.header_bytes << " bytes\n";
  if (!h.metadata.empty()) {
    std::cout << "metadata:\n";
    for (auto& [k, v] : h.metadata) std::cout << "  " << printable(k) << ": " << printable(v) << "\n";
  }
  size_t name_w = 4, dtype_w = 5, shape_w = 5;
  for (auto& e : h.entries) {
    name_w = std::max(name_w, printable(e.name).size());
    dtype_w = std::max(dtype_w, e.dtype_tag.size());
    shape_w = std::max(shape_w, to_string(e.shape).size());
  }
  auto row = [&](const std::string& name, const std::string& dtype, const std::string& shape,
                 const std::string& bytes) {
    std::cout << std::left << std::setw(static_cast<int>(name_w)) << name << "  "
              << std::setw(static_cast<int>(dtype_w)) << dtype << "  " << std::setw(static_cast<int>(shape_w)) << shape
              << "  " << bytes << "\n";
  };
  row("name", "dtype", "shape", "bytes");
  for (auto& e : h.entries) row(printable(e.name), e.dtype_tag, to_string(e.shape), std::to_string(e.end - e.begin));
  return 0;
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "list the metadata and tensors of a .safetensors file");
  static std::string path;
  cmd->add_option("file", path, "a .safetensors file")->required();
  cmd->callback([] {
    int rc = run_inspect(path);
    if (rc) throw CLI::RuntimeError(rc);
  });
}

}  // namespace alk::cli
