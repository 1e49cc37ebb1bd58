// `alk devices`: every device this binary found, with its driver and what it supports.
#include <iomanip>
#include <iostream>

#include "alk/device.h"
#include "tools/alk/commands.h"

namespace alk::cli {

void add_devices_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "list the devices found (cpu, vulkan:N, ...) and what they support");
  cmd->callback([] {
    const Device& best = get_device("auto");
    for (const Device* d : available_devices()) {
      const DeviceInfo& i = d->info();
      std::cout << std::left << std::setw(10) << i.name << " " << i.description << (d == &best ? "  [auto]" : "")
                << "\n           type " << i.type << ", " << std::fixed << std::setprecision(1)
                << static_cast<double>(i.memory_bytes) / (1 << 30) << " GiB, driver " << i.driver
                << "\n           alignment " << i.alignment << " B; features:";
      for (const std::string& f : i.features) std::cout << " " << f;
      std::cout << "\n";
    }
  });
}

}  // namespace alk::cli
