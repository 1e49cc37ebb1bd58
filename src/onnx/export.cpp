// Export of alk models as ONNX (opset 17): each layer is written as the ONNX nodes that
// compute what its forward computes, parameters as initializers (raw little-endian f32).
#include <onnx/onnx_pb.h>  // defines ONNX_API, then includes onnx-ml.pb.h (ONNX_ML=1)

#include <cmath>
#include <limits>

#include "alk/io.h"
#include "alk/nn.h"
#include "graph/graph.h"
#include "onnx/model.h"

namespace alk::onnx {

namespace {

constexpr int64_t kOpset = 17;
constexpr const char* kOp = "onnx export";

// Appends nodes and initializers to one graph, naming every value uniquely.
class GraphWriter {
 public:
  explicit GraphWriter(::onnx::GraphProto* g) : g_(g) {}

  std::string fresh(const std::string& hint) { return hint + "_" + std::to_string(counter_++); }

  // A tensor (parameter or constant) as an initializer, in f32 unless it is integral.
  std::string initializer(const std::string& name, const Tensor& t) {
    auto* init = g_->add_initializer();
    const std::string n = fresh(name);
    init->set_name(n);
    Tensor c = is_integral(t.dtype()) ? t.to(DType::I64) : t.to(DType::F32);
    init->set_data_type(dtype_to_onnx(c.dtype()));
    for (int64_t d : c.shape()) init->add_dims(d);
    const std::vector<unsigned char> bytes = host_bytes(c);
    init->set_raw_data(bytes.data(), bytes.size());
    return n;
  }
  std::string ints(const std::string& name, const std::vector<int64_t>& v) {
    return initializer(name, tensor(v, {static_cast<int64_t>(v.size())}));
  }
  std::string scalar(const std::string& name, double v) { return initializer(name, tensor(std::vector<float>{static_cast<float>(v)}, {})); }

  ::onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& inputs, int outputs = 1) {
    auto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(fresh(op));
    for (const auto& in : inputs) n->add_input(in);
    for (int k = 0; k < outputs; ++k) n->add_output(fresh(op + "_out"));
    return n;
  }
  std::string op(const std::string& op, const std::vector<std::string>& inputs) { return node(op, inputs)->output(0); }

  static void attr(::onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr(::onnx::NodeProto* n, const std::string& name, double v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::FLOAT);
    a->set_f(static_cast<float>(v));
  }
  static void attr(::onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }

  // y = x @ W^T + b (alk's Linear), for any rank of x.
  std::string linear(const std::string& x, const Tensor& weight, const Tensor& bias) {
    std::string y = op("MatMul", {x, initializer("weight_t", weight.t().contiguous())});
    return bias.defined() ? op("Add", {y, initializer("bias", bias)}) : y;
  }
  std::string layer_norm(const std::string& x, const Tensor& w, const Tensor& b, double eps, int64_t dim) {
    Tensor weight = w.defined() ? w : ones({dim});
    Tensor bias = b.defined() ? b : zeros({dim});
    auto* n = node("LayerNormalization", {x, initializer("ln_weight", weight), initializer("ln_bias", bias)});
    attr(n, "axis", int64_t{-1});
    attr(n, "epsilon", eps);
    return n->output(0);
  }
  std::string activation(const std::string& x, nn::Activation a) {
    switch (a) {
      case nn::Activation::ReLU: return op("Relu", {x});
      case nn::Activation::SiLU: return op("Mul", {x, op("Sigmoid", {x})});
      case nn::Activation::GELU: {  // 0.5 x (1 + erf(x / sqrt 2))
        std::string e = op("Erf", {op("Mul", {x, scalar("inv_sqrt2", 0.7071067811865476)})});
        return op("Mul", {op("Mul", {x, scalar("half", 0.5)}), op("Add", {e, scalar("one", 1.0)})});
      }
      case nn::Activation::GELUTanh: {  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        std::string cube = op("Mul", {op("Mul", {x, x}), x});
        std::string inner = op("Add", {x, op("Mul", {cube, scalar("c", 0.044715)})});
        std::string t = op("Tanh", {op("Mul", {inner, scalar("sqrt_2_over_pi", 0.7978845608028654)})});
        return op("Mul", {op("Mul", {x, scalar("half", 0.5)}), op("Add", {t, scalar("one", 1.0)})});
      }
    }
    return x;
  }

