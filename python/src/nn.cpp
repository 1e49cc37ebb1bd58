// alk._C.nn (the C++ layers, losses, initializers), alk._C.optim, alk.compile, safetensors
// and the tokenizer. The Python package (python/alk) wraps the layers in alk.nn.Module
// subclasses; everything computes in the C++ engine.
#include <pybind11/functional.h>

#include "alk/compile.h"
#include "alk/generate.h"
#include "alk/io.h"
#include "alk/nn.h"
#include "alk/optim.h"
#include "alk/pretrained.h"
#include "alk/tokenizer.h"
#include "common.h"

namespace alkpy {

using alk::Tensor;
namespace nn = alk::nn;
namespace optim = alk::optim;

namespace {

// A state dict given as a dict or as (name, tensor) pairs.
nn::NamedTensors named(const py::handle& h) {
  nn::NamedTensors out;
  if (py::isinstance<py::dict>(h)) {
    for (auto [k, v] : py::reinterpret_borrow<py::dict>(h)) out.emplace_back(k.cast<std::string>(), v.cast<Tensor>());
  } else {
    for (py::handle item : h) {
      auto pair = item.cast<std::pair<std::string, Tensor>>();
      out.push_back(pair);
    }
  }
  return out;
}

template <class M, class Base = nn::Module>
py::class_<M, Base, std::shared_ptr<M>> layer(py::module_& m, const char* name, const char* doc) {
  return py::class_<M, Base, std::shared_ptr<M>>(m, name, doc);
}

}  // namespace

void bind_nn(py::module_& top) {
  py::module_ m = top.def_submodule("nn", "The C++ layers and losses (alk.nn wraps them).");
  auto g = py::call_guard<Released>();

  py::class_<nn::Module, std::shared_ptr<nn::Module>>(m, "Module", "A C++ module: a named tree of parameters.")
      .def("forward", [](nn::Module& mod, const Tensor& x) { return mod.forward(x); }, py::arg("x"), g)
      .def("__call__", [](nn::Module& mod, const Tensor& x) { return mod.forward(x); }, py::arg("x"), g)
      .def("named_parameters", &nn::Module::named_parameters, "(name, tensor) pairs, children prefixed 'child.'.")
      .def("named_buffers", &nn::Module::named_buffers)
      .def("state_dict", &nn::Module::state_dict, "Parameters then buffers, as (name, tensor) pairs.")
      .def("load_state_dict", [](nn::Module& mod, py::handle state, bool strict) {
        nn::NamedTensors s = named(state);
        Released r;
        mod.load_state_dict(s, strict);
      }, py::arg("state"), py::arg("strict") = true, "Copies the values in (every key must match when strict).")
      .def("train", &nn::Module::train, py::arg("mode") = true)
      .def("is_training", &nn::Module::is_training)
      .def("num_parameters", &nn::Module::num_parameters)
      .def("zero_grad", &nn::Module::zero_grad);

  layer<nn::Linear>(m, "Linear", "y = x W^T + b; weight [out, in].")
      .def(py::init<int64_t, int64_t, bool>(), py::arg("in_features"), py::arg("out_features"), py::arg("bias") = true)
      .def_readonly("weight", &nn::Linear::weight)
      .def_readonly("bias", &nn::Linear::bias);
  layer<nn::Embedding>(m, "Embedding", "Rows of weight [num, dim] at integer ids.")
      .def(py::init<int64_t, int64_t>(), py::arg("num_embeddings"), py::arg("embedding_dim"))
      .def_readonly("weight", &nn::Embedding::weight);
  layer<nn::LayerNorm>(m, "LayerNorm", "Normalizes the last dim, then scales and shifts.")
      .def(py::init<int64_t, double, bool>(), py::arg("dim"), py::arg("eps") = 1e-5, py::arg("affine") = true)
      .def_readonly("weight", &nn::LayerNorm::weight)
      .def_readonly("bias", &nn::LayerNorm::bias);
  layer<nn::RMSNorm>(m, "RMSNorm", "x / rms(x) * weight over the last dim.")
      .def(py::init<int64_t, double>(), py::arg("dim"), py::arg("eps") = 1e-6)
      .def_readonly("weight", &nn::RMSNorm::weight);
  layer<nn::Dropout>(m, "Dropout", "Zeroes elements with probability p in training.")
      .def(py::init<double>(), py::arg("p") = 0.5);
  py::enum_<nn::Activation>(m, "Activation")
      .value("ReLU", nn::Activation::ReLU)
      .value("GELU", nn::Activation::GELU)
      .value("GELUTanh", nn::Activation::GELUTanh)
      .value("SiLU", nn::Activation::SiLU);
  layer<nn::Act>(m, "Act", "An activation as a module.").def(py::init<nn::Activation>(), py::arg("kind"));
  layer<nn::Flatten>(m, "Flatten", "Merges dims start..end.")
      .def(py::init<int64_t, int64_t>(), py::arg("start_dim") = 1, py::arg("end_dim") = -1);
  layer<nn::MLP>(m, "MLP", "fc -> activation -> proj (-> dropout).")
      .def(py::init<int64_t, int64_t, nn::Activation, double, bool>(), py::arg("dim"), py::arg("hidden"),
           py::arg("act") = nn::Activation::GELUTanh, py::arg("dropout") = 0.0, py::arg("bias") = true)
      .def_readonly("fc", &nn::MLP::fc)
      .def_readonly("proj", &nn::MLP::proj);
  layer<nn::CausalSelfAttention>(m, "CausalSelfAttention", "Multi-head causal self-attention over [B, T, dim].")
      .def(py::init<int64_t, int64_t, double, bool>(), py::arg("dim"), py::arg("heads"), py::arg("dropout") = 0.0,
           py::arg("bias") = true)
      .def_readonly("qkv", &nn::CausalSelfAttention::qkv)
      .def_readonly("proj", &nn::CausalSelfAttention::proj);
  layer<nn::TransformerBlock>(m, "TransformerBlock", "Pre-norm block: x + attn(ln1(x)), then x + mlp(ln2(x)).")
      .def(py::init<int64_t, int64_t, int64_t, double, bool>(), py::arg("dim"), py::arg("heads"),
           py::arg("mlp_ratio") = 4, py::arg("dropout") = 0.0, py::arg("bias") = true)
      .def_readonly("ln1", &nn::TransformerBlock::ln1)
      .def_readonly("ln2", &nn::TransformerBlock::ln2)
      .def_readonly("attn", &nn::TransformerBlock::attn)
      .def_readonly("mlp", &nn::TransformerBlock::mlp);
  layer<nn::GPT>(m, "GPT", "A decoder-only language model (GPT-2 or the LLaMA family): ids [B, T] int64 -> logits [B, T, vocab].")
      .def(py::init([](int64_t vocab, int64_t ctx, int64_t dim, int64_t heads, int64_t layers, double dropout,
                       bool tie, bool bias, int64_t kv_heads, int64_t mlp_hidden, const std::string& norm,
                       double norm_eps, const std::string& positions, double rope_theta, const std::string& mlp,
                       bool qkv_bias, const std::string& rope_type, double rope_factor, double low_freq_factor,
                       double high_freq_factor, int64_t original_context) {
        nn::GPTConfig c{vocab, ctx, dim, heads, layers, dropout, tie, bias};
        c.kv_heads = kv_heads, c.mlp_hidden = mlp_hidden, c.norm_eps = norm_eps, c.rope_theta = rope_theta;
        c.qkv_bias = qkv_bias;
        // The names transformers' configs use.
        alk::check(norm == "layernorm" || norm == "rmsnorm", "GPT", alk::Loc::current(), "norm must be 'layernorm' or 'rmsnorm', got '", norm, "'");
        alk::check(positions == "learned" || positions == "rotary", "GPT", alk::Loc::current(),
              "positions must be 'learned' or 'rotary', got '", positions, "'");
        alk::check(mlp == "gelu_tanh" || mlp == "swiglu", "GPT", alk::Loc::current(), "mlp must be 'gelu_tanh' or 'swiglu', got '", mlp, "'");
        c.norm = norm == "rmsnorm" ? nn::NormKind::RMSNorm : nn::NormKind::LayerNorm;
        c.positions = positions == "rotary" ? nn::PositionKind::Rotary : nn::PositionKind::Learned;
        c.mlp = mlp == "swiglu" ? nn::MLPKind::SwiGLU : nn::MLPKind::GELUTanh;
        c.rope_scaling = {rope_type, rope_factor, low_freq_factor, high_freq_factor, original_context};
        return std::make_shared<nn::GPT>(c);
      }), py::arg("vocab") = 256, py::arg("ctx") = 128, py::arg("dim") = 128, py::arg("heads") = 4,
           py::arg("layers") = 4, py::arg("dropout") = 0.0, py::arg("tie_embeddings") = true, py::arg("bias") = true,
           py::arg("kv_heads") = 0, py::arg("mlp_hidden") = 0, py::arg("norm") = "layernorm", py::arg("norm_eps") = 1e-5,
           py::arg("positions") = "learned", py::arg("rope_theta") = 10000.0, py::arg("mlp") = "gelu_tanh",
           py::arg("qkv_bias") = false, py::arg("rope_type") = "", py::arg("rope_factor") = 1.0,
           py::arg("low_freq_factor") = 1.0, py::arg("high_freq_factor") = 4.0, py::arg("original_context") = 0)
      .def_readonly("wte", &nn::GPT::wte)
      .def_readonly("wpe", &nn::GPT::wpe)
      .def_readonly("blocks", &nn::GPT::blocks)
      .def_readonly("ln_f", &nn::GPT::ln_f)
      .def_readonly("head", &nn::GPT::head)
      .def(
          "generate",
          [](const std::shared_ptr<nn::GPT>& self, const std::vector<std::vector<int32_t>>& prompts,
             int64_t max_new_tokens, double temperature, int64_t top_k, double top_p, std::optional<uint64_t> seed,
             std::optional<int32_t> eos_token_id, double presence_penalty, double frequency_penalty) {
            // Every prompt in its own slot of one alk::Generator: decoded together, each as if alone.
            alk::GeneratorOptions opt;
            opt.slots = std::max<int64_t>(1, static_cast<int64_t>(prompts.size()));
            alk::Generator gen(self, opt);
            std::vector<int64_t> ids;
            for (size_t i = 0; i < prompts.size(); ++i) {
              alk::GenerateRequest r;
              r.prompt = prompts[i];
              r.sampling.max_tokens = max_new_tokens;
              r.sampling.temperature = temperature;
              r.sampling.top_k = top_k;
              r.sampling.top_p = top_p;
              if (seed) r.sampling.seed = *seed + i;
              r.sampling.eos = eos_token_id;
              r.sampling.presence_penalty = presence_penalty;
              r.sampling.frequency_penalty = frequency_penalty;
              ids.push_back(gen.submit(r));
            }
            std::vector<std::vector<int32_t>> out = prompts;
            while (!gen.idle())
              for (const alk::TokenEvent& e : gen.step())
                if (e.token >= 0) out[static_cast<size_t>(e.request - ids.front())].push_back(e.token);
            return out;
          },
          py::arg("prompts"), py::arg("max_new_tokens") = 20, py::arg("temperature") = 0.0, py::arg("top_k") = 0,
          py::arg("top_p") = 1.0, py::arg("seed") = py::none(), py::arg("eos_token_id") = py::none(),
          py::arg("presence_penalty") = 0.0, py::arg("frequency_penalty") = 0.0, g,
          "Continues each prompt (a list of token ids) by up to max_new_tokens tokens with the KV-cache engine "
          "(alk::Generator, all prompts at once): the prompts with their continuations. temperature 0 is greedy; "
          "prompt i samples with seed + i.");
  layer<nn::Conv2d>(m, "Conv2d", "2-D convolution; weight [out, in/groups, k, k].")
      .def(py::init<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool>(), py::arg("in_channels"),
           py::arg("out_channels"), py::arg("kernel_size"), py::arg("stride") = 1, py::arg("padding") = 0,
           py::arg("dilation") = 1, py::arg("groups") = 1, py::arg("bias") = true)
      .def_readonly("weight", &nn::Conv2d::weight)
      .def_readonly("bias", &nn::Conv2d::bias);
  layer<nn::MaxPool2d>(m, "MaxPool2d", "2-D max pooling.")
      .def(py::init<int64_t, int64_t, int64_t>(), py::arg("kernel_size"), py::arg("stride") = -1, py::arg("padding") = 0);
  layer<nn::AvgPool2d>(m, "AvgPool2d", "2-D average pooling.")
      .def(py::init<int64_t, int64_t, int64_t>(), py::arg("kernel_size"), py::arg("stride") = -1, py::arg("padding") = 0);
  layer<nn::BatchNorm2d>(m, "BatchNorm2d", "Per-channel normalization over (N, H, W) with running statistics.")
      .def(py::init<int64_t, double, double>(), py::arg("channels"), py::arg("eps") = 1e-5, py::arg("momentum") = 0.1)
      .def_readonly("weight", &nn::BatchNorm2d::weight)
      .def_readonly("bias", &nn::BatchNorm2d::bias)
      .def_readonly("running_mean", &nn::BatchNorm2d::running_mean)
      .def_readonly("running_var", &nn::BatchNorm2d::running_var);

  m.def("cross_entropy", [](const Tensor& logits, const Tensor& targets, int64_t ignore_index, double smoothing) {
    return nn::cross_entropy(logits, targets, ignore_index, smoothing);
  }, py::arg("input"), py::arg("target"), py::arg("ignore_index") = -100, py::arg("label_smoothing") = 0.0,
        "Mean cross entropy of logits [..., C] against int64 targets [...] (fused log-softmax + NLL).", g);
  m.def("mse_loss", [](const Tensor& x, const Tensor& t) { return nn::mse_loss(x, t); }, py::arg("input"),
        py::arg("target"), "Mean squared error.", g);
  m.def("binary_cross_entropy_with_logits", [](const Tensor& x, const Tensor& t) {
    return nn::binary_cross_entropy_with_logits(x, t);
  }, py::arg("input"), py::arg("target"), "Mean binary cross entropy of logits against targets in [0, 1].", g);
  m.def("activate", [](const Tensor& x, nn::Activation kind) { return nn::activate(x, kind); }, py::arg("x"), py::arg("kind"), g);

  py::module_ init = m.def_submodule("init", "Initializers: write new values into a tensor in place.");
  init.def("normal_", [](Tensor t, double mean, double std) { nn::init::normal_(t, mean, std); return t; },
           py::arg("tensor"), py::arg("mean") = 0.0, py::arg("std") = 1.0, "N(mean, std) in place.", g);
  init.def("uniform_", [](Tensor t, double a, double b) { nn::init::uniform_(t, a, b); return t; }, py::arg("tensor"),
           py::arg("a") = 0.0, py::arg("b") = 1.0, "U(a, b) in place.", g);
  init.def("zeros_", [](Tensor t) { nn::init::zeros_(t); return t; }, py::arg("tensor"), g);
  init.def("ones_", [](Tensor t) { nn::init::ones_(t); return t; }, py::arg("tensor"), g);
  init.def("kaiming_uniform_", [](Tensor t, double a) { nn::init::kaiming_uniform_(t, a); return t; },
           py::arg("tensor"), py::arg("a") = 0.0, g);
  init.def("kaiming_normal_", [](Tensor t, double a) { nn::init::kaiming_normal_(t, a); return t; }, py::arg("tensor"),
           py::arg("a") = 0.0, g);
  init.def("xavier_uniform_", [](Tensor t, double gain) { nn::init::xavier_uniform_(t, gain); return t; },
           py::arg("tensor"), py::arg("gain") = 1.0, g);
  init.def("xavier_normal_", [](Tensor t, double gain) { nn::init::xavier_normal_(t, gain); return t; },
           py::arg("tensor"), py::arg("gain") = 1.0, g);

  // ---- optim ----
  py::module_ o = top.def_submodule("optim", "The C++ optimizers (alk.optim wraps them).");
  py::class_<optim::Optimizer, std::shared_ptr<optim::Optimizer>>(o, "Optimizer")
      .def("step", &optim::Optimizer::step, "One update from the parameters' .grad.", g)
      .def("zero_grad", &optim::Optimizer::zero_grad, "Drops every parameter's .grad.")
      .def_property("lr", &optim::Optimizer::lr, &optim::Optimizer::set_lr, "The learning rate (settable).")
      .def("steps", &optim::Optimizer::steps, "The most updates any parameter has had.")
      .def("state_dict", &optim::Optimizer::state_dict, "'<param>.<slot>' tensors plus 'step'.")
      .def("load_state_dict", [](optim::Optimizer& opt, py::handle state) {
        nn::NamedTensors s = named(state);
        Released r;
        opt.load_state_dict(s);
      }, py::arg("state"), "Restores state_dict()'s tensors (moments, step counts).")
      .def("params", &optim::Optimizer::params, "(name, parameter) pairs being optimized.");
  py::class_<optim::SGD, optim::Optimizer, std::shared_ptr<optim::SGD>>(o, "SGD")
      .def(py::init([](py::handle params, double lr, double momentum, double dampening, double wd, bool nesterov) {
        return std::make_shared<optim::SGD>(named(params), lr, optim::SGDOptions{momentum, dampening, wd, nesterov});
      }), py::arg("params"), py::arg("lr"), py::arg("momentum") = 0.0, py::arg("dampening") = 0.0,
           py::arg("weight_decay") = 0.0, py::arg("nesterov") = false);
  auto adam_options = [](std::pair<double, double> betas, double eps, double wd,
                         std::optional<std::function<bool(const std::string&, const Tensor&)>> decay) {
    optim::AdamOptions opt{betas.first, betas.second, eps, wd, nullptr};
    if (decay) opt.decay = *decay;
    return opt;
  };
  py::class_<optim::Adam, optim::Optimizer, std::shared_ptr<optim::Adam>>(o, "Adam")
      .def(py::init([adam_options](py::handle params, double lr, std::pair<double, double> betas, double eps, double wd,
                                   bool decoupled) {
        return std::make_shared<optim::Adam>(named(params), lr, adam_options(betas, eps, wd, std::nullopt), decoupled);
      }), py::arg("params"), py::arg("lr"), py::arg("betas") = std::make_pair(0.9, 0.999), py::arg("eps") = 1e-8,
           py::arg("weight_decay") = 0.0, py::arg("decoupled") = false);
  py::class_<optim::AdamW, optim::Adam, std::shared_ptr<optim::AdamW>>(o, "AdamW")
      .def(py::init([adam_options](py::handle params, double lr, std::pair<double, double> betas, double eps, double wd,
                                   std::optional<std::function<bool(const std::string&, const Tensor&)>> decay) {
        return std::make_shared<optim::AdamW>(named(params), lr, adam_options(betas, eps, wd, decay));
      }), py::arg("params"), py::arg("lr"), py::arg("betas") = std::make_pair(0.9, 0.999), py::arg("eps") = 1e-8,
           py::arg("weight_decay") = 0.01, py::arg("decay") = py::none());
  o.def("clip_grad_norm", &optim::clip_grad_norm, py::arg("parameters"), py::arg("max_norm"),
        "Scales the gradients so their global L2 norm is at most max_norm; returns the norm before.", g);
  o.def("constant_lr", &optim::constant_lr, py::arg("lr"), "A schedule step -> lr that is always lr.");
  o.def("linear_lr", &optim::linear_lr, py::arg("start"), py::arg("end"), py::arg("steps"),
        "A schedule going linearly from start to end over steps, then staying at end.");
  o.def("cosine_lr", &optim::cosine_lr, py::arg("lr"), py::arg("steps"), py::arg("min_lr") = 0.0,
        "A cosine decay from lr to min_lr over steps.");
  o.def("step_lr", &optim::step_lr, py::arg("lr"), py::arg("step_size"), py::arg("gamma"),
        "lr multiplied by gamma every step_size steps.");
  o.def("warmup", &optim::warmup, py::arg("warmup_steps"), py::arg("then"),
        "A linear ramp from 0 over warmup_steps, then the schedule then(step - warmup_steps).");
}

void bind_runtime(py::module_& m) {
  auto g = py::call_guard<Released>();

  // ---- compile ----
  py::class_<alk::Program>(m, "Program", "A traced step: call it with the same-shaped inputs every time.")
      .def("__call__", [](alk::Program& p, const std::vector<Tensor>& inputs) { p(inputs); }, py::arg("inputs"), g)
      .def("captured", [](const alk::Program& p, const std::string& name) { return p.captured(name); }, py::arg("name"),
           "The value captured under name in the latest call (a copy).", g)
      .def_property_readonly("traced", &alk::Program::traced, "True once the step has been traced (third call on).")
      .def_property_readonly("kernels", &alk::Program::kernels, "Kernels per replay.")
      .def_property_readonly("memory_plan", [](const alk::Program& p) {
        alk::MemoryPlan plan = p.plan();
        return py::dict(py::arg("planned_bytes") = plan.planned_bytes, py::arg("naive_bytes") = plan.naive_bytes);
      });
  m.def("_compile", [](std::function<void(const std::vector<Tensor>&)> fn) { return alk::Program(std::move(fn)); },
        py::arg("fn"), "A Program of fn (alk.compile wraps this).");
  m.def("capture", [](const std::string& name, const Tensor& t) { alk::capture(name, t); }, py::arg("name"),
        py::arg("tensor"), "Inside a compiled step: makes tensor readable after each call as step.captured(name).");

  // ---- safetensors ----
  m.def("_save_safetensors", [](const std::string& path, py::handle tensors,
                                const std::map<std::string, std::string>& metadata) {
    nn::NamedTensors t = named(tensors);
    Released r;
    alk::save_safetensors(path, t, metadata);
  }, py::arg("path"), py::arg("tensors"), py::arg("metadata") = std::map<std::string, std::string>{});
  m.def("_load_safetensors", [](const std::string& path) {
    alk::SafetensorsFile f;
    {
      Released r;
      f = alk::load_safetensors(path);
    }
    return py::make_tuple(py::cast(f.tensors), py::cast(f.metadata));
  }, py::arg("path"));

  // ---- Hugging Face directories (alk.nn.from_pretrained wraps these) ----
  m.def("_load_pretrained", [](const std::string& dir, const std::string& device) {
    alk::Pretrained p;
    {
      Released r;
      p = alk::load_pretrained(dir, device);
    }
    py::dict generation;
    generation["eos_token_id"] = p.generation.eos_ids;
    generation["bos_token_id"] = p.generation.bos_id;
    generation["pad_token_id"] = p.generation.pad_id;
    generation["do_sample"] = p.generation.do_sample;
    generation["temperature"] = p.generation.temperature;
    generation["top_k"] = p.generation.top_k;
    generation["top_p"] = p.generation.top_p;
    generation["max_new_tokens"] = p.generation.max_new_tokens;
    py::dict info;
    info["architecture"] = p.info.architecture;
    info["model_type"] = p.info.model_type;
    info["torch_dtype"] = p.info.torch_dtype;
    info["bos_token_id"] = p.info.bos_id;
    info["eos_token_id"] = p.info.eos_ids;
    info["pad_token_id"] = p.info.pad_id;
    return py::make_tuple(p.model, std::move(p.tokenizer), p.chat_template, generation, info);
  }, py::arg("directory"), py::arg("device") = "");
  m.def("_save_pretrained", [](const std::shared_ptr<nn::GPT>& model, const py::dict& info_dict, const std::string& dir,
                               const std::string& tokenizer_dir, const std::string& dtype_name) {
    const alk::DType dtype = dtype_name == "bfloat16" ? alk::DType::BF16
                             : dtype_name == "float16" ? alk::DType::F16
                                                       : alk::DType::F32;
    alk::check(dtype_name == "float32" || dtype != alk::DType::F32, "save_pretrained", alk::Loc::current(),
               "dtype must be float32, bfloat16 or float16, got ", dtype_name);
    alk::HfModelInfo info;
    info.model_type = info_dict["model_type"].cast<std::string>();
    if (info_dict.contains("bos_token_id") && !info_dict["bos_token_id"].is_none())
      info.bos_id = info_dict["bos_token_id"].cast<int32_t>();
    if (info_dict.contains("pad_token_id") && !info_dict["pad_token_id"].is_none())
      info.pad_id = info_dict["pad_token_id"].cast<int32_t>();
    if (info_dict.contains("eos_token_id")) info.eos_ids = info_dict["eos_token_id"].cast<std::vector<int32_t>>();
    Released r;
    alk::save_pretrained(*model, info, dir, tokenizer_dir, dtype);
  }, py::arg("model"), py::arg("info"), py::arg("directory"), py::arg("tokenizer_dir") = "",
        py::arg("dtype") = "float32");

  // ---- tokenizer ----
  py::class_<alk::Tokenizer>(m, "Tokenizer", "Byte-level BPE (GPT-2 compatible files: vocab.json + merges.txt).")
      .def_static("train", [](const std::string& corpus, int vocab_size, const std::vector<std::string>& specials) {
        return alk::Tokenizer::train(corpus, vocab_size, specials);
      }, py::arg("corpus"), py::arg("vocab_size"), py::arg("special_tokens") = std::vector<std::string>{},
                  "Learns merges from corpus until the vocabulary has vocab_size entries.", g)
      .def_static("load", [](const std::string& dir) { return alk::Tokenizer::load(dir); }, py::arg("directory"),
                  "Loads vocab.json, merges.txt (and special_tokens.json) from a directory.", g)
      .def("save", [](const alk::Tokenizer& t, const std::string& dir) { t.save(dir); }, py::arg("directory"),
           "Writes vocab.json, merges.txt and special_tokens.json.", g)
      .def_static("from_pretrained", [](const std::string& dir) { return alk::Tokenizer::load_tokenizer_json(dir); },
                  py::arg("directory"),
                  "Loads a Hugging Face tokenizer.json (and tokenizer_config.json) from a directory.", g)
      .def("encode", [](const alk::Tokenizer& t, const std::string& text, bool add_special_tokens) {
        return t.encode(text, add_special_tokens);
      }, py::arg("text"), py::arg("add_special_tokens") = false,
           "Token ids of text; add_special_tokens: with the tokenizer.json post-processor's BOS/EOS.", g)
      .def("decode", [](const alk::Tokenizer& t, const std::vector<int32_t>& ids) {
        std::string bytes;
        {
          Released r;
          bytes = t.decode(ids);
        }
        return py::bytes(bytes).attr("decode")("utf-8", "replace");
      }, py::arg("ids"), "The text of ids (invalid UTF-8 is replaced, see decode_bytes).")
      .def("decode_bytes", [](const alk::Tokenizer& t, const std::vector<int32_t>& ids) {
        return py::bytes(t.decode(ids));
      }, py::arg("ids"), "The raw bytes of ids.")
      .def("to_tokenizer_json", [](const alk::Tokenizer& t) { return t.to_tokenizer_json(); },
           "The tokenizer.json transformers reads for this GPT-2 style BPE.")
      .def_property_readonly("vocab_size", &alk::Tokenizer::vocab_size, "Number of ids.")
      .def("token_id", [](const alk::Tokenizer& t, const std::string& tok) { return t.token_id(tok); },
           py::arg("token"), "The id of a vocab.json key (None if unknown).")
      .def("token", [](const alk::Tokenizer& t, int32_t id) { return t.token(id); }, py::arg("id"),
           "The vocab.json key of id (GPT-2's byte alphabet: ' the' is '\\u0120the').")
      .def_property_readonly("special_tokens", &alk::Tokenizer::special_tokens, "The special tokens' texts.")
      .def("add_special_token", [](alk::Tokenizer& t, const std::string& s) { return t.add_special_token(s); },
           py::arg("text"), "Makes text a special token (matched verbatim by encode); returns its id.")
      .def("__len__", &alk::Tokenizer::vocab_size);
}

}  // namespace alkpy
