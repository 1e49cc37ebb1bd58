// tri, cumsum, pad, concat and slice_scatter against float64 references.
#include <gtest/gtest.h>

#include "backend/cpu/kernels.h"
#include "kernel_test_util.h"

namespace alk::cpu {
namespace {

using namespace alk::cpu::testing;

const DType kTypes[] = {DType::F32, DType::F64, DType::BF16, DType::I64, DType::I32};

// Row-major multi-index of linear index i.
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
int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

TEST(Tri, KeepsTheRightTriangle) {
  std::mt19937 rng(21);
  for (DType dt : kTypes)
    for (Layout l : kAllLayouts)
      for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{4, 4}, {2, 3, 5}, {5, 2}, {1, 1}})
        for (int64_t k : {-2, -1, 0, 1, 3})
          for (bool upper : {false, true}) {
            SCOPED_TRACE(::testing::Message() << dtype_str(dt) << " " << layout_name(l) << " " << to_string(shape)
                                              << " k " << k << " upper " << upper);
            Buf x = make_buf(shape, dt, l);
            fill_ints(x, rng, 1, 9);
            Buf out = make_output(shape, dt);
            tri(x.view, k, upper, out.view);
            std::vector<double> xv = x.values(), ref(xv.size());
            for (int64_t i = 0; i < numel(shape); ++i) {
              auto idx = unravel(i, shape);
              int64_t diff = idx.back() - idx[idx.size() - 2];
              ref[static_cast<size_t>(i)] = (upper ? diff >= k : diff <= k) ? xv[static_cast<size_t>(i)] : 0.0;
            }
            expect_close(out, ref, {0, 0});
          }
}

TEST(Tri, LargeInputSplitAcrossThreads) {
  // Big enough that chunks start mid-matrix, exercising the walker's start position.
  std::mt19937 rng(26);
  std::vector<int64_t> shape = {3, 200, 150};
  Buf x = make_input(shape, DType::F32, Layout::Transposed, rng);
  Buf out = make_output(shape, DType::F32);
  tri(x.view, 4, false, out.view);
  std::vector<double> xv = x.values(), ref(xv.size());
  for (int64_t i = 0; i < numel(shape); ++i) {
    auto idx = unravel(i, shape);
    ref[static_cast<size_t>(i)] = idx[2] - idx[1] <= 4 ? xv[static_cast<size_t>(i)] : 0.0;
  }
  expect_close(out, ref, {0, 0});
}

TEST(Cumsum, ForwardAndReverse) {
  std::mt19937 rng(22);
  for (DType dt : kTypes)
    for (Layout l : kAllLayouts)
      for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{6}, {3, 4}, {2, 1, 5}, {3, 5, 2}})
        for (int axis = 0; axis < static_cast<int>(shape.size()); ++axis)
          for (bool reverse : {false, true}) {
            SCOPED_TRACE(::testing::Message() << dtype_str(dt) << " " << layout_name(l) << " " << to_string(shape)
                                              << " axis " << axis << " reverse " << reverse);
            Buf x = make_buf(shape, dt, l);
            if (is_floating(dt))
              fill_random(x, rng);
            else
              fill_ints(x, rng, -50, 50);
            Buf out = make_output(shape, dt);
            cumsum(x.view, axis, reverse, out.view);
            std::vector<double> xv = x.values(), ref(xv.size());
            for (int64_t i = 0; i < numel(shape); ++i) {
              auto idx = unravel(i, shape);
              double s = 0;
              int64_t len = shape[static_cast<size_t>(axis)], pos = idx[static_cast<size_t>(axis)];
              for (int64_t j = reverse ? pos : 0; j < (reverse ? len : pos + 1); ++j) {
                idx[static_cast<size_t>(axis)] = j;
                s += xv[static_cast<size_t>(ravel(idx, shape))];
              }
              ref[static_cast<size_t>(i)] = s;
            }
            Tol tol = tol_for(dt);
            if (dt == DType::BF16) tol = {2e-2, 5e-2};
            expect_close(out, ref, tol);
          }
}

