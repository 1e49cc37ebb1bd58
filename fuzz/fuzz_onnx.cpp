// alk::onnx::load_bytes on arbitrary bytes, then, for a model that loads, a run on CPU inputs
// built from its declared input shapes (symbolic or large dims become small), under a memory
// budget: a file may ask for any shape, type, attribute or wiring; the answer must be an
// alk::Error, never a crash, a sanitizer report or an allocation the budget refuses to plan.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "alk/onnx.h"
#include "alk/tensor.h"

namespace {

bool dtype_of(const std::string& name, alk::DType* out) {
  static const std::map<std::string, alk::DType> kTypes = {
      {"float", alk::DType::F32}, {"double", alk::DType::F64}, {"int64", alk::DType::I64},
      {"int32", alk::DType::I32}, {"bool", alk::DType::Bool},  {"uint8", alk::DType::U8},
      {"float16", alk::DType::F16}};
  auto it = kTypes.find(name);
  if (it == kTypes.end()) return false;
  *out = it->second;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  alk::onnx::Model m;
  try {
    m = alk::onnx::load_bytes(std::string_view(reinterpret_cast<const char*>(data), size), "");
  } catch (const alk::Error&) {
    return 0;
  }
  if (!m.info().unsupported.empty() || m.info().op_histogram.size() > 64) return 0;
  std::map<std::string, alk::onnx::Value> inputs;
  try {
    for (const auto& v : m.info().inputs) {
      alk::DType dt;
      if (!dtype_of(v.elem_type, &dt)) return 0;
      alk::Shape shape;
      for (const auto& d : v.dims) {
        int64_t n = 2;
        if (!d.empty() && d.size() < 3 && d.find_first_not_of("0123456789") == std::string::npos) n = std::stoll(d);
        shape.push_back(std::min<int64_t>(n, 4));
      }
      if (shape.size() > 6) return 0;
      inputs[v.name] = alk::onnx::Value::of(
          alk::cast(alk::arange(0, 1, 1, alk::DType::F32).reshape({}).expand(shape) + 0.5, dt).contiguous());
    }
    alk::MemoryBudget budget(int64_t{256} << 20);
    alk::NoGradGuard no_grad;
    // run_values: outputs of every kind (a model's sequences and optionals run too).
    std::map<std::string, alk::onnx::Value> out = m.run_values(inputs);
    std::vector<alk::Tensor> all;
    for (auto& [name, v] : out) {
      if (v.tensor.defined()) all.push_back(v.tensor);
      all.insert(all.end(), v.items.begin(), v.items.end());
    }
    alk::realize(all);
  } catch (const alk::Error&) {
  }
  return 0;
}
