// include/alk/cpu.h's calls that are not the thread pool's own (thread_pool.cpp defines
// num_threads and set_num_threads).
#include "alk/cpu.h"
#include "backend/cpu/jit.h"

namespace alk::cpu {

void wait_for_compiled_kernels() { jit::wait_idle(); }

}  // namespace alk::cpu
