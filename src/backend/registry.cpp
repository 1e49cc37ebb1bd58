// The device registry: the CPU always, then whatever each compiled-in backend's probe finds
// (the first time anyone asks, so a process that never leaves the CPU never loads a driver).
#include <algorithm>
#include <mutex>
#include <sstream>

#include "runtime/device.h"

namespace alk {

namespace {

struct Registry {
  std::once_flag probed;
  std::vector<std::unique_ptr<Device>> owned;  // never destroyed: buffers may outlive static destructors
  std::vector<Device*> devices;                // cpu first, then by probe order
  std::vector<int> priority;
};

Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

void probe_all() {
  Registry& r = registry();
  std::call_once(r.probed, [&r] {
    r.devices.push_back(&cpu_device());
    r.priority.push_back(0);
    for (DeviceProbeEntry& e : device_probes()) {
      std::vector<std::unique_ptr<Device>> found;
      try {
        found = e.probe();
      } catch (const std::exception&) {
        continue;  // a broken driver hides its devices; `alk devices` says what it found
      }
      for (auto& d : found) {
        r.devices.push_back(d.get());
        r.priority.push_back(e.priority);
        r.owned.push_back(std::move(d));
      }
    }
  });
}

int type_rank(const std::string& type) {
  if (type == "discrete") return 3;
  if (type == "integrated") return 2;
  if (type == "virtual") return 1;
  return 0;  // cpu and software renderers: never picked by "auto" over the CPU backend
}

thread_local Device* g_default = nullptr;

Device& env_default() {
  static Device* d = [] {
    const char* v = std::getenv("ALK_DEVICE");
    return v && *v ? &get_device(v) : &cpu_device();
  }();
  return *d;
}

}  // namespace

std::vector<Device*> available_devices() {
  probe_all();
  return registry().devices;
}

Device& get_device(std::string_view spec, Loc loc) {
  probe_all();
  Registry& r = registry();
  if (spec == "auto") {
    Device* best = &cpu_device();
    int best_rank = 0, best_priority = -1;
    for (size_t i = 0; i < r.devices.size(); ++i) {
      int rank = type_rank(r.devices[i]->info().type);
      if (rank > best_rank || (rank == best_rank && rank > 0 && r.priority[i] > best_priority)) {
        best = r.devices[i];
        best_rank = rank;
        best_priority = r.priority[i];
      }
    }
    return *best;
  }
  std::string name(spec);
  if (name.find(':') == std::string::npos && name != "cpu") name += ":0";
  for (Device* d : r.devices)
    if (d->info().name == name) return *d;
  std::ostringstream found;
  for (size_t i = 0; i < r.devices.size(); ++i) found << (i ? ", " : "") << r.devices[i]->info().name;
  fail("device", loc, "no device '", spec, "' in this process; found: ", found.str(),
       " (and 'auto'); `alk devices` lists them with their drivers");
}

void release_cached_memory() {
  cpu_device().release_cached_memory();
  for (auto& d : registry().owned) d->release_cached_memory();  // only devices already probed
}

Device& default_device() { return g_default ? *g_default : env_default(); }

DeviceGuard::DeviceGuard(Device& device) : previous_(g_default) { g_default = &device; }
DeviceGuard::~DeviceGuard() { g_default = previous_; }

}  // namespace alk
