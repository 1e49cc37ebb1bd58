// The CPU's decode kernels (kernels_decode.cpp): the contracts are the ops' in
// include/alk/generate.h; inputs are strided Views, out is contiguous.
#pragma once
#include "alk/error.h"
#include "backend/cpu/view.h"

namespace alk::cpu {

// cache [S, T, Hkv, D], rows [S, Hkv, D], positions [S] -> out (cache's shape and dtype). Only
// the new rows are written when out is the cache's memory.
void kv_cache_write(const View& cache, const View& rows, const View& positions, const View& out, Loc loc);
// q [S, H, D], k and v [S, T, Hkv, D], lengths [S] -> out [S, H, D].
void decode_attention(const View& q, const View& k, const View& v, const View& lengths, double scale, const View& out,
                      Loc loc);
// logits [S, V], settings [S, 3] f32, seeds and counters [S] -> out [S] i64.
void sample_tokens(const View& logits, const View& settings, const View& seeds, const View& counters, const View& out,
                   Loc loc);

}  // namespace alk::cpu
