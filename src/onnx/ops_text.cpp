// Text features over integer token ids: TfIdfVectorizer, counted on the host (the tokens are
// read back, so a model using it runs uncached: each call's counts depend on its data). String
// tokens are refused when the model is read (alk has no string tensors).
#include <map>

#include "onnx/ops.h"

namespace alk::onnx {

namespace {

// TfIdfVectorizer(X [C] or [N, C]): per row, how often each n-gram of the pool occurs, n-grams
// of n >= 2 taken with every skip 0..max_skip_count between their tokens (unigrams once), each
// pool entry counted in its output column (ngram_indexes). TF: the counts; IDF: the weight
// where the count is nonzero; TFIDF: count times weight. The weights are read per output
// column, as onnxruntime and the ONNX reference read them (default 1).
Outs tfidf_vectorizer(Ctx& c) {
  const Tensor& x = c.x(0);
  c.require(x.dtype() == DType::I32 || x.dtype() == DType::I64, "X must be int32 or int64 token ids, got ",
            dtype_name(x.dtype()));
  c.require(x.dim() == 1 || x.dim() == 2, "X must be [C] or [N, C], got ", to_string(x.shape()));
  const int64_t min_n = c.i("min_gram_length", 1), max_n = c.i("max_gram_length", 1), skips = c.i("max_skip_count", 0);
  const std::string mode = c.s("mode", "TF");
  c.require(mode == "TF" || mode == "IDF" || mode == "TFIDF", "mode '", mode, "' is not TF, IDF or TFIDF");
  const std::vector<int64_t> counts = c.ints("ngram_counts"), indexes = c.ints("ngram_indexes"),
                             pool = c.ints("pool_int64s");
  if (c.attr("pool_strings")) c.unsupported("string n-grams (pool_strings)");
  c.require(min_n >= 1 && min_n <= max_n && max_n <= static_cast<int64_t>(counts.size()) && skips >= 0 && skips <= 4096,
            "gram lengths ", min_n, "..", max_n, " or max_skip_count ", skips, " out of range for ", counts.size(),
            " ngram_counts");
  // The pool's n-grams of each length -> their position in pool order (the index into ngram_indexes).
  std::vector<std::map<std::vector<int64_t>, size_t>> grams(counts.size() + 1);
  size_t entry = 0;
  int64_t columns = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const int64_t n = static_cast<int64_t>(i) + 1, begin = counts[i];
    const int64_t end = i + 1 < counts.size() ? counts[i + 1] : static_cast<int64_t>(pool.size());
    if (!(begin >= 0 && begin <= end && end <= static_cast<int64_t>(pool.size()) && (end - begin) % n == 0))
      c.fail_with("ngram_counts ", to_string(counts), " do not split a pool of ", pool.size(), " ids into n-grams");
    for (int64_t at = begin; at < end; at += n, ++entry) {
      c.require(entry < indexes.size() && indexes[entry] >= 0 && indexes[entry] < kMaxShapeValues,
                "ngram_indexes must hold one column in [0, ", kMaxShapeValues, ") per n-gram");
      grams[static_cast<size_t>(n)].emplace(std::vector<int64_t>(pool.begin() + at, pool.begin() + at + n), entry);
      columns = std::max(columns, indexes[entry] + 1);
    }
  }
  c.require(entry == indexes.size(), "ngram_indexes holds ", indexes.size(), " columns for ", entry, " n-grams");
  const std::vector<int64_t> tokens = c.values(0);
  const int64_t rows = x.dim() == 1 ? 1 : x.shape()[0], C = x.shape().back();
  // n-grams looked up: at most every start, per skip, per length (the host's work, bounded).
  if (static_cast<double>(x.numel()) * static_cast<double>(skips + 1) * static_cast<double>(max_n - min_n + 1) > 1e8)
    c.fail_with(x.numel(), " tokens with ", skips + 1, " skips and ", max_n - min_n + 1, " gram lengths are too many lookups");
  std::vector<double> hits(static_cast<size_t>(rows * columns), 0.0);
  std::vector<int64_t> gram;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t* row = tokens.data() + r * C;
    for (int64_t n = min_n; n <= max_n; ++n)
      for (int64_t skip = 0; skip <= (n == 1 ? 0 : skips); ++skip)
        for (int64_t start = 0; start + (n - 1) * (skip + 1) < C; ++start) {
          gram.clear();
          for (int64_t j = 0; j < n; ++j) gram.push_back(row[start + j * (skip + 1)]);
          const auto found = grams[static_cast<size_t>(n)].find(gram);
          if (found != grams[static_cast<size_t>(n)].end())
            hits[static_cast<size_t>(r * columns + indexes[found->second])] += 1.0;
        }
  }
  if (mode != "TF") {
    std::vector<double> weights(static_cast<size_t>(columns), 1.0);
    if (const Attr* w = c.attr("weights")) {
      c.require(w->kind == Attr::Floats && static_cast<int64_t>(w->floats.size()) >= columns,
                "weights must hold a float per output column (", columns, ")");
      weights.assign(w->floats.begin(), w->floats.begin() + columns);
    }
    for (size_t k = 0; k < hits.size(); ++k) {
      const double w = weights[k % static_cast<size_t>(columns)];
      hits[k] = mode == "IDF" ? (hits[k] > 0 ? w : 0.0) : hits[k] * w;
    }
  }
  const Shape out = x.dim() == 1 ? Shape{columns} : Shape{rows, columns};
  return {tensor(hits, out).to(DType::F32)};
}

}  // namespace

void add_text_ops(HandlerTable& h) { h["TfIdfVectorizer"] = tfidf_vectorizer; }

}  // namespace alk::onnx
