// The evaluator's second tier: a fused expression compiled to machine code at run time.
//
// The interpreter (eval_impl.inc) runs each IR node as its own loop over a 256-element
// block, so a long chain (gelu's 8 nodes) streams every intermediate through L1. The
// compiled body runs all nodes in one loop over the block, 16 (AVX-512) or 8 (AVX2) lanes
// at a time, intermediates in vector registers. The interpreter still loads the inputs
// (any dtype, strides, broadcasts) and computes uniform nodes once; the body gets those as
// "leaves" and computes the rest.
//
// The body is the C++ emitter's text (expr::emit_cpu_block, src/expr/emit_cpp.cpp: the
// same text ALK_DEBUG=kernels and `alk kernels --target cpp` print), built by the host C++
// compiler into a shared object for the ISA in use (its -m flags pick the lanes), cached on
// disk (ALK_CACHE_DIR, default ~/.cache/alk) and loaded with dlopen. It computes what the
// interpreter computes, bit for bit: the same IEEE operations in the same order (no FMA
// contraction, -ffp-contract=off), the same libmvec functions for exp/log/tanh/erf/..., the
// same integer and NaN rules. That is what lets it switch in at any time: by default a
// kernel is compiled in the background the first time it is seen and the interpreter runs
// it until the code is ready.
//
// ALK_JIT=off|async|sync (default async); ALK_DEBUG=jit prints each compile. The generic
// ISA path is never compiled (it is the reference the others are tested against), and a
// machine without a compiler simply keeps interpreting.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cpu/isa.h"
#include "alk/expr.h"

namespace alk::cpu::jit {

// leaves[i] points at node i's values for the block when node i is a leaf: an input's
// 256 values, or a uniform node's one value. out receives the root's 256 values.
using BlockFn = void (*)(const void* const* leaves, void* out);

enum class Mode { Off, Async, Sync };
Mode mode();
void set_mode(Mode m);  // tests and benchmarks; ALK_JIT sets the default
// What is worth compiling: at least min_elements elements (default 16384, one thread's
// grain) and min_work work units (default 4; a libmvec call or pow counts 8, other nodes 1).
void set_thresholds(int64_t min_elements, int min_work);

// The compiled body for e (uniform[i]: node i has one value for the whole kernel) over
// `elements` elements, or nullptr when the interpreter should run it: JIT off, ISA
// generic, e unsupported or too short to gain, the work too small, code not ready yet.
BlockFn block_body(const expr::Expr& e, const std::vector<bool>& uniform, int64_t elements, Isa isa);

// A body's text (expr::emit_cpu_block's, or a golden file's) built for isa through the disk
// cache, as block_body builds them: the function alk_block, or nullptr (no compiler, an
// error, the generic ISA). Counted in stats().
BlockFn compile(const std::string& source, Isa isa);

// Any C++ text built with the same compiler, flags (for isa; generic: no -m flags) and disk
// cache: the address of `symbol`, or nullptr with the compiler's output in error_log. What
// the CPU runs a user kernel's C++ body with (alk/kernel_spec.h).
void* compile_function(const std::string& source, const char* symbol, Isa isa, std::string& error_log);

struct Stats {
  int64_t compiled = 0;   // built by the compiler in this process
  int64_t from_disk = 0;  // found already built in the cache directory
  int64_t failed = 0;     // compiler or loader errors (the kernel stays interpreted)
};
Stats stats();
void wait_idle();  // blocks until every queued compile has finished

}  // namespace alk::cpu::jit
