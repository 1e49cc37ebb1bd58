// examples/sha256 (a user kernel with C++, CUDA, GLSL and WGSL bodies) against FIPS 180-4's
// example digests and against OpenSSL on 10,000 random messages, on the CPU (the C++ body) and
// on every GPU device found (Vulkan runs the GLSL body; lavapipe in CI).
#include <gtest/gtest.h>
#include <openssl/sha.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "../../examples/sha256/sha256_kernel.h"
#include "required.h"

namespace alk {
namespace {

std::vector<Device*> devices() {
  std::vector<Device*> out{&cpu_device()};
  for (Device* d : available_devices())
    if (d->info().type != "cpu") out.push_back(d);
  return out;
}

std::string openssl_hex(const std::string& m) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(m.data()), m.size(), d);
  std::string hex;
  char buf[3];
  for (unsigned char b : d) {
    std::snprintf(buf, sizeof buf, "%02x", b);
    hex += buf;
  }
  return hex;
}

bool has_gpu() { return devices().size() > 1; }

TEST(Sha256Example, Fips180ExampleVectors) {
  // FIPS 180-4's examples (NIST's "Example Algorithm" SHA-256 page): one block, empty, the
  // 448-bit message (two blocks: its padding does not fit the first) and one million 'a'.
  const std::vector<std::string> messages = {"abc", "", "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
                                             std::string(1000000, 'a')};
  const std::vector<std::string> expected = {
      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
      "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"};
  for (Device* dev : devices()) {
    SCOPED_TRACE(dev->name());
    EXPECT_EQ(sha256::hex_digests(messages, *dev), expected);
  }
  if (!has_gpu()) ALK_SKIP_OR_FAIL_IF_REQUIRED("vulkan", "no GPU device: only the CPU body was checked");
}

TEST(Sha256Example, TenThousandRandomMessagesMatchOpenSsl) {
  std::mt19937 rng(2026);
  // Lengths 0..300 bytes cover every padding case (55, 56, 63, 64 bytes: where the length
  // field spills into another block); bytes of every value, zeros and 0x80 included.
  std::vector<std::string> messages(10000);
  for (size_t j = 0; j < messages.size(); ++j) {
    const size_t len = j < 130 ? j : rng() % 301;
    for (size_t k = 0; k < len; ++k) messages[j] += static_cast<char>(rng() & 0xff);
  }
  std::vector<std::string> expected;
  for (const std::string& m : messages) expected.push_back(openssl_hex(m));
  for (Device* dev : devices()) {
    SCOPED_TRACE(dev->name());
    const std::vector<std::string> got = sha256::hex_digests(messages, *dev);
    ASSERT_EQ(got.size(), expected.size());
    int wrong = 0;
    for (size_t j = 0; j < got.size(); ++j)
      if (got[j] != expected[j] && ++wrong <= 3) ADD_FAILURE() << "message " << j << " (" << messages[j].size() << " bytes)";
    EXPECT_EQ(wrong, 0);
  }
  if (!has_gpu()) ALK_SKIP_OR_FAIL_IF_REQUIRED("vulkan", "no GPU device: only the CPU body was checked");
}

// The program prints the standard's digests, one a line, from arguments and from stdin.
TEST(Sha256Example, ProgramPrintsOneDigestALine) {
  const std::string exe = std::string(ALK_BINARY_DIR) + "/example_sha256";
  auto run = [](const std::string& cmd) {
    std::string out;
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) {
      ADD_FAILURE() << "cannot run " << cmd;
      return out;
    }
    char buf[256];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    EXPECT_EQ(::pclose(p), 0) << cmd;
    return out;
  };
  const std::string abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n";
  const std::string empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n";
  EXPECT_EQ(run(exe + " abc ''"), abc + empty);
  EXPECT_EQ(run("printf 'abc\\n\\n' | " + exe), abc + empty);
  if (has_gpu()) {
    EXPECT_EQ(run(exe + " --device " + devices()[1]->name() + " abc"), abc);
  }
}

}  // namespace
}  // namespace alk
