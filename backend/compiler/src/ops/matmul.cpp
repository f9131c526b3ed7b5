// The matmul family: mm, bmm, addmm, baddbmm, mv and dot, as one IR matmul each (PT-array tiles
// with alpha, beta and the bias in the epilogue). Vectors become one-row or one-column matrices; an
// operand with no unit-stride dim (which the PT array cannot read a tile of) is packed first, and
// a result whose rows are not contiguous is written through a temporary.
#include <fmt/format.h>

#include "family.h"

namespace spyre::compiler::ops {
namespace {

struct Names {
  const char* a;
  const char* b;
  const char* bias;  // nullptr: no bias argument
};

Names names_of(const std::string& op) {
  if (op == "addmm") return {"mat1", "mat2", "self"};
  if (op == "baddbmm") return {"batch1", "batch2", "self"};
  if (op == "mv") return {"self", "vec", nullptr};
  if (op == "dot") return {"self", "tensor", nullptr};
  return {"self", "mat2", nullptr};  // mm, bmm
}

// The PT array reads a tile along a contiguous dim of each operand.
uint32_t readable(Builder& b, uint32_t v) {
  const ir::View t = b.view(v);
  const size_t n = t.sizes.size();
  const bool no_unit_dim =
      n >= 2 && t.sizes[n - 1] > 1 && t.sizes[n - 2] > 1 && t.strides[n - 1] != 1 && t.strides[n - 2] != 1;
  return no_unit_dim ? packed(b, v) : v;
}

void matmul(Builder& b, const Call& c) {
  const Names n = names_of(c.op);
  uint32_t a = readable(b, c.tensor(n.a)), w = readable(b, c.tensor(n.b));
  const hw::DType type = b.view(a).dtype;
  if (!hw::dtype_is_float(type) || b.view(w).dtype != type)
    reject(c, "the PT array multiplies float operands of one type");
  const double alpha = c.number("alpha", 1), beta = c.number("beta", 1);
  const Arg* bias = n.bias ? c.get(n.bias) : nullptr;
  const bool use_bias = bias && beta != 0;
  if (use_bias && bias->kind != Arg::Kind::kTensor) reject(c, "the bias is not a tensor");
  const uint32_t result = c.out();
  if (b.view(result).numel() == 0) return;
  const ir::View av = b.view(a);
  const int64_t k = av.sizes.empty() ? 0 : av.sizes.back();
  if (k == 0) {  // no products: beta * bias, or zeros
    if (!use_bias) return fill(b, result, 0);
    return scale(b, bias->view, result, beta);
  }
  // The compiler writes the output's rows contiguously and must not read what it writes.
  const ir::View rv = b.view(result);
  const size_t rn = rv.sizes.size();
  const bool rows_ok = rn == 0 || rv.sizes[rn - 1] == 1 || rv.strides[rn - 1] == 1;
  const bool shared = overlap(rv, b.view(a)) || overlap(rv, b.view(w));
  const uint32_t out = rows_ok && !shared ? result : b.temp(rv.sizes, rv.dtype);
  ir::Matmul m;
  m.compute = type;
  m.alpha = alpha;
  m.beta = beta;
  if (c.op == "mv") {
    const ir::View vec = b.view(w), o = b.view(out);
    m.a = a;
    m.b = b.derive(w, {vec.sizes[0], 1}, {vec.strides[0], 1});
    m.out = b.derive(out, {o.sizes[0], 1}, {o.sizes[0] > 1 ? o.strides[0] : 1, 1});
  } else if (c.op == "dot") {
    const int64_t sa = b.view(a).strides[0], sb = b.view(w).strides[0];
    m.a = b.derive(a, {1, k}, {k * sa, sa});
    m.b = b.derive(w, {k, 1}, {sb, 1});
    m.out = b.derive(out, {1, 1}, {1, 1});
  } else {
    m.a = a;
    m.b = w;
    m.out = out;
  }
  if (use_bias) m.bias = bias->view;  // broadcast by the compiler
  b.add(m);
  if (out != result) copy(b, out, result);
}

}  // namespace

const Table& matmul_ops() {
  static const Table t = {{"mm", matmul},      {"bmm", matmul}, {"addmm", matmul},
                          {"baddbmm", matmul}, {"mv", matmul},  {"dot", matmul}};
  return t;
}

}  // namespace spyre::compiler::ops
