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
  std::mutex made_mutex;  // devices made by a factory join `devices` after the probe, under it
  // One factory call at a time, without made_mutex held: making a device may itself look up
  // devices (a remote device's server in the same process opening "cpu").
  std::mutex making_mutex;
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
  std::lock_guard lock(registry().made_mutex);
  return registry().devices;
}

namespace {
// The device a factory makes for `name` ("remote:..."), made the first time it is named; null
// when no factory takes the name's kind.
Device* made_device(std::string_view name, Loc loc) {
  const size_t colon = name.find(':');
  if (colon == std::string_view::npos) return nullptr;
  for (DeviceFactoryEntry& f : device_factories()) {
    if (name.substr(0, colon) != f.kind) continue;
    Registry& r = registry();
    auto known = [&r](std::string_view n) -> Device* {
      std::lock_guard lock(r.made_mutex);
      for (Device* d : r.devices)
        if (d->info().name == n) return d;
      return nullptr;
    };
    std::lock_guard making(r.making_mutex);
    if (Device* d = known(name)) return d;
    std::unique_ptr<Device> made = f.make(name, loc);
    // The factory's canonical name ("remote:h:50051/cpu" for "remote:h") may be known already.
    if (Device* d = known(made->info().name)) return d;
    std::lock_guard lock(r.made_mutex);
    r.devices.push_back(made.get());
    r.priority.push_back(-1);  // never "auto": a peer is chosen by name
    r.owned.push_back(std::move(made));
    return r.devices.back();
  }
  return nullptr;
}
}  // namespace

Device& get_device(std::string_view spec, Loc loc) {
  probe_all();
  Registry& r = registry();
  if (spec == "auto") {
    std::lock_guard lock(r.made_mutex);
    Device* best = &cpu_device();
    int best_rank = 0, best_priority = -1;
    for (size_t i = 0; i < r.devices.size(); ++i) {
      if (r.priority[i] < 0) continue;  // made from a name (a peer): only by that name
      int rank = type_rank(r.devices[i]->info().type);
      if (rank > best_rank || (rank == best_rank && rank > 0 && r.priority[i] > best_priority)) {
        best = r.devices[i];
        best_rank = rank;
        best_priority = r.priority[i];
      }
    }
    return *best;
  }
  if (Device* made = made_device(spec, loc)) return *made;
  std::string name(spec);
  if (name.find(':') == std::string::npos && name != "cpu") name += ":0";
  std::lock_guard lock(r.made_mutex);
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
