#include "backend/cpu/view.h"

namespace alk::cpu {

bool View::is_contiguous() const {
  // Size-1 dims never move the address, so their stride is irrelevant; an empty
  // view has no addresses at all.
  if (numel() == 0) return true;
  int64_t expected = 1;
  for (int64_t d = rank() - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

int64_t View::offset_of(int64_t linear) const {
  int64_t at = offset;
  for (int64_t d = rank() - 1; d >= 0 && linear != 0; --d) {
    int64_t size = shape[d];
    at += (linear % size) * strides[d];
    linear /= size;
  }
  return at;
}

}  // namespace alk::cpu
