// The Device interface: what a backend implements. Kept small on purpose: memory,
// and running a scheduled kernel (compiling it first, cached by its source text).
#pragma once
#include <memory>
#include <string>

#include "graph/schedule.h"

namespace alk {

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  virtual std::shared_ptr<Buffer> allocate(size_t bytes) = 0;
  virtual void upload(Buffer& dst, const void* src, size_t bytes) = 0;
  virtual void download(const Buffer& src, void* dst, size_t bytes) = 0;
  // Compiles (or finds in the cache) and launches one kernel.
  virtual void run(const Kernel& kernel) = 0;
  virtual void synchronize() = 0;
};

Device& cpu_device();

}  // namespace alk
