#include <iostream>

#include "alk/alk.h"

int main(int argc, char** argv) {
  (void)argc;
  (void)argv;
  std::cout << "alk\n";
  return 0;
}
