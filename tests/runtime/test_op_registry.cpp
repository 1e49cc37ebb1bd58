// The op registry (include/alk/op_registry.h): every backend compiled into this binary answers
// for every op of the op table, docs/ops.md is the registry's own table, and the devices
// dispatch through their tables.
#include <fstream>
#include <sstream>

#include "alk/op_registry.h"
#include "runtime/device.h"
#include "testing.h"
#include "webgpu/wgsl_templates.h"

namespace alk {
namespace {

std::vector<std::string> expected_backends() {
  std::vector<std::string> names{"cpu", "webgpu"};
#ifdef ALK_HAVE_CUDA
  names.push_back("cuda");
#endif
#ifdef ALK_HAVE_VULKAN
  names.push_back("vulkan");
#endif
  return names;
}

TEST(OpRegistry, EveryBackendAnswersForEveryOp) {
  (void)webgpu::template_ops();  // the exporter's table, linked in by name
  for (const std::string& backend : expected_backends()) {
    const OpCoverage* c = find_op_coverage(backend);
    ASSERT_NE(c, nullptr) << "backend " << backend << " registered no op table";
    for (int i = 0; i < kNumOps; ++i) {
      const OpId op = static_cast<OpId>(i);
      if (!op_needs_backend_kernel(op)) continue;
      const OpSupport& s = c->support(op);
      EXPECT_NE(s.status, OpSupport::Status::Missing)
          << backend << " neither runs nor refuses " << op_name(op) << ": add it to its table or refuse it with a reason";
      if (s.status == OpSupport::Status::Refused) {
        EXPECT_FALSE(s.note.empty()) << backend << " refuses " << op_name(op) << " without a reason";
      }
      if (s.status == OpSupport::Status::Runs) {
        EXPECT_NE(s.dtypes, 0) << backend << " runs " << op_name(op) << " in no dtype";
      }
    }
  }
}

TEST(OpRegistry, TheCpuReferenceRunsEveryOp) {
  const OpCoverage* cpu = find_op_coverage("cpu");
  ASSERT_NE(cpu, nullptr);
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    if (op_needs_backend_kernel(op)) {
      EXPECT_EQ(cpu->support(op).status, OpSupport::Status::Runs) << op_name(op);
    }
  }
}

TEST(OpRegistry, DocsOpsMdIsTheRegistrysTable) {
  (void)webgpu::template_ops();
  std::ifstream f(std::string(ALK_SOURCE_DIR) + "/docs/ops.md");
  ASSERT_TRUE(f) << "docs/ops.md is missing: ./build/alk ops --markdown > docs/ops.md";
  std::stringstream text;
  text << f.rdbuf();
  // The table depends on the backends built in: the checked-in page is the full build's.
  if (expected_backends().size() < 4) GTEST_SKIP() << "this build lacks CUDA or Vulkan; docs/ops.md lists both";
  EXPECT_EQ(text.str(), op_coverage_markdown()) << "docs/ops.md is stale: ./build/alk ops --markdown > docs/ops.md";
}

TEST(OpRegistry, TheTableIsWhatTheRegistryHolds) {
  (void)webgpu::template_ops();
  const std::string table = op_coverage_text();
  // Every op of the table has its row, named as the op table names it.
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    if (!op_needs_backend_kernel(op)) continue;
    EXPECT_NE(table.find("\n" + std::string(op_name(op)) + " "), std::string::npos) << op_name(op);
  }
  // A refusal reaches the table with its reason.
  const OpSupport& host = webgpu::template_ops().coverage().support(OpId::HostCall);
  ASSERT_EQ(host.status, OpSupport::Status::Refused);
  EXPECT_NE(table.find(host.note), std::string::npos);
  EXPECT_EQ(webgpu::unsupported_reason(OpId::HostCall), host.note);
  EXPECT_EQ(webgpu::unsupported_reason(OpId::Matmul), "");
  EXPECT_EQ(dtype_families_text(kF32DType | kIntDType), "f32 int");
}

// A backend's own table, as a plug-in would keep one: adding, refusing and overriding.
TEST(OpRegistry, ATableAddsRefusesAndFinds) {
  using Launch = int (*)();
  TemplateOpTable<Launch> table("test-backend");
  EXPECT_EQ(table.find(OpId::Matmul), nullptr);
  EXPECT_EQ(table.coverage().support(OpId::Matmul).status, OpSupport::Status::Missing);
  table.add(OpId::Matmul, kF32DType, [] { return 7; }, "f32 only");
  ASSERT_NE(table.find(OpId::Matmul), nullptr);
  EXPECT_EQ((*table.find(OpId::Matmul))(), 7);
  EXPECT_EQ(table.coverage().support(OpId::Matmul).dtypes, kF32DType);
  table.refuse(OpId::Matmul, "changed its mind");
  EXPECT_EQ(table.find(OpId::Matmul), nullptr);
  EXPECT_EQ(table.coverage().support(OpId::Matmul).note, "changed its mind");
  EXPECT_EQ(find_op_coverage("test-backend"), &table.coverage());
}

}  // namespace
}  // namespace alk
