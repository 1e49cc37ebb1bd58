// A hook that sees, in order, every kernel the CPU device runs (eager launches and recorded
// replays alike). tests/dist uses it to prove an order: a gradient bucket's all-reduce is
// issued before the backward's last kernels run. One observer at a time; null removes it.
#pragma once
#include <functional>

#include "alk/kernel.h"

namespace alk::cpu {

using KernelObserver = std::function<void(const Kernel&)>;
void set_kernel_observer(const KernelObserver* observer);  // called before each kernel runs

}  // namespace alk::cpu
