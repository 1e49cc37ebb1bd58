// `alk onnx info MODEL.onnx`: opset, producer, inputs/outputs with their (symbolic) shapes, the
// op histogram and what alk cannot import.
// `alk onnx run MODEL.onnx --input NAME=FILE.npy ... [--device D] [--out DIR]`: runs the model;
// with --out, one DIR/<output name>.npy per graph output (dtype and shape kept; a sequence's
// items as <output name>_<k>.npy), else a summary.
// `alk onnx export` (onnx_export.h): an alk model's forward as an ONNX file.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>

#include "alk/compile.h"
#include "alk/npy.h"
#include "graph/graph.h"
#include "tools/alk/commands.h"
#include "tools/alk/onnx_export.h"
#ifdef ALK_HAVE_ONNX
#include "alk/onnx.h"
#endif

namespace alk::cli {

#ifdef ALK_HAVE_ONNX
namespace {

std::string shape_text(const onnx::ValueInfo& v) {
  if (!v.has_shape) return "(shape not declared)";
  std::string s = "[";
  for (size_t k = 0; k < v.dims.size(); ++k) s += (k ? ", " : "") + v.dims[k];
  return s + "]";
}

bool dtype_named(const std::string& name, DType* out) {
  static const std::map<std::string, DType> kTypes = {
      {"float", DType::F32}, {"double", DType::F64}, {"int64", DType::I64}, {"int32", DType::I32},
      {"bool", DType::Bool}, {"uint8", DType::U8},   {"float16", DType::F16}, {"bfloat16", DType::BF16}};
  auto it = kTypes.find(name);
  if (it == kTypes.end()) return false;
  *out = it->second;
  return true;
}

// Output shapes for inputs whose symbolic dims take the values given (default 1): the graph is
// built over lazy zeros, so nothing is computed except the small shape tensors. A model whose
// windows do not fit 1-pixel images (cls's MaxPool) is tried again with the unset dims at 64;
// when neither fits, the shapes are reported as not inferred (with the reason), not as an error.
void print_inferred_shapes(const onnx::Model& m, const std::vector<std::string>& dim_args) {
  std::map<std::string, int64_t> symbols;
  for (const auto& a : dim_args) {
    const size_t eq = a.find('=');
    check(eq != std::string::npos && eq > 0, "onnx info", Loc::current(), "--dim wants NAME=VALUE, got '", a, "'");
    symbols[a.substr(0, eq)] = std::stoll(a.substr(eq + 1));
  }
  std::string first_error;
  for (const int64_t unset : {int64_t{1}, int64_t{64}}) {
    std::map<std::string, Tensor> inputs;
    std::string used;
    bool defaulted = false;
    for (const auto& v : m.info().inputs) {
      DType dt;
      if (!v.has_shape || !dtype_named(v.elem_type, &dt)) {
        std::cout << "shapes: not inferred (input '" << v.name << "' has no tensor type and shape)\n";
        return;
      }
      Shape shape;
      for (const auto& d : v.dims) {
        if (!d.empty() && d.find_first_not_of("0123456789") == std::string::npos) {
          shape.push_back(std::stoll(d));
        } else {
          defaulted = defaulted || !symbols.count(d);
          const int64_t n = symbols.count(d) ? symbols[d] : unset;
          if (used.find(" " + d + "=") == std::string::npos) used += " " + d + "=" + std::to_string(n);
          shape.push_back(n);
        }
      }
      inputs[v.name] = zeros(shape, dt);
    }
    std::map<std::string, Tensor> out;
    try {
      NoGradGuard no_grad;
      out = m.run(inputs);
    } catch (const Error& e) {
      if (first_error.empty()) first_error = e.what();
      if (defaulted && unset == 1) continue;  // try again with larger unset dims
      std::cout << "shapes: not inferred for" << used << " (" << first_error
                << "); give the symbolic dims with --dim NAME=VALUE\n";
      return;
    }
    std::cout << "inferred output shapes" << (used.empty() ? "" : " (" + used.substr(1) + ")") << ":\n";
    for (const auto& name : m.output_names())
      std::cout << "  " << name << "  " << dtype_name(out.at(name).dtype()) << "  " << to_string(out.at(name).shape())
                << "\n";
    return;
  }
}

int run_info(const std::string& path, const std::vector<std::string>& dim_args) {
  onnx::Model m = onnx::load(path);
  const onnx::ModelInfo& info = m.info();
  std::cout << path << ": ir_version " << info.ir_version << ", opset " << info.opset << ", producer '"
            << info.producer << "'\n";
  std::cout << "initializers: " << info.initializers << " (" << info.initializer_bytes << " bytes)\n";
  std::cout << "inputs:\n";
  for (const auto& v : info.inputs) std::cout << "  " << v.name << "  " << v.elem_type << "  " << shape_text(v) << "\n";
  std::cout << "outputs:\n";
  for (const auto& v : info.outputs) std::cout << "  " << v.name << "  " << v.elem_type << "  " << shape_text(v) << "\n";
  std::vector<std::pair<std::string, int64_t>> ops(info.op_histogram.begin(), info.op_histogram.end());
  std::stable_sort(ops.begin(), ops.end(), [](auto& a, auto& b) { return a.second > b.second; });
  int64_t nodes = 0;
  for (auto& [op, n] : ops) nodes += n;
  std::cout << "ops (" << nodes << " nodes, " << ops.size() << " types):\n";
  for (auto& [op, n] : ops) std::cout << "  " << std::setw(6) << n << "  " << op << "\n";
  if (info.unsupported.empty()) {
    std::cout << "unsupported: none\n";
  } else {
    std::cout << "unsupported:";
    for (const auto& u : info.unsupported) std::cout << " " << u;
    std::cout << "\n";
  }
  if (info.unsupported.empty()) print_inferred_shapes(m, dim_args);
  return info.unsupported.empty() ? 0 : 2;
}

int run_model(const std::string& path, const std::vector<std::string>& input_args, const std::string& device_name,
              const std::string& out_dir, int repeat, bool compiled, bool eager) {
  onnx::Model m = onnx::load(path);
  m.set_replay(!eager);
  Device& device = get_device(device_name);
  std::map<std::string, Tensor> inputs;
  for (const auto& arg : input_args) {
    const size_t eq = arg.find('=');
    check(eq != std::string::npos && eq > 0, "onnx run", Loc::current(), "--input wants NAME=FILE.npy, got '", arg, "'");
    inputs[arg.substr(0, eq)] = load_npy(arg.substr(eq + 1)).to(device);
  }
  // A model with sequence or optional outputs runs through run_values, uncached.
  bool tensor_outputs = true;
  for (const auto& v : m.info().outputs) tensor_outputs = tensor_outputs && v.kind == onnx::ValueInfo::Kind::Tensor;
  check(tensor_outputs || !compiled, "onnx run", Loc::current(), "--compile needs a model whose outputs are all tensors");
  std::map<std::string, onnx::Value> given, values;
  for (auto& [name, t] : inputs) given[name] = onnx::Value::of(t);
  std::map<std::string, Tensor> outputs;
  double best_ms = 0;
  // --compile: the first call runs eagerly, the second is traced, later ones replay the recorded
  // kernels (alk::compile). Valid for models whose host reads depend only on shapes.
  std::vector<std::string> names;
  std::vector<Tensor> positional;
  for (auto& [name, t] : inputs) names.push_back(name), positional.push_back(t);
  Program program([&](const std::vector<Tensor>& in) {
    std::map<std::string, Tensor> named;
    for (size_t k = 0; k < in.size(); ++k) named[names[k]] = in[k];
    for (auto& [name, t] : m.run(named)) capture(name, t);
  });
  const int calls = compiled ? std::max(repeat, 1) + 2 : std::max(repeat, 1);
  for (int r = 0; r < calls; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<Tensor> all;
    if (compiled) {
      program(positional);
      for (const auto& name : m.output_names()) all.push_back(outputs[name] = program.captured(name));
    } else if (tensor_outputs) {
      outputs = m.run(inputs);
      for (auto& [name, t] : outputs) all.push_back(t);
      realize(all);
    } else {
      values = m.run_values(given);
      for (auto& [name, v] : values) {
        if (v.kind == onnx::Value::Kind::Tensor) all.push_back(v.tensor);
        all.insert(all.end(), v.items.begin(), v.items.end());
      }
      realize(all);
    }
    for (auto& t : all) (void)host_bytes(t);  // on a GPU the time includes the download, as a user sees it
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (compiled && r < 2) continue;  // the eager call and the traced one
    best_ms = best_ms == 0 ? ms : std::min(best_ms, ms);
  }
  // Each output's tensors with their labels: the output's name, or NAME_K for item K of a sequence.
  std::vector<std::pair<std::string, Tensor>> written;
  for (const auto& name : m.output_names()) {
    const onnx::Value v = tensor_outputs ? onnx::Value::of(outputs.at(name)) : values.at(name);
    if (v.kind == onnx::Value::Kind::Tensor) written.emplace_back(name, v.tensor);
    for (size_t k = 0; k < v.items.size(); ++k) written.emplace_back(name + "_" + std::to_string(k), v.items[k]);
    if (v.kind != onnx::Value::Kind::Tensor && out_dir.empty())
      std::cout << name << ": " << onnx::kind_name(v.kind) << (v.kind == onnx::Value::Kind::Sequence ? " of " + std::to_string(v.items.size()) : "") << "\n";
  }
  if (!out_dir.empty()) {
    std::filesystem::create_directories(out_dir);
    for (const auto& [name, t] : written) {
      std::string file = name;
      for (char& ch : file)
        if (ch == '/' || ch == '\\' || ch == 0) ch = '_';
      if (file == "." || file == "..") file = "_" + file;
      save_npy((std::filesystem::path(out_dir) / (file + ".npy")).string(), t);
      std::cout << "wrote " << (std::filesystem::path(out_dir) / (file + ".npy")).string() << "\n";
    }
  } else {
    for (const auto& [name, t] : written) {
      std::cout << name << ": " << dtype_name(t.dtype()) << " " << to_string(t.shape());
      if (t.numel() > 0) {
        std::vector<double> v = t.to_vector<double>();
        double lo = v[0], hi = v[0], s = 0;
        for (double x : v) lo = std::min(lo, x), hi = std::max(hi, x), s += x;
        std::cout << "  min " << lo << " max " << hi << " mean " << s / static_cast<double>(v.size()) << "  first [";
        for (size_t k = 0; k < std::min<size_t>(v.size(), 6); ++k) std::cout << (k ? ", " : "") << v[k];
        std::cout << (v.size() > 6 ? ", ...]" : "]");
      }
      std::cout << "\n";
    }
  }
  if (repeat > 1) std::cout << "best of " << repeat << ": " << best_ms << " ms on " << device.name() << "\n";
  return 0;
}

}  // namespace
#endif

void add_onnx_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("onnx", "inspect, run and export ONNX models");
  cmd->require_subcommand(1);
#ifdef ALK_HAVE_ONNX
  static std::string info_path;
  static std::vector<std::string> dim_args;
  auto* info = cmd->add_subcommand("info",
                                   "opset, inputs/outputs with shapes, op histogram, unsupported ops (exit code 2 "
                                   "when there are some), output shapes inferred for the symbolic dims");
  info->add_option("model", info_path, "a .onnx file")->required();
  info->add_option("--dim", dim_args, "NAME=VALUE for a symbolic input dim (default 1)");
  info->callback([] {
    int rc = run_info(info_path, dim_args);
    if (rc) throw CLI::RuntimeError(rc);
  });
  static std::string run_path, device_name = "cpu", out_dir;
  static std::vector<std::string> input_args;
  static int repeat = 1;
  static bool compiled = false, eager = false;
  auto* run = cmd->add_subcommand("run", "run a model on .npy inputs");
  run->add_option("model", run_path, "a .onnx file")->required();
  run->add_option("--input", input_args, "NAME=FILE.npy, once per graph input");
  run->add_option("--device", device_name, "cpu, vulkan, cuda, auto")->capture_default_str();
  run->add_option("--out", out_dir, "write <output name>.npy files here instead of printing a summary");
  run->add_option("--repeat", repeat, "run this many times and print the best wall time")->capture_default_str();
  run->add_flag("--compile", compiled,
                "trace the model once and replay its kernels (alk::compile); only for models whose "
                "host reads (shapes, axes) do not depend on input values");
  run->add_flag("--eager", eager,
                "import and schedule the graph on every call (no per-shape program cache; for debugging)");
  run->callback([] {
    int rc = run_model(run_path, input_args, device_name, out_dir, repeat, compiled, eager);
    if (rc) throw CLI::RuntimeError(rc);
  });
  add_onnx_export_subcommand(*cmd);
#else
  cmd->callback([] {
    std::cerr << "alk was built without ONNX support (install libonnx-dev libprotobuf-dev and rebuild)\n";
    throw CLI::RuntimeError(1);
  });
#endif
}

}  // namespace alk::cli
