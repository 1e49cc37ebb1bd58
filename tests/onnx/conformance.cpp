// The ONNX backend node tests (Debian's libonnx-testdata, /usr/share/libonnx-testdata/data/node:
// one directory per case with model.onnx and test_data_set_*/{input,output}_K.pb) run on each
// device, with a per-op table (passed / failed / unsupported) and a check against the checked-in
// list of cases expected to pass there (tests/onnx/expected_<device kind>.txt): a listed case
// that fails is a test failure; a case that passes without being listed is printed, to be added
// (ALK_ONNX_WRITE_EXPECTED=1 rewrites the list from this run).
#ifdef ALK_HAVE_ONNX
#include <gtest/gtest.h>

#include "required.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>

#include "alk/alk.h"
#include "alk/onnx.h"
#include "graph/graph.h"

namespace fs = std::filesystem;

namespace alk {
namespace {

// ALK_ONNX_NODE_TESTS and ALK_ONNX_EXPECTED_DIR move the data and the lists (a GPU machine
// that gets the test binary and a copy of the data carried to it).
std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}
const std::string kNodeTests = env_or("ALK_ONNX_NODE_TESTS", "/usr/share/libonnx-testdata/data/node");

enum class Status { Pass, Fail, Unsupported };

struct CaseResult {
  std::string name, op;
  Status status = Status::Fail;
  std::string reason;
};

std::string first_line(const std::string& s) {
  std::string l = s.substr(0, s.find('\n'));
  return l.size() > 160 ? l.substr(0, 160) + "..." : l;
}

// The op a case tests: the single node's op, else the supported op its name starts with
// (expanded function bodies), else "(multi-node)".
std::string case_op(const std::string& name, const onnx::Model& m) {
  if (m.info().op_histogram.size() == 1) return m.info().op_histogram.begin()->first;
  std::string flat;
  for (char ch : name.substr(5)) if (ch != '_') flat += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  std::string best;
  std::vector<std::string> candidates = onnx::supported_ops();
  for (auto& [op, n] : m.info().op_histogram) candidates.push_back(op);
  for (const auto& op : candidates) {
    std::string low;
    for (char ch : op) low += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (flat.rfind(low, 0) == 0 && low.size() > best.size()) best = op;
  }
  return best.empty() ? "(multi-node)" : best;
}

// Compares one output with its expected value; "" when equal within tolerance.
std::string compare(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype())
    return std::string("dtype ") + std::string(dtype_name(got.dtype())) + ", expected " + std::string(dtype_name(want.dtype()));
  if (got.shape() != want.shape()) return "shape " + to_string(got.shape()) + ", expected " + to_string(want.shape());
  if (want.numel() == 0) return "";
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  const bool half = want.dtype() == DType::F16 || want.dtype() == DType::BF16;
  const double rtol = half ? 1e-2 : 1e-3, atol = half ? 1e-2 : 1e-5;
  for (size_t k = 0; k < g.size(); ++k) {
    if (std::isnan(w[k]) && std::isnan(g[k])) continue;
    if (g[k] == w[k]) continue;
    if (!is_floating(want.dtype()) || !(std::fabs(g[k] - w[k]) <= atol + rtol * std::fabs(w[k]))) {
      std::ostringstream s;
      s << "value at " << k << ": " << g[k] << ", expected " << w[k];
      return s.str();
    }
  }
  return "";
}

// The same for values of any kind: kinds, lengths, then each tensor.
std::string compare(const onnx::Value& got, const onnx::Value& want) {
  if (got.kind != want.kind)
    return std::string("a ") + std::string(onnx::kind_name(got.kind)) + ", expected a " + std::string(onnx::kind_name(want.kind));
  if (got.kind == onnx::Value::Kind::Tensor) return compare(got.tensor.to(cpu_device()), want.tensor);
  if (got.items.size() != want.items.size())
    return "a sequence of " + std::to_string(got.items.size()) + ", expected " + std::to_string(want.items.size());
  for (size_t k = 0; k < got.items.size(); ++k)
    if (std::string diff = compare(got.items[k].to(cpu_device()), want.items[k]); !diff.empty())
      return "item " + std::to_string(k) + ": " + diff;
  return "";
}

