// The runtime layer: the Device interface (include/alk/device.h) with the Kernel it runs.
#pragma once
#include "alk/device.h"
#include "runtime/kernel.h"

namespace alk {
// Copies bytes between two buffers, on one device or across two (through host memory).
void copy_buffer(const Buffer& src, size_t src_offset, const Buffer& dst, size_t dst_offset, size_t bytes);
}  // namespace alk
