// alk::compile: trace a whole step (forward, loss, backward, optimizer update) once into a
// Program, then replay it: the same kernels on the same buffers, with no graph building,
// scheduling or allocation per call. On the CPU a replay is a loop over recorded kernels;
// GPU backends will replay the same list as a CUDA graph or recorded command buffers.
//
//   alk::Program step = alk::compile([&](const std::vector<alk::Tensor>& in) {
//     alk::Tensor loss = nn::cross_entropy(model(in[0]), in[1]);
//     alk::capture("loss", loss);
//     loss.backward();
//     opt.step();
//     opt.zero_grad();
//   });
//   for (...) { step({x, y}); double loss = step.captured("loss").item(); }
//
// Rules, as for CUDA graphs: data that changes between calls comes in through `inputs`
// (same shapes and dtypes every call); tensors updated with assign_ (parameters, optimizer
// state, running statistics) are carried from call to call; host reads inside the step
// (item(), to_vector()) see the traced call's values only: read results through capture().
// The first call runs eagerly (it creates optimizer state), the second traces, later
// calls replay. Random ops draw fresh numbers on every replay.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "alk/tensor.h"

namespace alk {

using StepFn = std::function<void(const std::vector<Tensor>& inputs)>;

class Program {
 public:
  explicit Program(StepFn fn);
  void operator()(const std::vector<Tensor>& inputs = {}, Loc loc = Loc::current());
  // The value `name` was captured with in the latest call (a copy: later calls do not change it).
  Tensor captured(const std::string& name, Loc loc = Loc::current()) const;
  bool traced() const;
  int64_t kernels() const;  // kernels per replay
  // Carried tensors (parameters, optimizer state) a replay copies back into the buffers the
  // next step reads; 0 when every update is written in place.
  int64_t replay_copies() const;
  // Memory the program holds for replays (every buffer its kernels touch) and what one
  // buffer per intermediate tensor would need.
  MemoryPlan plan() const;

 private:
  struct State;
  std::shared_ptr<State> s_;
  friend struct ProgramAccess;  // src/graph/program_contents.h: read-only, for exporters
};

Program compile(StepFn fn);

// Inside a step: makes t readable after each call as program.captured(name).
void capture(const std::string& name, const Tensor& t, Loc loc = Loc::current());

// Whether this thread is inside a Program's step (its warm-up call or its trace): code that
// keeps Programs of its own (alk::onnx::Model's per-shape cache) runs uncached there, so the
// outer step sees and records every kernel.
bool inside_compiled_step();

}  // namespace alk