 private:
  ::onnx::GraphProto* g_;
  int64_t counter_ = 0;
};

void add_value_info(::onnx::ValueInfoProto* v, const std::string& name, int elem_type,
                    const std::vector<std::string>& dims) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem_type);
  auto* shape = tt->mutable_shape();
  for (const auto& d : dims) {
    auto* dim = shape->add_dim();
    if (!d.empty() && d.find_first_not_of("0123456789") == std::string::npos) dim->set_dim_value(std::stoll(d));
    else dim->set_dim_param(d);
  }
}

void write_model(::onnx::ModelProto& m, const std::string& path, Loc loc) {
  m.set_ir_version(8);
  m.set_producer_name("alk");
  auto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  std::string bytes;
  check(m.SerializeToString(&bytes), kOp, loc, "serializing the model failed (over 2 GB?)");
  write_file_atomic(path, bytes, loc);
}

}  // namespace

void export_gpt(const nn::GPT& model, const std::string& path, Loc loc) {
  NoGradGuard no_grad;
  ::onnx::ModelProto m;
  auto* g = m.mutable_graph();
  g->set_name("alk_gpt");
  GraphWriter w(g);
  const auto& cfg = model.cfg;
  check(cfg.norm == nn::NormKind::LayerNorm && cfg.positions == nn::PositionKind::Learned &&
            cfg.mlp == nn::MLPKind::GELUTanh && cfg.key_value_heads() == cfg.heads && cfg.hidden() == 4 * cfg.dim &&
            !cfg.qkv_bias,
        kOp, loc, "exports GPT-2 layouts only (LayerNorm, learned positions, GELU MLP of 4 * dim, multi-head "
        "attention); this model has a LLaMA-family config");
  const int64_t hd = cfg.dim / cfg.heads;
  // GPT-2 layouts have LayerNorm modules (GPT builds the norm the config names).
  auto layer_norm_of = [](const std::shared_ptr<nn::Module>& m) { return std::static_pointer_cast<nn::LayerNorm>(m); };
  add_value_info(g->add_input(), "ids", ::onnx::TensorProto::INT64, {"B", "T"});
  // Positions 0..T-1 from the ids' shape.
  auto* shape = w.node("Shape", {"ids"});
  auto* t_node = w.node("Gather", {shape->output(0), w.initializer("one_index", tensor(std::vector<int64_t>{1}, {}))});
  std::string t = t_node->output(0);
  auto* range = w.node("Range", {w.initializer("zero", tensor(std::vector<int64_t>{0}, {})), t,
                                 w.initializer("step", tensor(std::vector<int64_t>{1}, {}))});
  std::string tok = w.op("Gather", {w.initializer("wte", model.wte->weight), "ids"});
  std::string pos = w.op("Gather", {w.initializer("wpe", model.wpe->weight), range->output(0)});
  std::string x = w.op("Add", {tok, pos});
  // The causal mask for the longest context, sliced to [T, T]: 0 on and below the diagonal, -inf above.
  std::vector<float> mask(static_cast<size_t>(cfg.ctx * cfg.ctx), 0.0f);
  for (int64_t i = 0; i < cfg.ctx; ++i)
    for (int64_t j = i + 1; j < cfg.ctx; ++j) mask[static_cast<size_t>(i * cfg.ctx + j)] = -std::numeric_limits<float>::infinity();
  std::string t1 = w.op("Unsqueeze", {t, w.ints("axis0", {0})});
  std::string tt = w.op("Concat", {t1, t1});
  w.attr(g->mutable_node(g->node_size() - 1), "axis", int64_t{0});
  std::string causal = w.op("Slice", {w.initializer("causal_mask", tensor(mask, {cfg.ctx, cfg.ctx})), w.ints("zeros2", {0, 0}), tt});
  const std::string qkv_shape = w.ints("qkv_shape", {0, 0, 3, cfg.heads, hd});
  const std::string merge_shape = w.ints("merge_shape", {0, 0, cfg.dim});
  const std::string scale = w.scalar("scale", 1.0 / std::sqrt(static_cast<double>(hd)));
  for (const auto& block : model.blocks) {
    const auto ln1 = layer_norm_of(block->ln1), ln2 = layer_norm_of(block->ln2);
    std::string h = w.layer_norm(x, ln1->weight, ln1->bias, ln1->eps, cfg.dim);
    std::string qkv = w.op("Reshape", {w.linear(h, block->attn->qkv->weight, block->attn->qkv->bias), qkv_shape});
    auto* tr = w.node("Transpose", {qkv});
    w.attr(tr, "perm", std::vector<int64_t>{2, 0, 3, 1, 4});  // [3, B, H, T, D]
    std::string parts[3];
    for (int64_t k = 0; k < 3; ++k) {
      auto* gth = w.node("Gather", {tr->output(0), w.initializer("part", tensor(std::vector<int64_t>{k}, {}))});
      w.attr(gth, "axis", int64_t{0});
      parts[k] = gth->output(0);
    }
    auto* kt = w.node("Transpose", {parts[1]});
    w.attr(kt, "perm", std::vector<int64_t>{0, 1, 3, 2});
    std::string scores = w.op("Add", {w.op("Mul", {w.op("MatMul", {parts[0], kt->output(0)}), scale}), causal});
    auto* sm = w.node("Softmax", {scores});
    w.attr(sm, "axis", int64_t{-1});
    std::string att = w.op("MatMul", {sm->output(0), parts[2]});
    auto* back = w.node("Transpose", {att});
    w.attr(back, "perm", std::vector<int64_t>{0, 2, 1, 3});
    std::string y = w.op("Reshape", {back->output(0), merge_shape});
    x = w.op("Add", {x, w.linear(y, block->attn->proj->weight, block->attn->proj->bias)});
    h = w.layer_norm(x, ln2->weight, ln2->bias, ln2->eps, cfg.dim);
    h = w.activation(w.linear(h, block->mlp->fc->weight, block->mlp->fc->bias), block->mlp->act);
    x = w.op("Add", {x, w.linear(h, block->mlp->proj->weight, block->mlp->proj->bias)});
  }
  const auto ln_f = layer_norm_of(model.ln_f);
  x = w.layer_norm(x, ln_f->weight, ln_f->bias, ln_f->eps, cfg.dim);
  std::string logits = model.head ? w.linear(x, model.head->weight, model.head->bias)
                                  : w.op("MatMul", {x, w.initializer("wte_t", model.wte->weight.t().contiguous())});
  auto* out = w.node("Identity", {logits});
  out->set_output(0, "logits");
  add_value_info(g->add_output(), "logits", ::onnx::TensorProto::FLOAT, {"B", "T", std::to_string(cfg.vocab)});
  write_model(m, path, loc);
}