onnx::Value to_device(onnx::Value v, Device& device) {
  if (v.tensor.defined()) v.tensor = v.tensor.to(device);
  for (Tensor& t : v.items) t = t.to(device);
  return v;
}

CaseResult run_case(const fs::path& dir, Device& device) {
  CaseResult r;
  r.name = dir.filename().string();
  r.op = "(unreadable)";
  try {
    onnx::Model m = onnx::load((dir / "model.onnx").string());
    r.op = case_op(r.name, m);
    if (!m.info().unsupported.empty()) {
      r.status = Status::Unsupported;
      r.reason = "ops: " + m.info().unsupported[0];
      return r;
    }
    std::vector<fs::path> sets;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
    std::sort(sets.begin(), sets.end());
    for (const auto& set : sets) {
      std::map<std::string, onnx::Value> inputs;
      const auto names = m.input_names();
      for (size_t k = 0; k < names.size(); ++k) {
        const fs::path p = set / ("input_" + std::to_string(k) + ".pb");
        if (!fs::exists(p)) continue;  // an omitted optional input
        inputs[names[k]] = to_device(onnx::load_value_pb(p.string(), m.info().inputs[k].kind), device);
      }
      std::map<std::string, onnx::Value> out = m.run_values(inputs);
      std::vector<Tensor> all;
      for (auto& [n, v] : out) {
        if (v.tensor.defined()) all.push_back(v.tensor);
        all.insert(all.end(), v.items.begin(), v.items.end());
      }
      realize(all);
      const auto onames = m.output_names();
      for (size_t k = 0; k < onames.size(); ++k) {
        const fs::path p = set / ("output_" + std::to_string(k) + ".pb");
        if (!fs::exists(p)) continue;
        const onnx::Value want = onnx::load_value_pb(p.string(), m.info().outputs[k].kind);
        std::string diff = compare(out.at(onames[k]), want);
        if (!diff.empty()) {
          r.status = Status::Fail;
          r.reason = "output '" + onames[k] + "': " + diff;
          return r;
        }
      }
    }
    r.status = Status::Pass;
  } catch (const Error& e) {
    r.status = e.op() == "onnx.unsupported" ? Status::Unsupported : Status::Fail;
    r.reason = first_line(e.detail().empty() ? e.what() : e.detail());
    if (e.detail().find("has element type") != std::string::npos || e.detail().find("not a TensorProto") != std::string::npos)
      r.status = Status::Unsupported;
  } catch (const std::exception& e) {
    r.status = Status::Fail;
    r.reason = first_line(e.what());
  }
  return r;
}

