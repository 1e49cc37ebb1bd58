// TokenDataset (alk/data.h): token cache and seeded batches.
#include <cmath>
#include <cstring>

#include "alk/data.h"
#include "alk/io.h"
#include "core/philox.h"

namespace alk {

namespace {

constexpr char kMagic[8] = {'A', 'L', 'K', 'T', 'O', 'K', '1', '\0'};
constexpr size_t kCacheHeader = 8 + 8 + 8;

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>(v >> (8 * i));
}
uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// The cached ids when the cache exists, is well formed and has the right key.
bool read_cache(const std::string& path, uint64_t key, std::vector<int32_t>* ids) {
  std::optional<std::string> file = try_read_file(path);
  if (!file || file->size() < kCacheHeader) return false;
  const std::string& bytes = *file;
  if (std::memcmp(bytes.data(), kMagic, 8) != 0 || get_u64(bytes.data() + 16) != key) return false;
  uint64_t count = get_u64(bytes.data() + 8);
  if (count > (bytes.size() - kCacheHeader) / 4 || bytes.size() - kCacheHeader != count * 4) return false;
  ids->resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + kCacheHeader + 4 * i);
    uint32_t v = uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
    if (v > INT32_MAX) return false;
    (*ids)[i] = static_cast<int32_t>(v);
  }
  return true;
}

void write_cache(const std::string& path, uint64_t key, const std::vector<int32_t>& ids, Loc loc) {
  std::string out(kMagic, 8);
  put_u64(out, ids.size());
  put_u64(out, key);
  out.reserve(kCacheHeader + 4 * ids.size());
  for (int32_t id : ids) {
    auto v = static_cast<uint32_t>(id);
    for (int i = 0; i < 4; ++i) out += static_cast<char>(v >> (8 * i));
  }
  write_file_atomic(path, out, loc);
}

}  // namespace

uint64_t fnv1a64(std::string_view bytes, uint64_t h) {
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

TokenDataset::TokenDataset(std::vector<int32_t> ids, double val_fraction, Loc loc) : ids_(std::move(ids)) {
  check(val_fraction >= 0 && val_fraction < 1, "TokenDataset", loc, "val_fraction must be in [0, 1), got ",
        val_fraction);
  for (size_t i = 0; i < ids_.size(); ++i)
    check(ids_[i] >= 0, "TokenDataset", loc, "token id ", ids_[i], " at position ", i, " is negative");
  auto n = static_cast<int64_t>(ids_.size());
  train_size_ = n - static_cast<int64_t>(std::floor(static_cast<double>(n) * val_fraction));
}

TokenDataset TokenDataset::from_file(const std::string& text_path, const TextEncoder& encode,
                                     const std::string& cache_path, double val_fraction, uint64_t encoder_fingerprint,
                                     Loc loc) {
  std::string text = read_file(text_path, "TokenDataset", loc);
  uint64_t key = fnv1a64(text);
  if (encoder_fingerprint != 0) {
    std::string fp;
    put_u64(fp, encoder_fingerprint);
    key = fnv1a64(fp, key);
  }
  std::vector<int32_t> ids;
  bool cached = !cache_path.empty() && read_cache(cache_path, key, &ids);
  if (!cached) {
    check(static_cast<bool>(encode), "TokenDataset", loc, "no encoder given for '", text_path, "'");
    ids = encode(text);
    if (!cache_path.empty()) {
      for (size_t i = 0; i < ids.size(); ++i)
        check(ids[i] >= 0, "TokenDataset", loc, "encoder produced negative id ", ids[i], " at position ", i);
      write_cache(cache_path, key, ids, loc);
    }
  }
  TokenDataset d(std::move(ids), val_fraction, loc);
  d.from_cache_ = cached;
  return d;
}

uint64_t TokenDataset::step_seed(uint64_t seed, uint64_t step) {
  auto w = philox4x32_10(step, seed);
  return (static_cast<uint64_t>(w[3]) << 32) | w[2];
}

std::pair<Tensor, Tensor> TokenDataset::batch(bool train, int64_t B, int64_t T, uint64_t seed, uint64_t step,
                                              Loc loc) const {
  return batch(train, B, T, step_seed(seed, step), loc);
}

std::pair<Tensor, Tensor> TokenDataset::batch(bool train, int64_t B, int64_t T, uint64_t step_seed, Loc loc) const {
  check(B > 0 && T > 0, "TokenDataset::batch", loc, "B and T must be positive, got B=", B, " T=", T);
  int64_t begin = train ? 0 : train_size_;
  int64_t n = train ? train_size_ : static_cast<int64_t>(ids_.size()) - train_size_;
  check(n >= T + 1, "TokenDataset::batch", loc, "the ", train ? "train" : "validation", " split has ", n,
        " tokens; a window of T=", T, " needs ", T + 1);
  check(B <= (int64_t{1} << 40) / T, "TokenDataset::batch", loc, "batch B=", B, " T=", T, " is too large");
  std::vector<int64_t> inputs(static_cast<size_t>(B * T)), targets(static_cast<size_t>(B * T));
  const uint64_t stream = train ? 0 : uint64_t{1} << 63;
  for (int64_t b = 0; b < B; ++b) {
    int64_t start = begin + philox_integer(step_seed, stream + static_cast<uint64_t>(b), 0, n - T);
    for (int64_t t = 0; t < T; ++t) {
      inputs[static_cast<size_t>(b * T + t)] = ids_[static_cast<size_t>(start + t)];
      targets[static_cast<size_t>(b * T + t)] = ids_[static_cast<size_t>(start + t + 1)];
    }
  }
  return {tensor(inputs, {B, T}, loc), tensor(targets, {B, T}, loc)};
}

}  // namespace alk
