// The CPU backend's settings, for programs and bindings above it (PyTorch:
// torch.set_num_threads, torch.get_num_threads).
#pragma once

namespace alk::cpu {

// The threads of the CPU's pool (ALK_NUM_THREADS, default: the hardware's threads).
int num_threads();
void set_num_threads(int n);  // 1 runs everything on the calling thread

// Blocks until the kernels the CPU compiles in the background (long elementwise chains:
// docs/architecture.md) are built, so what a benchmark times after its warm-up is the
// compiled code.
void wait_for_compiled_kernels();

}  // namespace alk::cpu