TEST(Pad, GrowsAndCrops) {
  struct Case {
    std::vector<int64_t> shape, pads;
  };
  const Case cases[] = {{{3}, {1, 2}},
                        {{3, 4}, {0, 0, 2, 1}},
                        {{3, 4}, {1, -1, -1, 2}},
                        {{2, 3, 4}, {1, 0, 0, 2, -2, -1}},
                        {{2, 2}, {-1, -1, 0, 0}}};
  std::mt19937 rng(23);
  for (DType dt : kTypes)
    for (Layout l : kAllLayouts)
      for (const Case& c : cases) {
        SCOPED_TRACE(::testing::Message() << dtype_str(dt) << " " << layout_name(l) << " " << to_string(c.shape)
                                          << " pads " << to_string(c.pads));
        Buf x = make_buf(c.shape, dt, l);
        fill_ints(x, rng, -9, 9);
        std::vector<int64_t> oshape = c.shape;
        for (size_t d = 0; d < oshape.size(); ++d) oshape[d] += c.pads[2 * d] + c.pads[2 * d + 1];
        Buf out = make_output(oshape, dt);
        pad(x.view, c.pads, 5.0, out.view);
        std::vector<double> xv = x.values(), ref(static_cast<size_t>(numel(oshape)));
        for (int64_t i = 0; i < numel(oshape); ++i) {
          auto idx = unravel(i, oshape);
          bool inside = true;
          for (size_t d = 0; d < idx.size(); ++d) {
            idx[d] -= c.pads[2 * d];
            inside = inside && idx[d] >= 0 && idx[d] < c.shape[d];
          }
          ref[static_cast<size_t>(i)] = inside ? xv[static_cast<size_t>(ravel(idx, c.shape))] : 5.0;
        }
        expect_close(out, ref, {0, 0});
      }
}

TEST(Concat, JoinsAlongEachDim) {
  std::mt19937 rng(24);
  for (DType dt : kTypes)
    for (int dim = 0; dim < 3; ++dim) {
      SCOPED_TRACE(::testing::Message() << dtype_str(dt) << " dim " << dim);
      std::vector<int64_t> base = {2, 3, 4};
      const int64_t sizes[] = {1, 3, 2};
      const Layout layouts[] = {Layout::Transposed, Layout::Strided, Layout::Broadcast};
      std::vector<Buf> bufs;
      std::vector<View> views;
      std::vector<std::vector<double>> vals;
      std::vector<int64_t> oshape = base;
      oshape[static_cast<size_t>(dim)] = 0;
      for (int j = 0; j < 3; ++j) {
        std::vector<int64_t> s = base;
        s[static_cast<size_t>(dim)] = sizes[j];
        bufs.push_back(make_buf(s, dt, layouts[j]));
        fill_ints(bufs.back(), rng, -9, 9);
        views.push_back(bufs.back().view);
        vals.push_back(bufs.back().values());
        oshape[static_cast<size_t>(dim)] += sizes[j];
      }
      Buf out = make_output(oshape, dt);
      concat(views, dim, out.view);
      std::vector<double> ref(static_cast<size_t>(numel(oshape)));
      for (int64_t i = 0; i < numel(oshape); ++i) {
        auto idx = unravel(i, oshape);
        int j = 0;
        while (idx[static_cast<size_t>(dim)] >= sizes[j]) idx[static_cast<size_t>(dim)] -= sizes[j++];
        ref[static_cast<size_t>(i)] = vals[static_cast<size_t>(j)][static_cast<size_t>(ravel(idx, views[static_cast<size_t>(j)].shape))];
      }
      expect_close(out, ref, {0, 0});
    }
}

TEST(SliceScatter, PlacesGradientAtSlice) {
  struct Case {
    std::vector<int64_t> out_shape;
    int dim;
    int64_t start, step, count;
  };
  const Case cases[] = {{{10}, 0, 1, 3, 3}, {{4, 6}, 1, 0, 2, 3}, {{4, 6}, 0, 2, 1, 2}, {{3, 5, 2}, 1, 4, 1, 1}};
  std::mt19937 rng(25);
  for (DType dt : kTypes)
    for (Layout l : kAllLayouts)
      for (const Case& c : cases) {
        SCOPED_TRACE(::testing::Message() << dtype_str(dt) << " " << layout_name(l) << " " << to_string(c.out_shape)
                                          << " dim " << c.dim << " start " << c.start << " step " << c.step);
        std::vector<int64_t> gshape = c.out_shape;
        gshape[static_cast<size_t>(c.dim)] = c.count;
        Buf g = make_buf(gshape, dt, l);
        fill_ints(g, rng, 1, 9);
        Buf out = make_output(c.out_shape, dt);
        slice_scatter(g.view, c.dim, c.start, c.step, out.view);
        std::vector<double> gv = g.values(), ref(static_cast<size_t>(numel(c.out_shape)), 0.0);
        for (int64_t i = 0; i < numel(gshape); ++i) {
          auto idx = unravel(i, gshape);
          idx[static_cast<size_t>(c.dim)] = c.start + c.step * idx[static_cast<size_t>(c.dim)];
          ref[static_cast<size_t>(ravel(idx, c.out_shape))] = gv[static_cast<size_t>(i)];
        }
        expect_close(out, ref, {0, 0});
      }
}

}  // namespace
}  // namespace alk::cpu
