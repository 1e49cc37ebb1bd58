// SHA-256 of a batch of messages as an alk user kernel (alk/user_kernel.h): one invocation
// hashes one message; bodies in C++, CUDA C, GLSL and WGSL (the *.inc files beside this one,
// raw strings the Python twin examples/python/sha256.py reads too). The host pads each message
// (FIPS 180-4, 5.1.1) into big-endian 32-bit words; the device runs the compression.
// Used by examples/sha256.cpp, tests/examples/test_sha256.cpp and bench/bench_sha256.cpp.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "alk/alk.h"
#include "alk/user_kernel.h"

namespace sha256 {

inline const alk::UserKernel& kernel() {
  static const alk::UserKernel k = [] {
    alk::KernelSpec s;
    s.name = "sha256";
    s.inputs = {{"words", alk::DType::I32, 2}, {"blocks", alk::DType::I32, 1}};
    s.output = {"digest", alk::DType::I32, 2};
    s.output_shape = [](std::span<const alk::Shape> in, std::span<const double>) { return alk::Shape{in[1][0], 8}; };
    s.invocations = [](std::span<const alk::Shape> in, std::span<const double>) { return in[1][0]; };
    using T = alk::KernelTarget;
    s.body[int(T::Cpp)] =
#include "body.cpp.inc"
        ;
    s.helpers[int(T::Cpp)] =
#include "helpers.cpp.inc"
        ;
    s.body[int(T::Cuda)] =
#include "body.cu.inc"
        ;
    s.helpers[int(T::Cuda)] =
#include "helpers.cu.inc"
        ;
    s.body[int(T::Glsl)] =
#include "body.glsl.inc"
        ;
    s.helpers[int(T::Glsl)] =
#include "helpers.glsl.inc"
        ;
    s.body[int(T::Wgsl)] =
#include "body.wgsl.inc"
        ;
    s.helpers[int(T::Wgsl)] =
#include "helpers.wgsl.inc"
        ;
    return alk::UserKernel(std::move(s));
  }();
  return k;
}

// The messages padded as the kernel reads them: [n, width] big-endian words (as i32 bit
// patterns) and each message's block count.
struct Padded {
  std::vector<int32_t> words, blocks;
  int64_t width = 0;  // words a row: 16 x the most blocks of any message
};

inline Padded pad(const std::vector<std::string>& messages) {
  Padded p;
  int64_t most = 1;
  for (const std::string& m : messages) {
    // The message, 0x80, zeros, and its length in bits as 8 bytes: a whole number of blocks.
    const int64_t blocks = (static_cast<int64_t>(m.size()) + 8) / 64 + 1;
    p.blocks.push_back(static_cast<int32_t>(blocks));
    most = std::max(most, blocks);
  }
  p.width = most * 16;
  p.words.assign(messages.size() * static_cast<size_t>(p.width), 0);
  for (size_t r = 0; r < messages.size(); ++r) {
    const std::string& m = messages[r];
    std::vector<uint8_t> bytes(static_cast<size_t>(p.blocks[r]) * 64, 0);
    std::copy(m.begin(), m.end(), bytes.begin());
    bytes[m.size()] = 0x80;
    const uint64_t bits = static_cast<uint64_t>(m.size()) * 8;
    for (int k = 0; k < 8; ++k) bytes[bytes.size() - 1 - k] = static_cast<uint8_t>(bits >> (8 * k));
    for (size_t w = 0; w < bytes.size() / 4; ++w) {
      const uint32_t v = uint32_t{bytes[4 * w]} << 24 | uint32_t{bytes[4 * w + 1]} << 16 |
                         uint32_t{bytes[4 * w + 2]} << 8 | uint32_t{bytes[4 * w + 3]};
      p.words[r * static_cast<size_t>(p.width) + w] = static_cast<int32_t>(v);
    }
  }
  return p;
}

// The digests of `messages` computed on `device`, as lowercase hex, in order.
inline std::vector<std::string> hex_digests(const std::vector<std::string>& messages, alk::Device& device) {
  if (messages.empty()) return {};
  const Padded p = pad(messages);
  const int64_t n = static_cast<int64_t>(messages.size());
  const alk::Tensor words = alk::tensor(p.words, {n, p.width}).to(device);
  const alk::Tensor blocks = alk::tensor(p.blocks, {n}).to(device);
  const std::vector<int32_t> d = kernel()({words, blocks}).to_vector<int32_t>();
  std::vector<std::string> out;
  for (int64_t r = 0; r < n; ++r) {
    std::string hex;
    char buf[9];
    for (int k = 0; k < 8; ++k) {
      std::snprintf(buf, sizeof buf, "%08x", static_cast<uint32_t>(d[static_cast<size_t>(r * 8 + k)]));
      hex += buf;
    }
    out.push_back(hex);
  }
  return out;
}

}  // namespace sha256
