#include "backend/cuda/ops/epilogue.h"

#include "expr/emit.h"

namespace alk::cuda {

std::string epilogue_code(const expr::Expr& epilogue, DType node, const std::vector<DType>& inputs, DType out,
                          const expr::Expr* extra, DType extra_dtype) {
  expr::MapSignature sig{"epilogue", {}, out};
  sig.inputs.push_back(node);
  for (DType t : inputs) sig.inputs.push_back(t);
  std::string s = "struct EpiParams { unsigned long long ptr[4]; View batch[4]; i64 rs[4], cs[4]; unsigned long long extra; };\n";
  s += expr::emit_function(epilogue, sig, expr::Target::Cuda) + "\n";
  if (extra) {
    expr::MapSignature xsig = sig;
    xsig.name = "epilogue_extra";
    xsig.output = extra_dtype;
    s += "#define EPI_EXTRA 1\n#define EPI_EXTRA_T " + storage(extra_dtype) + "\n" +
         expr::emit_function(*extra, xsig, expr::Target::Cuda) + "\n";
  }
  // Each input's first element of batch item z, computed once per item (divisions).
  s += "__device__ __forceinline__ void epilogue_bases(i64 z, const EpiParams& e, i64 base[4]) {\n";
  for (size_t i = 0; i < inputs.size(); ++i)
    s += "  base[" + std::to_string(i) + "] = lead_offset(e.batch[" + std::to_string(i) + "], z);\n";
  s += "}\n";
  // The inputs at (gm, gn) are loaded apart from the arithmetic (epilogue_load, then
  // epilogue_apply), so a kernel can issue many loads before it needs the first value.
  std::string fields, load = "  EpiIn in;\n";
  std::string call = "epilogue(x0";
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DType t = inputs[i];
    const std::string n = std::to_string(i), x = "x" + std::to_string(i + 1);
    fields += std::string(" ") + compute_ctype(t) + " " + x + ";";
    load += "  in." + x + " = " +
            load_as_compute(t, "((const " + storage(t) + "*)e.ptr[" + n + "])[base[" + n + "] + gm * e.rs[" + n +
                                   "] + gn * e.cs[" + n + "]]") +
            ";\n";
    call += ", in." + x;
  }
  s += "struct EpiIn {" + fields + " };\n";
  // The inputs of W consecutive columns of one row (`count` of them in range): each input's
  // row address computed once, then stepped by its column stride. Only the inputs in MASK
  // (bit i: input i) are loaded; the others' fields are left as they are.
  std::string load4 =
      "template <int W, int MASK = 15>\n__device__ __forceinline__ void epilogue_load_row(const i64 base[4], i64 gm, "
      "i64 gn0, int count, const EpiParams& e, EpiIn (&in)[W]) {\n";
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string n = std::to_string(i), x = "x" + std::to_string(i + 1), st = storage(inputs[i]);
    load4 += "  if (MASK & " + std::to_string(1 << i) + ") {\n    const " + st + "* row = (const " + st + "*)e.ptr[" + n +
             "] + (base[" + n + "] + gm * e.rs[" + n +
             "] + gn0 * e.cs[" + n + "]);\n    const i64 cs = e.cs[" + n + "];\n#pragma unroll\n" +
             "    for (int c = 0; c < W; ++c)\n      if (c < count) in[c]." + x + " = " + load_as_compute(inputs[i], "row[c * cs]") +
             ";\n  }\n";
  }
  s += load4 + "}\n";
  s += "__device__ __forceinline__ EpiIn epilogue_load(const i64 base[4], i64 gm, i64 gn, const EpiParams& e) {\n" +
       load + "  return in;\n}\n";
  s += "__device__ __forceinline__ float epilogue_apply(float acc, const EpiIn& in) {\n";
  s += "  const float x0 = cvt<float>(cvt<" + storage(node) + ">(acc));\n";
  s += "  return (float)" + call + ");\n}\n";
  if (extra) {
    s += "__device__ __forceinline__ float epilogue_extra_apply(float acc, const EpiIn& in) {\n";
    s += "  const float x0 = cvt<float>(cvt<" + storage(node) + ">(acc));\n";
    s += "  return (float)epilogue_extra" + call.substr(std::string("epilogue").size()) + ");\n}\n";
  }
  s += "__device__ __forceinline__ float epilogue_at(float acc, const i64 base[4], i64 gm, i64 gn, const EpiParams& e) {\n";
  return s + "  return epilogue_apply(acc, epilogue_load(base, gm, gn, e));\n}\n";
}

std::vector<DType> epilogue_input_types(const Kernel& k) {
  std::vector<DType> types;
  for (const KernelArg& x : k.epilogue_inputs) types.push_back(x.dtype);
  return types;
}

std::string epilogue_code(const Kernel& k, DType out) {
  const ExtraOutput* x = k.extra_outputs.empty() ? nullptr : &k.extra_outputs[0];
  return epilogue_code(*k.epilogue, k.node.dtype, epilogue_input_types(k), out, x ? &x->expr : nullptr,
                       x ? x->arg.dtype : DType::BF16);
}

EpiLaunch epilogue_params(const Kernel& k) {
  EpiLaunch e;
  for (size_t i = 0; i < k.epilogue_inputs.size(); ++i) {
    const Arg a = arg_of(k.epilogue_inputs[i]);
    const size_t r = a.shape.size();
    e.ptr[i] = a.ptr;
    e.batch[i] = kview(Shape(a.shape.begin(), a.shape.end() - 2), Shape(a.strides.begin(), a.strides.end() - 2), a.offset);
    e.rs[i] = a.strides[r - 2], e.cs[i] = a.strides[r - 1];
  }
  if (!k.extra_outputs.empty()) {
    const Arg x = arg_of(k.extra_outputs[0].arg);
    e.extra = x.ptr + static_cast<uint64_t>(x.offset) * dtype_size(x.dtype);
  }
  return e;
}

}  // namespace alk::cuda
