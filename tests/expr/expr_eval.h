// Test helpers: a scalar interpreter over a finished Expr (the executable meaning of
// the IR, built on eval_scalar) and the op table as data.
#pragma once
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "alk/expr.h"

namespace alk::expr::testing {

// Every node's value (inputs rounded to their node's type first, as a load would).
inline std::vector<double> eval_nodes(const Expr& e, std::span<const double> in) {
  std::vector<double> v(e.nodes.size());
  for (size_t i = 0; i < e.nodes.size(); ++i) {
    const Node& x = e.nodes[i];
    if (x.fn == Fn::Input) v[i] = eval_scalar(Fn::Cast, x.type, in[x.slot]);
    else if (x.fn == Fn::Const) v[i] = x.value;
    else {
      double a[3] = {0, 0, 0};
      for (int k = 0; k < fn_arity(x.fn); ++k) a[k] = v[x.args[k]];
      v[i] = eval_scalar(x.fn, x.type, a[0], a[1], a[2]);
    }
  }
  return v;
}

// The root's value.
inline double eval(const Expr& e, std::span<const double> in) { return eval_nodes(e, in).back(); }

inline int count(const Expr& e, Fn f) {
  int n = 0;
  for (const Node& x : e.nodes) n += x.fn == f;
  return n;
}

struct TableOp {
  const char* name;
  int arity;
  const char* inputs;
  const char* rule;
  const char* fwd;
  const char* d[3];
};

inline const std::vector<TableOp>& table() {
  static const std::vector<TableOp> ops = {
#define ALK_EW(name, arity, inputs, rule, domain, fwd, d0, d1, d2) {#name, arity, inputs, #rule, fwd, {d0, d1, d2}},
#include "alk/elementwise.def"
#undef ALK_EW
  };
  return ops;
}

inline std::vector<std::string> split(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

}  // namespace alk::expr::testing
