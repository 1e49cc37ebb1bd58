// The run's memory budget (Config::memory_budget): set once the parameters exist, so every
// plan after it (the first eager step, the traced step's schedules together, validation) is
// planned within what the parameters leave, and refused before it allocates otherwise.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "alk/compile.h"
#include "alk/train.h"

namespace alk::train {

class RunBudget {
 public:
  explicit RunBudget(const Config& c, Loc loc = Loc::current());
  bool active() const { return budget_ > 0; }
  // A budget refusal (alk::Error "budget") again, with what the run was doing and the numbers.
  [[noreturn]] void refused(const Error& e, const std::string& during) const;
  // "memory: ..." for the log once the step is traced: planned bytes, budget, process peak RSS.
  std::string report(const Program& step) const;

 private:
  int64_t budget_ = -1, params_ = 0;
  std::string text_;
  std::optional<MemoryBudget> guard_;
};

int64_t peak_rss_bytes();  // this process's high-water resident set (getrusage)

}  // namespace alk::train
