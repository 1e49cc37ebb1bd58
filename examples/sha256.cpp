// SHA-256 on any device, as a kernel from source text (examples/sha256/: one body per
// language). Prints one lowercase hex digest a line, in the order given:
//
//   build/example_sha256 [--device D] [MESSAGE ...]
//
// Each argument is hashed as its raw bytes; with no message arguments, each line of stdin
// (without its newline) is one message. D: cpu (the default), vulkan, cuda, auto.
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "sha256/sha256_kernel.h"

int main(int argc, char** argv) {
  std::string device = "cpu";
  std::vector<std::string> messages;
  bool from_args = false;
  for (int a = 1; a < argc; ++a) {
    if (!std::strcmp(argv[a], "--device") && a + 1 < argc) {
      device = argv[++a];
    } else {
      messages.emplace_back(argv[a]);
      from_args = true;
    }
  }
  if (!from_args)
    for (std::string line; std::getline(std::cin, line);) messages.push_back(line);
  try {
    for (const std::string& hex : sha256::hex_digests(messages, alk::get_device(device))) std::cout << hex << "\n";
  } catch (const alk::Error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