void run_suite(Device& device, const std::string& kind) {
  if (!fs::is_directory(kNodeTests))
    ALK_SKIP_OR_FAIL_IF_REQUIRED("onnx-testdata", kNodeTests + " is missing (apt-get install libonnx-testdata)");
  // The node tests, then the other suites beside them (models converted from PyTorch, small
  // multi-node graphs), whose case names carry the suite as a prefix.
  std::vector<CaseResult> results;
  std::map<std::string, std::pair<int, int>> per_suite;  // suite -> (passed, cases)
  for (const std::string suite : {"node", "pytorch-converted", "pytorch-operator", "simple"}) {
    const fs::path root = suite == "node" ? fs::path(kNodeTests) : fs::path(kNodeTests).parent_path() / suite;
    if (!fs::is_directory(root)) continue;
    std::vector<fs::path> dirs;
    for (const auto& e : fs::directory_iterator(root))
      if (e.is_directory()) dirs.push_back(e.path());
    std::sort(dirs.begin(), dirs.end());
    for (const auto& d : dirs) {
      CaseResult r = run_case(d, device);
      if (suite != "node") r.name = suite + "/" + r.name;
      per_suite[suite].first += r.status == Status::Pass;
      per_suite[suite].second += 1;
      results.push_back(r);
    }
  }

  struct Row { int pass = 0, fail = 0, unsupported = 0; };
  std::map<std::string, Row> table;
  Row total, claimed;
  for (const auto& r : results) {
    if (r.name.find('/') != std::string::npos) continue;  // the table and the claim are over the node tests
    Row& row = table[r.op];
    int Row::*field = r.status == Status::Pass ? &Row::pass : r.status == Status::Fail ? &Row::fail : &Row::unsupported;
    row.*field += 1;
    total.*field += 1;
    if (onnx::is_supported_op(r.op)) claimed.*field += 1;
  }
  std::cout << "ONNX node tests on " << device.name() << " (" << kNodeTests << ")\n";
  std::cout << std::left << std::setw(28) << "op" << std::right << std::setw(8) << "passed" << std::setw(8) << "failed"
            << std::setw(13) << "unsupported" << "\n";
  for (const auto& [op, row] : table)
    std::cout << std::left << std::setw(28) << op << std::right << std::setw(8) << row.pass << std::setw(8) << row.fail
              << std::setw(13) << row.unsupported << "\n";
  std::cout << std::left << std::setw(28) << "TOTAL" << std::right << std::setw(8) << total.pass << std::setw(8)
            << total.fail << std::setw(13) << total.unsupported << "\n";
  const int claimed_n = claimed.pass + claimed.fail + claimed.unsupported;
  std::cout << "cases of the " << onnx::supported_ops().size() << " ops alk claims: " << claimed.pass << "/" << claimed_n
            << " pass (" << std::fixed << std::setprecision(1) << (claimed_n ? 100.0 * claimed.pass / claimed_n : 0.0)
            << "%)\n" << std::defaultfloat;
  for (const auto& [suite, counts] : per_suite)
    std::cout << "suite " << suite << ": " << counts.first << "/" << counts.second << " pass\n";
  for (const auto& r : results)
    if (r.status == Status::Fail || (r.status == Status::Unsupported && onnx::is_supported_op(r.op)))
      std::cout << (r.status == Status::Fail ? "  FAILED      " : "  unsupported ") << r.name << ": " << r.reason << "\n";

  const std::string list = env_or("ALK_ONNX_EXPECTED_DIR", std::string(ALK_SOURCE_DIR) + "/tests/onnx") + "/expected_" + kind + ".txt";
  if (const char* w = std::getenv("ALK_ONNX_WRITE_EXPECTED"); w && std::string(w) == "1") {
    std::ofstream f(list);
    f << "# ONNX node tests expected to pass on " << kind << " (tests/onnx/conformance.cpp; ALK_ONNX_WRITE_EXPECTED=1 rewrites)\n";
    for (const auto& r : results)
      if (r.status == Status::Pass) f << r.name << "\n";
    std::cout << "wrote " << list << "\n";
    return;
  }
  std::set<std::string> expected;
  std::ifstream f(list);
  if (!f.good())
    ALK_SKIP_OR_FAIL_IF_REQUIRED(kind, "no list of expected passes for " + kind + " (" + list + "); ALK_ONNX_WRITE_EXPECTED=1 writes it");
  for (std::string line; std::getline(f, line);)
    if (!line.empty() && line[0] != '#') expected.insert(line);
  int newly = 0;
  for (const auto& r : results) {
    if (expected.count(r.name)) {
      EXPECT_EQ(r.status, Status::Pass) << r.name << " is listed in " << list << " but did not pass: " << r.reason;
    } else if (r.status == Status::Pass) {
      std::cout << "  newly passing, add it to " << list << ": " << r.name << "\n";
      ++newly;
    }
  }
  std::set<std::string> present;
  for (const auto& r : results) present.insert(r.name);
  for (const auto& name : expected) EXPECT_TRUE(present.count(name)) << name << " is listed but the case is missing";
}

Device* first_device_of_kind(const std::string& kind) {
  for (Device* d : available_devices())
    if (d->info().kind == kind) return d;
  return nullptr;
}

TEST(OnnxConformance, Cpu) { run_suite(cpu_device(), "cpu"); }

TEST(OnnxConformance, Vulkan) {
  Device* d = first_device_of_kind("vulkan");
  if (!d) ALK_SKIP_OR_FAIL_IF_REQUIRED("vulkan", "no Vulkan device");
  run_suite(*d, "vulkan");
}

TEST(OnnxConformance, Cuda) {
  Device* d = first_device_of_kind("cuda");
  if (!d) GTEST_SKIP() << "no CUDA device";
  run_suite(*d, "cuda");
}

}  // namespace
}  // namespace alk
#endif
