// gather, index_select, scatter_add and one_hot against float64 references, and
// their index validation (which must throw before writing anything).
#include <gtest/gtest.h>

#include <string>

#include "backend/cpu/kernels.h"
#include "kernel_test_util.h"

namespace alk::cpu {
namespace {

using namespace alk::cpu::testing;

std::vector<int64_t> unravel(int64_t i, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}
int64_t ravel(const std::vector<int64_t>& idx, const std::vector<int64_t>& shape) {
  int64_t i = 0;
  for (size_t d = 0; d < shape.size(); ++d) i = i * shape[d] + idx[d];
  return i;
}

const DType kValueTypes[] = {DType::F32, DType::F64, DType::BF16, DType::I64};
const DType kIndexTypes[] = {DType::I64, DType::I32};

// Expects `call` to throw alk::Error naming `op` and `bad`, leaving `out` untouched.
template <class Fn>
void expect_index_error(Fn&& call, const std::string& op, int64_t bad, const Buf& out) {
  std::vector<double> before = out.values();
  try {
    call();
    ADD_FAILURE() << op << " accepted index " << bad;
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(e.op(), op);
    EXPECT_NE(what.find(op), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(bad)), std::string::npos) << what;
    EXPECT_NE(what.find("dim"), std::string::npos) << what;
    EXPECT_NE(what.find("[0, "), std::string::npos) << what;
  }
  EXPECT_EQ(out.values(), before);
  expect_guards(out);
}

TEST(Gather, MatchesReference) {
  std::mt19937 rng(31);
  const std::vector<int64_t> xshape = {4, 5, 3};
  for (DType dt : kValueTypes)
    for (DType it : kIndexTypes)
      for (Layout lx : kAllLayouts)
        for (int dim = 0; dim < 3; ++dim) {
          SCOPED_TRACE(::testing::Message() << dtype_str(dt) << " " << dtype_str(it) << " " << layout_name(lx)
                                            << " dim " << dim);
          std::vector<int64_t> ishape = {3, 4, 2};  // smaller than x off `dim`
          ishape[static_cast<size_t>(dim)] = 6;     // more picks than x has along dim
          Buf x = make_input(xshape, dt, lx, rng);
          Buf index = make_buf(ishape, it, Layout::Transposed);
          fill_ints(index, rng, 0, xshape[static_cast<size_t>(dim)] - 1);
          Buf out = make_output(ishape, dt);
          gather(x.view, dim, index.view, out.view, Loc::current());
          std::vector<double> xv = x.values(), iv = index.values(), ref;
          for (int64_t i = 0; i < out.view.numel(); ++i) {
            auto idx = unravel(i, ishape);
            idx[static_cast<size_t>(dim)] = static_cast<int64_t>(iv[static_cast<size_t>(i)]);
            ref.push_back(xv[static_cast<size_t>(ravel(idx, xshape))]);
          }
          expect_close(out, ref, {0, 0});
        }
}

TEST(Gather, LargeInputSplitAcrossThreads) {
  std::mt19937 rng(37);
  const std::vector<int64_t> xshape = {300, 7, 40}, ishape = {250, 7, 40};
  Buf x = make_input(xshape, DType::F32, Layout::Strided, rng);
  Buf index = make_buf(ishape, DType::I64, Layout::Contiguous);
  fill_ints(index, rng, 0, 299);
  Buf out = make_output(ishape, DType::F32);
  gather(x.view, 0, index.view, out.view, Loc::current());
  std::vector<double> xv = x.values(), iv = index.values(), ref;
  for (int64_t i = 0; i < out.view.numel(); ++i) {
    auto idx = unravel(i, ishape);
    idx[0] = static_cast<int64_t>(iv[static_cast<size_t>(i)]);
    ref.push_back(xv[static_cast<size_t>(ravel(idx, xshape))]);
  }
  expect_close(out, ref, {0, 0});
}

TEST(IndexSelect, MatchesReference) {
  std::mt19937 rng(32);
  const std::vector<int64_t> xshape = {4, 5, 3};
  for (DType dt : kValueTypes)
    for (DType it : kIndexTypes)
      for (Layout lx : kAllLayouts)
        for (int dim = 0; dim < 3; ++dim) {
          SCOPED_TRACE(::testing::Message() << dtype_str(dt) << " " << dtype_str(it) << " " << layout_name(lx)
                                            << " dim " << dim);
          Buf x = make_input(xshape, dt, lx, rng);
          Buf index = make_buf({7}, it, Layout::Strided);
          fill_ints(index, rng, 0, xshape[static_cast<size_t>(dim)] - 1);
          std::vector<int64_t> oshape = xshape;
          oshape[static_cast<size_t>(dim)] = 7;
          Buf out = make_output(oshape, dt);
          index_select(x.view, dim, index.view, out.view, Loc::current());
          std::vector<double> xv = x.values(), iv = index.values(), ref;
          for (int64_t i = 0; i < out.view.numel(); ++i) {
            auto idx = unravel(i, oshape);
            idx[static_cast<size_t>(dim)] = static_cast<int64_t>(iv[static_cast<size_t>(idx[static_cast<size_t>(dim)])]);
            ref.push_back(xv[static_cast<size_t>(ravel(idx, xshape))]);
          }
          expect_close(out, ref, {0, 0});
        }
}

TEST(ScatterAdd, MatchesReference) {
  std::mt19937 rng(33);
  const std::vector<int64_t> xshape = {4, 5, 3};
  for (DType dt : {DType::F32, DType::F64, DType::I64})
    for (DType it : kIndexTypes)
      for (Layout lx : kAllLayouts)
        for (int dim = 0; dim < 3; ++dim) {
          SCOPED_TRACE(::testing::Message() << dtype_str(dt) << " " << dtype_str(it) << " " << layout_name(lx)
                                            << " dim " << dim);
          std::vector<int64_t> ishape = {3, 4, 2};
          ishape[static_cast<size_t>(dim)] = 6;  // repeated targets must accumulate
          std::vector<int64_t> sshape = {4, 5, 3};
          sshape[static_cast<size_t>(dim)] = 7;
          Buf x = make_buf(xshape, dt, lx), src = make_buf(sshape, dt, Layout::Strided);
          fill_ints(x, rng, -9, 9);
          fill_ints(src, rng, -9, 9);
          Buf index = make_buf(ishape, it, Layout::Offset);
          fill_ints(index, rng, 0, xshape[static_cast<size_t>(dim)] - 1);
          Buf out = make_output(xshape, dt);
          scatter_add(x.view, dim, index.view, src.view, out.view, Loc::current());
          std::vector<double> ref = x.values(), sv = src.values(), iv = index.values();
          for (int64_t i = 0; i < index.view.numel(); ++i) {
            auto idx = unravel(i, ishape);
            double s = sv[static_cast<size_t>(ravel(idx, sshape))];
            idx[static_cast<size_t>(dim)] = static_cast<int64_t>(iv[static_cast<size_t>(i)]);
            ref[static_cast<size_t>(ravel(idx, xshape))] += s;
          }
          expect_close(out, ref, {1e-6, 1e-6});
        }
}

// The embedding-gradient case: one id per row (the index broadcast over the row), src
// rows contiguous, repeated ids; x contiguous, a broadcast scalar, or transposed. Rows wide
// enough to be split over threads by columns.
TEST(ScatterAdd, WholeRowsMatchReference) {
  std::mt19937 rng(34);
  const std::vector<int64_t> xshape = {9, 300};
  for (DType dt : {DType::F32, DType::F64})
    for (Layout lx : {Layout::Contiguous, Layout::Broadcast, Layout::Transposed}) {
      SCOPED_TRACE(::testing::Message() << dtype_str(dt) << " " << layout_name(lx));
      Buf x = make_input(xshape, dt, lx, rng), src = make_input({40, 300}, dt, Layout::Contiguous, rng);
      Buf ids = make_buf({40, 1}, DType::I64, Layout::Contiguous);
      fill_ints(ids, rng, 0, 8);
      View index = ids.view;  // [40, 1] broadcast to [40, 300]
      index.shape = {40, 300};
      index.strides = {1, 0};
      Buf out = make_output(xshape, dt);
      scatter_add(x.view, 0, index, src.view, out.view, Loc::current());
      std::vector<double> ref = x.values(), sv = src.values(), iv = ids.values();
      for (int64_t i = 0; i < 40; ++i)
        for (int64_t c = 0; c < 300; ++c)
          ref[static_cast<size_t>(static_cast<int64_t>(iv[static_cast<size_t>(i)]) * 300 + c)] += sv[static_cast<size_t>(i * 300 + c)];
      expect_close(out, ref, {1e-5, 1e-5});
    }
}

TEST(OneHot, MatchesReference) {
  std::mt19937 rng(34);
  for (DType it : kIndexTypes)
    for (DType dt : {DType::F32, DType::I64, DType::BF16, DType::Bool})
      for (Layout l : kAllLayouts) {
        Buf ids = make_buf({3, 4}, it, l);
        fill_ints(ids, rng, 0, 5);
        Buf out = make_output({3, 4, 6}, dt);
        one_hot(ids.view, 6, out.view, Loc::current());
        std::vector<double> iv = ids.values(), ref(72, 0.0);
        for (size_t i = 0; i < iv.size(); ++i) ref[i * 6 + static_cast<size_t>(iv[i])] = 1.0;
        expect_close(out, ref, {0, 0});
      }
}

TEST(IndexErrors, ThrowBeforeWriting) {
  std::mt19937 rng(35);
  for (DType it : kIndexTypes)
    for (int64_t bad : {5, -1, 123}) {
      SCOPED_TRACE(::testing::Message() << dtype_str(it) << " bad " << bad);
      Buf x = make_input({4, 5}, DType::F32, Layout::Contiguous, rng);
      {
        Buf index = make_buf({4, 5}, it, Layout::Contiguous);
        fill_ints(index, rng, 0, 4);
        store_double(index.view.data, it, 13, static_cast<double>(bad));  // late, after valid ones
        Buf out = make_output({4, 5}, DType::F32);
        expect_index_error([&] { gather(x.view, 1, index.view, out.view, Loc::current()); }, "gather", bad, out);
      }
      {
        Buf index = make_buf({3}, it, Layout::Contiguous);
        fill_ints(index, rng, 0, 3);
        store_double(index.view.data, it, 2, static_cast<double>(bad));
        Buf out = make_output({4, 3}, DType::F32);
        expect_index_error([&] { index_select(x.view, 1, index.view, out.view, Loc::current()); }, "index_select",
                           bad, out);
      }
      {
        Buf index = make_buf({2, 5}, it, Layout::Contiguous), src = make_input({2, 5}, DType::F32, Layout::Contiguous, rng);
        fill_ints(index, rng, 0, 3);
        store_double(index.view.data, it, 7, static_cast<double>(bad + 4 * (bad > 0)));  // >= 4 rows
        Buf out = make_output({4, 5}, DType::F32);
        expect_index_error([&] { scatter_add(x.view, 0, index.view, src.view, out.view, Loc::current()); },
                           "scatter_add", bad + 4 * (bad > 0), out);
      }
      {
        Buf ids = make_buf({6}, it, Layout::Contiguous);
        fill_ints(ids, rng, 0, 4);
        store_double(ids.view.data, it, 4, static_cast<double>(bad));
        Buf out = make_output({6, 5}, DType::F32);
        expect_index_error([&] { one_hot(ids.view, 5, out.view, Loc::current()); }, "one_hot", bad, out);
      }
    }
}

TEST(IndexErrors, MessageNamesRangeAndDim) {
  std::mt19937 rng(36);
  Buf x = make_input({4, 5}, DType::F32, Layout::Contiguous, rng);
  Buf index = make_buf({1}, DType::I64, Layout::Contiguous);
  store_double(index.view.data, DType::I64, 0, 9);
  Buf out = make_output({1, 5}, DType::F32);
  try {
    index_select(x.view, 0, index.view, out.view, Loc::current());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 9 is out of range for dim 0 of size 4 (valid range [0, 4))"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.file()).find("test_kernels_index.cpp"), std::string::npos);
  }
}

}  // namespace
}  // namespace alk::cpu
