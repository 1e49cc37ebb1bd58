#include "alk/op_registry.h"

#include <mutex>

#include "alk/op_table.h"

namespace alk {

namespace {
// Registration happens at static-initialization time, in whatever order the linker placed
// the backends' files: the list is a function-local static so it exists before the first.
struct CoverageList {
  std::mutex mu;
  std::vector<const OpCoverage*> tables;
};
CoverageList& coverage_list() {
  static CoverageList list;
  return list;
}
}  // namespace

std::string dtype_families_text(DTypeFamilies families) {
  std::string text;
  for (auto [bit, name] : {std::pair{kF32DType, "f32"}, {kF64DType, "f64"}, {kHalfDType, "half"}, {kIntDType, "int"}})
    if (families & bit) text += (text.empty() ? "" : " ") + std::string(name);
  return text;
}

OpCoverage::OpCoverage(std::string backend) : backend_(std::move(backend)), ops_(static_cast<size_t>(kNumOps)) {
  CoverageList& list = coverage_list();
  std::lock_guard<std::mutex> lock(list.mu);
  list.tables.push_back(this);
}

const OpSupport& OpCoverage::support(OpId op) const { return ops_.at(static_cast<size_t>(op)); }

void OpCoverage::set(OpId op, OpSupport support) { ops_.at(static_cast<size_t>(op)) = std::move(support); }

void OpCoverage::set_elementwise(DTypeFamilies dtypes, std::string note) {
  for (const ElementwiseEntry& e : elementwise_table()) set(e.op, OpSupport{OpSupport::Status::Runs, dtypes, note});
}

std::vector<const OpCoverage*> op_coverages() {
  CoverageList& list = coverage_list();
  std::lock_guard<std::mutex> lock(list.mu);
  return list.tables;
}

const OpCoverage* find_op_coverage(std::string_view backend) {
  for (const OpCoverage* c : op_coverages())
    if (c->backend() == backend) return c;
  return nullptr;
}

}  // namespace alk
