// alk's optimizers against torch.optim's own trajectories (tests/fixtures/torch_optim.json,
// PyTorch 1.13, scripts/gen_torch_optim.py): every optimizer and option alk has, 8 steps of a
// quadratic loss on a matrix (decayed by AdamW's default filter) and a vector (not decayed).
// The hand-written rules of test_optimizers.cpp check the same formulas; these check that
// they are PyTorch's.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "alk/alk.h"
#include "alk/optim.h"
#include "io/json.h"

namespace alk {
namespace {

using Vec = std::vector<double>;

// The learning rate and bias corrections reach the kernels as f32 0-d tensors (optim.h): f64
// parameters agree with an all-f64 trajectory to ~1e-7 relative (as test_optimizers.cpp).
constexpr double kTol = 2e-7;

Vec numbers(const json::Value& v) {
  Vec out;
  for (const json::Value& x : v.as_array()) out.push_back(x.as_double());
  return out;
}

std::unique_ptr<optim::Optimizer> make(const json::Value& c, optim::NamedTensors params) {
  const std::string kind = c.at("optimizer").as_string();
  const double lr = c.at("lr").as_double();
  const json::Value& o = c.at("options");
  auto num = [&o](const char* key, double dflt) { return o.find(key) ? o.at(key).as_double() : dflt; };
  if (kind == "SGD") {
    optim::SGDOptions s;
    s.momentum = num("momentum", 0);
    s.dampening = num("dampening", 0);
    s.weight_decay = num("weight_decay", 0);
    s.nesterov = o.find("nesterov") && o.at("nesterov").as_bool();
    return std::make_unique<optim::SGD>(std::move(params), lr, s);
  }
  optim::AdamOptions a;
  if (o.find("betas")) {
    const Vec b = numbers(o.at("betas"));
    a.beta1 = b.at(0);
    a.beta2 = b.at(1);
  }
  a.eps = num("eps", 1e-8);
  a.weight_decay = num("weight_decay", kind == "AdamW" ? 1e-2 : 0);  // torch's defaults
  if (kind == "AdamW") return std::make_unique<optim::AdamW>(std::move(params), lr, a);
  EXPECT_EQ(kind, "Adam");
  return std::make_unique<optim::Adam>(std::move(params), lr, a);
}

TEST(TorchOptim, EveryOptimizerFollowsTorchsTrajectory) {
  std::ifstream f(std::string(ALK_SOURCE_DIR) + "/tests/fixtures/torch_optim.json");
  ASSERT_TRUE(f.good()) << "tests/fixtures/torch_optim.json is missing: run scripts/gen_torch_optim.py";
  std::stringstream text;
  text << f.rdbuf();
  const json::Value fixture = json::parse(text.str());
  const Vec a = numbers(fixture.at("a")), c = numbers(fixture.at("c")), p0 = numbers(fixture.at("p0"));
  int cases = 0;
  for (const json::Value& k : fixture.at("cases").as_array()) {
    SCOPED_TRACE(k.at("name").as_string());
    Tensor w = tensor(p0, {2, 3}).requires_grad_();
    Tensor b = tensor(Vec(p0.rbegin(), p0.rend()), {6}).requires_grad_();
    std::unique_ptr<optim::Optimizer> opt = make(k, optim::NamedTensors{{"w", w}, {"b", b}});
    const Tensor ta = tensor(a, {6}), tc = tensor(c, {6});
    int step = 0;
    for (const json::Value& want : k.at("steps").as_array()) {
      opt->zero_grad();
      const Tensor wf = w.reshape({6});
      (sum(ta * wf * wf * 0.5 + tc * wf) + sum(ta * b * b * 0.5 + tc * b)).backward();
      opt->step();
      ++step;
      for (const auto& [name, p] : {std::pair<const char*, Tensor&>{"w", w}, {"b", b}}) {
        const Vec got = p.to_vector<double>(), ref = numbers(want.at(name));
        ASSERT_EQ(got.size(), ref.size());
        for (size_t i = 0; i < got.size(); ++i)
          EXPECT_NEAR(got[i], ref[i], kTol * (1 + std::fabs(ref[i]))) << name << "[" << i << "] after step " << step;
      }
    }
    EXPECT_EQ(step, 8);
    ++cases;
  }
  EXPECT_EQ(cases, 10);
}

}  // namespace
}  // namespace alk
