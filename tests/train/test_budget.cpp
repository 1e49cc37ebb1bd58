// MemoryBudget: plans over the budget are refused before anything is allocated, with a
// message naming the peak, the budget and the largest tensor; budgets nest; the planner's
// reuse shows in last_memory_plan().
#include <string>
#include <vector>

#include "error_expect.h"
#include "graph/graph.h"
#include "testing.h"

namespace alk {
namespace {

Tensor input(Shape shape, double start) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  Tensor t = arange(start, start + static_cast<double>(n), 1.0, DType::F32).reshape(shape) * 0.001;
  t.realize();
  return t;
}

// A chain of template ops over [R, C] f32 tensors.
Tensor chain(const Tensor& a, const Tensor& b) {
  Tensor h = matmul(a, b);         // [64, 128]
  h = softmax(h, 1);
  h = layer_norm(h * 3.0, {128});
  h = log_softmax(h, 1);
  h = cumsum(h, 1);
  return softmax(h, 0);
}

TEST(Budget, OverBudgetIsRefusedBeforeAllocating) {
  Tensor a = input({64, 32}, 0), b = input({32, 128}, 5);
  Tensor y = chain(a, b);
  const int64_t count = Buffer::live_count(), bytes = Buffer::live_bytes();
  {
    MemoryBudget budget(1000);
    EXPECT_EQ(memory_budget(), 1000);
    std::string msg;
    try {
      y.realize();
    } catch (const Error& e) {
      msg = e.what();
      EXPECT_EQ(e.op(), "budget");
    }
    ASSERT_FALSE(msg.empty()) << "a 32 KB plan was accepted under a 1000-byte budget";
    EXPECT_NE(msg.find("budget"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1000"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[64, 128]"), std::string::npos) << msg;  // the largest tensors' shape
    // The peak it names is the planner's.
    EXPECT_NE(msg.find(std::to_string(last_memory_plan().planned_bytes)), std::string::npos) << msg;
    EXPECT_GT(last_memory_plan().planned_bytes, 1000);
    EXPECT_EQ(Buffer::live_count(), count);
    EXPECT_EQ(Buffer::live_bytes(), bytes);
    EXPECT_FALSE(y.is_realized());
  }
  EXPECT_EQ(memory_budget(), -1);
  // Without the budget the same tensor realizes, and correctly (softmax over dim 0: columns sum to 1).
  auto v = y.to_vector<double>();
  ASSERT_EQ(v.size(), 64u * 128u);
  for (size_t c = 0; c < 128; c += 17) {
    double s = 0;
    for (size_t r = 0; r < 64; ++r) s += v[r * 128 + c];
    EXPECT_NEAR(s, 1.0, 1e-4) << c;
  }
}

TEST(Budget, ExactPeakIsTheThreshold) {
  Tensor a = input({64, 32}, 1), b = input({32, 128}, 2);
  chain(a, b).realize();
  const int64_t peak = last_memory_plan().planned_bytes;
  ASSERT_GT(peak, 0);
  {
    MemoryBudget budget(peak - 1);
    Tensor y = chain(a, b);
    const int64_t count = Buffer::live_count();
    try {  // the error names the op that recorded the root (inside chain), with both numbers
      y.realize();
      ADD_FAILURE() << "a plan of " << peak << " bytes ran under a budget one byte smaller";
    } catch (const Error& e) {
      EXPECT_EQ(e.op(), "budget") << e.what();
      EXPECT_NE(std::string(e.what()).find("peak of " + std::to_string(peak) + " bytes"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("budget is " + std::to_string(peak - 1) + " bytes"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(Buffer::live_count(), count);
  }
  {
    MemoryBudget budget(peak);
    Tensor y = chain(a, b);
    EXPECT_NO_THROW(y.realize());
    EXPECT_TRUE(y.is_realized());
    EXPECT_EQ(last_memory_plan().planned_bytes, peak);
  }
}

TEST(Budget, RandomInputsAlsoWaitForThePlan) {
  const int64_t count = Buffer::live_count(), bytes = Buffer::live_bytes();
  manual_seed(3);
  const unsigned y_line = __LINE__; Tensor y = softmax(randn({256, 256}) * 2.0, 1);
  {
    MemoryBudget budget(4096);
    // A realize error names the line of the op that recorded the node, not the realize's.
    alk::testing::expect_alk_error([&] { y.realize(); }, __FILE__, y_line, "budget", {"524288", "4096"});
    EXPECT_ALK_ERROR(sum(y).item(), "budget", "4096");  // item() plans first too
  }
  EXPECT_EQ(Buffer::live_count(), count);
  EXPECT_EQ(Buffer::live_bytes(), bytes);
  EXPECT_FALSE(y.is_realized());
}

TEST(Budget, BudgetsNest) {
  EXPECT_EQ(memory_budget(), -1);
  Tensor a = input({64, 64}, 0);  // 16 KB
  {
    MemoryBudget outer(1 << 20);
    EXPECT_EQ(memory_budget(), 1 << 20);
    {
      MemoryBudget inner(100);
      EXPECT_EQ(memory_budget(), 100);
      EXPECT_ALK_ERROR(softmax(a, 1).realize(), "budget", "16384", "100");
    }
    EXPECT_EQ(memory_budget(), 1 << 20);
    Tensor y = softmax(a, 1);
    EXPECT_NO_THROW(y.realize());  // fits the outer budget again
  }
  EXPECT_EQ(memory_budget(), -1);
}

TEST(Budget, PlannerReusesMemoryAlongAChain) {
  Tensor x = input({64, 64}, 3);  // 16 KB per tensor
  Tensor h = x;
  for (int i = 0; i < 8; ++i) h = softmax(h, i % 2);
  h.realize();
  MemoryPlan p = last_memory_plan();
  const int64_t one = 64 * 64 * 4;
  EXPECT_GE(p.kernels, 8);
  EXPECT_LE(p.planned_bytes, p.naive_bytes);
  EXPECT_GE(p.naive_bytes, 8 * one);
  // Only the output is stored; intermediates ping-pong in the arena.
  EXPECT_LE(p.arena_bytes, 3 * one);
  EXPECT_LT(p.planned_bytes, p.naive_bytes);
  EXPECT_GE(p.planned_bytes, one);

  Tensor a = input({64, 32}, 0), b = input({32, 128}, 5);
  chain(a, b).realize();
  MemoryPlan q = last_memory_plan();
  EXPECT_LE(q.planned_bytes, q.naive_bytes);
  EXPECT_EQ(q.planned_bytes - q.arena_bytes, 64 * 128 * 4);  // stored: the target only
}

}  // namespace
}  // namespace alk
