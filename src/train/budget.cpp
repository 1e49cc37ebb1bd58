#include "train/budget.h"

#include <sys/resource.h>

#include <cstdio>

#include "graph/graph.h"

namespace alk::train {

namespace {

std::string mb(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

int64_t peak_rss_bytes() {
  struct rusage u {};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;  // Linux reports KB
}

RunBudget::RunBudget(const Config& c, Loc loc) : text_(c.memory_budget) {
  if (c.memory_budget.empty()) return;
  budget_ = parse_bytes(c.memory_budget, loc);
  // What is alive now (the parameters, the batch buffers) stays alive: plans get the rest.
  params_ = Buffer::live_bytes();
  check(params_ < budget_, "train", loc, "memory budget ", text_, " (", budget_, " bytes) is smaller than the ",
        params_, " bytes the parameters already hold");
  guard_.emplace(budget_ - params_);
}

void RunBudget::refused(const Error& e, const std::string& during) const {
  fail("train", Loc::current(), "memory budget ", text_, " (", budget_, " bytes) refused ", during,
       " before allocating it: parameters hold ", params_, " bytes, leaving ", budget_ - params_, "; ", e.detail());
}

std::string RunBudget::report(const Program& step) const {
  const MemoryPlan p = step.plan();
  std::string s = "memory: the compiled step plans " + mb(p.planned_bytes) + " (one buffer per tensor: " +
                  mb(p.naive_bytes) + ") + parameters " + mb(params_);
  if (active()) s += ", within the budget of " + mb(budget_);
  return s + "; process peak RSS so far " + mb(peak_rss_bytes());
}

}  // namespace alk::train
