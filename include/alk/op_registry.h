// Who runs what: every backend says, for every op of the op table, how it runs it or why it
// does not, in one style (ggml's supports_op and its coverage report; PyTorch's dispatch keys).
//
// A backend keeps one TemplateOpTable<Launch>, where Launch is whatever its launcher is (a
// function pointer, a struct of them). The file that holds a kernel family registers its
// ops at static-initialization time:
//
//     const bool registered = (cpu::template_ops().add(OpId::Softmax, kFloatDTypes, softmax_launch), true);
//
// and the file that decides an op cannot run there says so, with the reason:
//
//     vk::template_ops().refuse(OpId::HostCall, "host functions need host pointers");
//
// Every template op but Buffer, Const, Map, Cast and ToDevice (which the scheduler turns into
// Map kernels and copies on every device, or which are not kernels) must be added or refused.
//
// The device's supports()/launch() look the op up in the same table (nothing else dispatches),
// `alk ops` prints every table side by side (docs/ops.md is its output, checked in CI), and a
// test fails when an op of the table is neither registered nor refused by some backend.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace alk {

enum class OpId : uint16_t;  // the op table (alk/op_table.h)

// The dtype families the coverage table has a column for.
enum DTypeFamily : uint8_t {
  kF32DType = 1,
  kF64DType = 2,
  kHalfDType = 4,  // f16 and bf16
  kIntDType = 8,   // i64, i32, u8, bool
};
using DTypeFamilies = uint8_t;
inline constexpr DTypeFamilies kFloatDTypes = kF32DType | kF64DType | kHalfDType;
inline constexpr DTypeFamilies kAllDTypes = kFloatDTypes | kIntDType;
// "f32 f64 half int", the families that are set.
std::string dtype_families_text(DTypeFamilies families);

// One backend's answer for one op.
struct OpSupport {
  enum class Status : uint8_t { Missing, Runs, Refused };
  Status status = Status::Missing;
  DTypeFamilies dtypes = 0;  // Runs: the families it runs
  std::string note;          // Refused: why not. Runs: what else limits it ("f64 where the device has it")
};

// A backend's answers for every op, registered by name for `alk ops`; each TemplateOpTable
// holds one. Elementwise ops are answered together: a backend that emits Map kernels runs
// them all (set_elementwise).
class OpCoverage {
 public:
  explicit OpCoverage(std::string backend);  // registers itself for op_coverages()
  ~OpCoverage();
  OpCoverage(const OpCoverage&) = delete;
  OpCoverage& operator=(const OpCoverage&) = delete;
  const std::string& backend() const { return backend_; }
  const OpSupport& support(OpId op) const;
  void set(OpId op, OpSupport support);
  void set_elementwise(DTypeFamilies dtypes, std::string note = {});

 private:
  std::string backend_;
  std::vector<OpSupport> ops_;  // by OpId
};

// False for the template ops the scheduler handles itself on every device (Buffer, Const,
// Map, Cast, ToDevice); true for every other op, which each backend must add or refuse.
bool op_needs_backend_kernel(OpId op);

// Every backend compiled into this program, in the order they registered.
std::vector<const OpCoverage*> op_coverages();
const OpCoverage* find_op_coverage(std::string_view backend);

// The coverage table: every op of the op table (elementwise and template) x every backend
// compiled in, the dtype families each runs forward and whether its backward runs there,
// refusals with their reasons. What `alk ops` prints; docs/ops.md is the Markdown form
// (a test fails when it is stale).
std::string op_coverage_text();
std::string op_coverage_markdown();

// How one backend runs each template op.
template <class Launch>
class TemplateOpTable {
 public:
  explicit TemplateOpTable(std::string backend) : coverage_(std::move(backend)) {}
  // The op runs through `launch`, for inputs of the dtype families given.
  void add(OpId op, DTypeFamilies dtypes, Launch launch, std::string note = {}) {
    coverage_.set(op, OpSupport{OpSupport::Status::Runs, dtypes, std::move(note)});
    slot(op) = std::move(launch);
  }
  // The backend cannot run op; `reason` is what supports() failures and `alk ops` report.
  void refuse(OpId op, std::string reason) {
    coverage_.set(op, OpSupport{OpSupport::Status::Refused, 0, std::move(reason)});
    slot(op).reset();
  }
  // nullptr where the backend refuses the op or never said.
  const Launch* find(OpId op) const {
    const size_t i = static_cast<size_t>(op);
    return i < launches_.size() && launches_[i] ? &*launches_[i] : nullptr;
  }
  OpCoverage& coverage() { return coverage_; }
  const OpCoverage& coverage() const { return coverage_; }

 private:
  std::optional<Launch>& slot(OpId op) {
    const size_t i = static_cast<size_t>(op);
    if (launches_.size() <= i) launches_.resize(i + 1);
    return launches_[i];
  }
  OpCoverage coverage_;
  std::vector<std::optional<Launch>> launches_;  // by OpId
};

}  // namespace alk
