#include "alk/op_registry.h"

#include <algorithm>
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

OpCoverage::~OpCoverage() {
  CoverageList& list = coverage_list();
  std::lock_guard<std::mutex> lock(list.mu);
  list.tables.erase(std::remove(list.tables.begin(), list.tables.end(), this), list.tables.end());
}

const OpSupport& OpCoverage::support(OpId op) const { return ops_.at(static_cast<size_t>(op)); }

void OpCoverage::set(OpId op, OpSupport support) { ops_.at(static_cast<size_t>(op)) = std::move(support); }

void OpCoverage::set_elementwise(DTypeFamilies dtypes, std::string note) {
  for (const ElementwiseEntry& e : elementwise_table()) {
    // The Integer rule's ops (bitwise, shifts, rotations) take integers and bools only.
    const DTypeFamilies families = e.rule == DTypeRule::Integer ? static_cast<DTypeFamilies>(dtypes & kIntDType) : dtypes;
    set(e.op, OpSupport{OpSupport::Status::Runs, families, note});
  }
}

// A Cast becomes part of a Map kernel and a ToDevice a copy on every device; Buffer and Const
// are not kernels at all.
bool op_needs_backend_kernel(OpId op) {
  return !(op == OpId::Buffer || op == OpId::Const || op == OpId::Map || op == OpId::Cast || op == OpId::ToDevice);
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

namespace {


// The backends in a fixed order (registration order depends on the linker), then any others.
std::vector<const OpCoverage*> ordered_coverages() {
  std::vector<const OpCoverage*> all = op_coverages(), out;
  for (std::string_view name : {"cpu", "cuda", "vulkan", "webgpu"})
    for (const OpCoverage* c : all)
      if (c->backend() == name) out.push_back(c);
  for (const OpCoverage* c : all)
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  return out;
}

// "F D H I" for the families, "b" where the backward runs too.
std::string cell(const OpCoverage& c, OpId op, std::vector<std::string>& notes) {
  const OpSupport& s = c.support(op);
  auto note_ref = [&notes](const std::string& text) {
    auto it = std::find(notes.begin(), notes.end(), text);
    if (it == notes.end()) it = notes.insert(notes.end(), text);
    return "[" + std::to_string(it - notes.begin() + 1) + "]";
  };
  if (s.status == OpSupport::Status::Missing) return "MISSING";
  if (s.status == OpSupport::Status::Refused) return "no " + note_ref(s.note);
  std::string text;
  for (auto [bit, letter] : {std::pair{kF32DType, 'F'}, {kF64DType, 'D'}, {kHalfDType, 'H'}, {kIntDType, 'I'}})
    text += (s.dtypes & bit) ? letter : '.';
  if (op_differentiable(op)) {
    bool backward = true;
    for (OpId use : op_backward_uses(op)) backward = backward && c.support(use).status == OpSupport::Status::Runs;
    text += backward ? " b" : " -";
  }
  if (!s.note.empty()) text += " " + note_ref(s.note);
  return text;
}

struct CoverageRows {
  std::vector<std::string> backends;
  std::vector<std::vector<std::string>> rows;  // op, kind, then a cell per backend
  std::vector<std::string> notes;
};

CoverageRows coverage_rows() {
  CoverageRows t;
  const std::vector<const OpCoverage*> tables = ordered_coverages();
  for (const OpCoverage* c : tables) t.backends.push_back(c->backend());
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    if (!op_needs_backend_kernel(op)) continue;
    std::vector<std::string> row{std::string(op_name(op)), is_elementwise(op) ? "elementwise" : "template"};
    for (const OpCoverage* c : tables) row.push_back(cell(*c, op, t.notes));
    t.rows.push_back(std::move(row));
  }
  return t;
}

constexpr const char* kLegend =
    "F f32, D f64, H f16 and bf16, I integers (i64 i32 u8 bool), '.' not that family; "
    "b: its backward runs there too (every op its gradient launches does), '-': it does not; "
    "no: the backend refuses the op, [n]: the note below.";

}  // namespace

std::string op_coverage_text() {
  const CoverageRows t = coverage_rows();
  std::vector<size_t> width{2, 4};
  for (const std::string& b : t.backends) width.push_back(b.size());
  for (const auto& row : t.rows)
    for (size_t j = 0; j < row.size(); ++j) width[j] = std::max(width[j], row[j].size());
  auto line = [&width](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t j = 0; j < cells.size(); ++j) s += cells[j] + std::string(width[j] - cells[j].size() + 2, ' ');
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::vector<std::string> header{"op", "kind"};
  header.insert(header.end(), t.backends.begin(), t.backends.end());
  std::string out = line(header);
  for (const auto& row : t.rows) out += line(row);
  out += std::string("\n") + kLegend + "\n";
  for (size_t i = 0; i < t.notes.size(); ++i) out += "[" + std::to_string(i + 1) + "] " + t.notes[i] + "\n";
  return out;
}

std::string op_coverage_markdown() {
  const CoverageRows t = coverage_rows();
  std::string out =
      "# Which backend runs which op\n\n"
      "Generated by `alk ops --markdown > docs/ops.md` from the op registry (include/alk/op_registry.h): "
      "each backend's table of how it runs every op, or why it does not. A test fails when this page is "
      "stale or when an op of the table is neither run nor refused by some backend.\n\n";
  out += std::string(kLegend) + "\n\n| op | kind |";
  for (const std::string& b : t.backends) out += " " + b + " |";
  out += "\n|---|---|";
  for (size_t j = 0; j < t.backends.size(); ++j) out += "---|";
  out += "\n";
  for (const auto& row : t.rows) {
    out += "|";
    for (const std::string& c : row) out += " `" + c + "` |";
    out += "\n";
  }
  out += "\n## Notes\n\n";
  for (size_t i = 0; i < t.notes.size(); ++i) out += std::to_string(i + 1) + ". " + t.notes[i] + "\n";
  return out;
}

}  // namespace alk