void export_sequential(const nn::Sequential& model, const Shape& input_shape, const std::string& path, Loc loc) {
  NoGradGuard no_grad;
  check(!input_shape.empty(), kOp, loc, "input_shape must have a batch dim");
  ::onnx::ModelProto m;
  auto* g = m.mutable_graph();
  g->set_name("alk_sequential");
  GraphWriter w(g);
  std::vector<std::string> dims{"N"};
  for (size_t k = 1; k < input_shape.size(); ++k) dims.push_back(std::to_string(input_shape[k]));
  add_value_info(g->add_input(), "input", ::onnx::TensorProto::FLOAT, dims);
  std::string x = "input";
  Tensor probe = zeros(input_shape).contiguous();  // tracks shapes, so Flatten and the output know their ranks
  size_t index = 0;
  for (const auto& layer : model.layers()) {
    const std::string where = "layer " + std::to_string(index++);
    if (auto* conv = dynamic_cast<nn::Conv2d*>(layer.get())) {
      std::vector<std::string> in{x, w.initializer("conv_weight", conv->weight)};
      if (conv->bias.defined()) in.push_back(w.initializer("conv_bias", conv->bias));
      auto* n = w.node("Conv", in);
      const int64_t k = conv->weight.shape()[2];
      w.attr(n, "kernel_shape", std::vector<int64_t>{k, conv->weight.shape()[3]});
      w.attr(n, "strides", std::vector<int64_t>{conv->stride, conv->stride});
      w.attr(n, "pads", std::vector<int64_t>(4, conv->padding));
      w.attr(n, "dilations", std::vector<int64_t>{conv->dilation, conv->dilation});
      w.attr(n, "group", conv->groups);
      x = n->output(0);
    } else if (auto* lin = dynamic_cast<nn::Linear*>(layer.get())) {
      x = w.linear(x, lin->weight, lin->bias);
    } else if (auto* act = dynamic_cast<nn::Act*>(layer.get())) {
      x = w.activation(x, act->kind);
    } else if (auto* mp = dynamic_cast<nn::MaxPool2d*>(layer.get())) {
      auto* n = w.node("MaxPool", {x});
      const int64_t s = mp->stride < 0 ? mp->kernel : mp->stride;
      w.attr(n, "kernel_shape", std::vector<int64_t>{mp->kernel, mp->kernel});
      w.attr(n, "strides", std::vector<int64_t>{s, s});
      w.attr(n, "pads", std::vector<int64_t>(4, mp->padding));
      x = n->output(0);
    } else if (auto* ap = dynamic_cast<nn::AvgPool2d*>(layer.get())) {
      auto* n = w.node("AveragePool", {x});
      const int64_t s = ap->stride < 0 ? ap->kernel : ap->stride;
      w.attr(n, "kernel_shape", std::vector<int64_t>{ap->kernel, ap->kernel});
      w.attr(n, "strides", std::vector<int64_t>{s, s});
      w.attr(n, "pads", std::vector<int64_t>(4, ap->padding));
      w.attr(n, "count_include_pad", int64_t{1});  // alk's avg_pool2d divides by the full window
      x = n->output(0);
    } else if (auto* fl = dynamic_cast<nn::Flatten*>(layer.get())) {
      const int64_t r = probe.dim();
      const int64_t start = fl->start < 0 ? fl->start + r : fl->start, end = fl->end < 0 ? fl->end + r : fl->end;
      check(end == r - 1, kOp, loc, where, ": Flatten must run to the last dim to be exported");
      if (start == 0) {
        x = w.op("Reshape", {x, w.ints("flat", {-1})});
      } else {
        auto* n = w.node("Flatten", {x});
        w.attr(n, "axis", start);
        x = n->output(0);
        check(start == 1, kOp, loc, where, ": Flatten from dim ", start, " is not supported by the exporter");
      }
    } else if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(layer.get())) {
      check(!bn->is_training(), kOp, loc, where, ": BatchNorm2d must be in eval mode (call eval())");
      auto* n = w.node("BatchNormalization", {x, w.initializer("bn_scale", bn->weight), w.initializer("bn_bias", bn->bias),
                                              w.initializer("bn_mean", bn->running_mean), w.initializer("bn_var", bn->running_var)});
      w.attr(n, "epsilon", bn->eps);
      x = n->output(0);
    } else if (auto* ln = dynamic_cast<nn::LayerNorm*>(layer.get())) {
      x = w.layer_norm(x, ln->weight, ln->bias, ln->eps, ln->dim);
    } else if (dynamic_cast<nn::Dropout*>(layer.get())) {
      // Identity at inference.
    } else {
      fail(kOp, loc, where, ": this layer type has no ONNX export (supported: Conv2d, Linear, Act, MaxPool2d, "
           "AvgPool2d, Flatten, BatchNorm2d, LayerNorm, Dropout)");
    }
    probe = layer->forward(probe);
  }
  auto* out = w.node("Identity", {x});
  out->set_output(0, "output");
  std::vector<std::string> out_dims{"N"};
  for (int64_t k = 1; k < probe.dim(); ++k) out_dims.push_back(std::to_string(probe.shape()[static_cast<size_t>(k)]));
  add_value_info(g->add_output(), "output", ::onnx::TensorProto::FLOAT, out_dims);
  write_model(m, path, loc);
}

}  // namespace alk::onnx
