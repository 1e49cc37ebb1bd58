// The expression language of the op table and of user-defined ops: expr::parse over inputs
// x, a, b of mixed types, then the parsed DAG is evaluated and emitted in every language;
// custom_elementwise takes the same text as a user's op and runs it with its gradient.
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "alk/tensor.h"
#include "alk/expr.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;  // long texts only slow the search down
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::vector<std::string> names = {"x", "a", "b"};
  const std::vector<alk::expr::Type> types = {alk::expr::Type::F32, alk::expr::Type::F64, alk::expr::Type::I64};
  try {
    alk::expr::Expr e = alk::expr::parse(text, names, types, alk::expr::Type::F32);
    (void)e.str();
  } catch (const alk::Error&) {
    return 0;
  }
  try {
    alk::CustomOp op{"fuzz", {"x", "a", "b"}, text, {text, "g", "0"}};
    alk::Tensor x = alk::tensor(std::vector<double>{0.5, -1.0, 2.0, NAN}, {4});
    x.requires_grad_();
    alk::Tensor y = alk::custom_elementwise(op, {x, 3.0, 2});
    alk::generated_kernel(y, "cuda");
    alk::generated_kernel(y, "glsl");
    alk::generated_kernel(y, "wgsl");
    alk::sum(alk::cast(y, alk::DType::F32)).backward();
    (void)x.grad().to_vector<double>();
  } catch (const alk::Error&) {
  }
  return 0;
}
