// A Hugging Face directory's text files: tokenizer.json, tokenizer_config.json, config.json,
// generation_config.json and a model.safetensors.index.json (the input's parts, split at
// "\n----\n" lines), then text to encode. A tokenizer that loads must encode and decode;
// a config that maps must give a positive-sized model.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "alk/io.h"
#include "alk/pretrained.h"
#include "alk/tokenizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  const std::string_view tokenizer = alk::fuzz::next_part(rest), tokenizer_config = alk::fuzz::next_part(rest),
                         config = alk::fuzz::next_part(rest), generation = alk::fuzz::next_part(rest),
                         index = alk::fuzz::next_part(rest);
  try {
    const alk::Tokenizer tok = alk::Tokenizer::from_tokenizer_json(tokenizer, "tokenizer.json", tokenizer_config);
    const std::vector<int32_t> ids = tok.encode(rest, true);
    tok.decode(ids);
    tok.decode(tok.encode("Hello, world! The 3 cats' naïve café 🙂\n\n  x"));
  } catch (const alk::Error&) {
  }
  try {
    alk::HfModelInfo info;
    const alk::nn::GPTConfig g = alk::gpt_config_from_hf(config, "config.json", &info);
    if (g.vocab <= 0 || g.dim <= 0 || g.heads <= 0 || g.layers <= 0 || g.ctx <= 0 || g.dim % g.heads) std::abort();
    alk::generation_defaults_from_hf(generation, info, "generation_config.json");
    alk::hf_weight_map(g, info, "model.");
  } catch (const alk::Error&) {
  }
  // The index with no shards beside it: refused without reading outside the scratch dir.
  alk::fuzz::write_scratch("model.safetensors.index.json", index);
  try {
    alk::SafetensorsCheckpoint::open(alk::fuzz::scratch_dir());
  } catch (const alk::Error&) {
  }
  return 0;
}
