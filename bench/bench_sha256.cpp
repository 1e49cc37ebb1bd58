// SHA-256 of 64-byte messages (two blocks each once padded) as a kernel from source text
// (examples/sha256), against OpenSSL's SHA256() on one core of this CPU: OpenSSL's SHA-NI /
// AVX2 code is the ceiling of what a CPU core does. alk runs the C++ body on every thread of
// the CPU device (ALK_NUM_THREADS), or the device's body with --device. Times the kernel and
// the digests' download; the messages are padded and uploaded once, before timing.
//   build/bench_sha256 [--device D] [--messages N]
//   RATIO sha256_64B alk=<hashes/s> openssl_1core=<hashes/s> ratio=<alk/openssl>
#include <openssl/sha.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../examples/sha256/sha256_kernel.h"

int main(int argc, char** argv) {
  std::string device = "cpu";
  int64_t n = 1 << 16;
  for (int a = 1; a + 1 < argc; a += 2) {
    if (!std::strcmp(argv[a], "--device")) device = argv[a + 1];
    if (!std::strcmp(argv[a], "--messages")) n = std::stoll(argv[a + 1]);
  }
  std::mt19937 rng(1);
  std::vector<std::string> messages(static_cast<size_t>(n), std::string(64, '\0'));
  for (std::string& m : messages)
    for (char& c : m) c = static_cast<char>(rng());
  alk::Device& dev = alk::get_device(device);
  const sha256::Padded p = sha256::pad(messages);
  const alk::Tensor words = alk::tensor(p.words, {n, p.width}).to(dev), blocks = alk::tensor(p.blocks, {n}).to(dev);
  words.realize(), blocks.realize();
  auto seconds = [](auto&& fn) {
    fn();  // warm: compiles the kernel (cached after) and touches the memory
    double best = 1e30;
    for (int r = 0; r < 5; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      fn();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  std::vector<int32_t> digests;
  const double alk_s = seconds([&] { digests = sha256::kernel()({words, blocks}).to_vector<int32_t>(); });
  unsigned char d[SHA256_DIGEST_LENGTH];
  uint32_t check = 0;
  const double ssl_s = seconds([&] {
    for (const std::string& m : messages) {
      SHA256(reinterpret_cast<const unsigned char*>(m.data()), m.size(), d);
      check += d[0];
    }
  });
  // The last message's digest from both, so neither side's work is optimized away or wrong.
  SHA256(reinterpret_cast<const unsigned char*>(messages.back().data()), 64, d);
  const uint32_t first_word = uint32_t{d[0]} << 24 | uint32_t{d[1]} << 16 | uint32_t{d[2]} << 8 | d[3];
  if (static_cast<uint32_t>(digests[static_cast<size_t>((n - 1) * 8)]) != first_word) {
    std::fprintf(stderr, "bench_sha256: alk's digest differs from OpenSSL's\n");
    return 1;
  }
  std::printf("sha256 of %lld 64-byte messages on %s (%s), checksum %u\n", static_cast<long long>(n), dev.name().c_str(),
              dev.info().description.c_str(), check);
  std::printf("RATIO sha256_64B alk=%.0f/s openssl_1core=%.0f/s ratio=%.3f\n", n / alk_s, n / ssl_s, ssl_s / alk_s);
}
