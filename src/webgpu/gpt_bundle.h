// A GPT, its AdamW training step and a forward pass, compiled, traced on the CPU and written
// as a WebGPU bundle whose page (index.html) trains it on the exported text and samples. The
// tokens are the text's bytes, or a byte-level BPE (alk::Tokenizer, as `alk train` uses)
// whose files ship in the bundle (tokenizer/) and which the runtime's Tokenizer encodes.
// Used by `alk export --target webgpu` and by the tests, which continue the CPU program after
// the export to get the losses the bundle must reproduce.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "alk/compile.h"
#include "alk/nn.h"
#include "alk/optim.h"
#include "alk/tokenizer.h"
#include "alk/webgpu.h"

namespace alk::webgpu {

struct GptBundleConfig {
  nn::GPTConfig model;  // vocab: 256 (bytes) or the tokenizer's vocab_size()
  int64_t batch = 4;
  double lr = 3e-3;
  uint64_t seed = 1;
  std::string text;  // the training text
  std::optional<Tokenizer> tokenizer;  // none: the bytes are the tokens
  // F16: the step and forward are traced under Autocast(F16) (matmuls take f16 inputs and
  // accumulate in f32; master weights f32), so their activations are f16 in the bundle: native
  // f16 where the adapter has shader-f16, packed in u32 words and computed in f32 where not.
  DType compute = DType::F32;
  static GptBundleConfig micro();  // a model the software adapters train in seconds
  static GptBundleConfig tiny();   // the tiny GPT, for real GPUs
};

class GptBundle {
 public:
  explicit GptBundle(GptBundleConfig c, Loc loc = Loc::current());
  // Writes the bundle (plan, kernels, weights, runtime, page, text.txt, tokenizer.json).
  ExportSummary write(const std::string& dir, Loc loc = Loc::current());
  // One more CPU step on the traced batch: the loss (what the bundle's next step gives).
  double cpu_step();

  GptBundleConfig config;
  std::unique_ptr<nn::GPT> model;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<Program> step, forward;
  Tensor x, y, ids;  // the traced batch and the forward's traced input
  std::vector<int32_t> tokens;  // the text, encoded
};

}  // namespace alk::webgpu
