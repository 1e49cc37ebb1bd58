// The runtime layer: the Device interface (include/alk/device.h) with the Kernel it runs.
#pragma once
#include "alk/device.h"
#include "alk/kernel.h"

#include <string>
#include <vector>

namespace alk {
// Copies bytes between two buffers, on one device or across two (through host memory).
void copy_buffer(const Buffer& src, size_t src_offset, const Buffer& dst, size_t dst_offset, size_t bytes);

// What DeviceRegistration collects at static initialization (one entry per compiled-in
// backend); the registry (src/backend/registry.cpp) probes them in order. Kept in the runtime
// layer, below the backends, so a backend's registration resolves whatever order a linker
// sees the libraries in.
struct DeviceProbeEntry {
  std::string kind;
  int priority;  // larger: preferred by "auto" among devices of the same type
  DeviceProbe probe;
};
std::vector<DeviceProbeEntry>& device_probes();
// What DeviceFactoryRegistration collects: the kinds of device made from their names.
struct DeviceFactoryEntry {
  std::string kind;
  DeviceFactory make;
};
std::vector<DeviceFactoryEntry>& device_factories();
}  // namespace alk
