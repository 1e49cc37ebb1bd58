// A fixed pool of worker threads (ALK_NUM_THREADS, default: hardware threads) and
// parallel_for over [0, n). Exceptions thrown by any chunk are rethrown in the caller.
#pragma once
#include <cstdint>
#include <functional>

#include "alk/cpu.h"  // num_threads, set_num_threads

namespace alk::cpu {

// Calls fn(begin, end) over disjoint chunks covering [0, n), each at least `grain`
// long (except the last), spread over the pool. Runs inline when n <= grain.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace alk::cpu
