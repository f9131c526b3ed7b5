// The matmul family: mm, bmm, addmm, baddbmm, addbmm, mv, addmv and dot, as one IR matmul each (PT-array tiles
// with alpha, beta and the bias in the epilogue). Vectors become one-row or one-column matrices; an
// operand with no unit-stride dim (which the PT array cannot read a tile of) is packed first, and
// a result whose rows are not contiguous is written through a temporary.
#include <map>
#include <string>

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
  if (op == "addmm" || op == "_addmm_activation") return {"mat1", "mat2", "self"};
  if (op == "baddbmm" || op == "addbmm") return {"batch1", "batch2", "self"};
  if (op == "addmv") return {"mat", "vec", "self"};
  if (op == "mv") return {"self", "vec", nullptr};
  if (op == "dot") return {"self", "tensor", nullptr};
  return {"self", "mat2", nullptr};  // mm, bmm
}

// A pointwise op the planner fused into a matmul's epilogue, by its name ("gelu_tanh": gelu's
// tanh form).
hw::UnaryFn activation_of(const Call& c, const Arg& a) {
  static const std::map<std::string, hw::UnaryFn, std::less<>> names = {
      {"gelu", hw::UnaryFn::kGeluErf}, {"gelu_tanh", hw::UnaryFn::kGeluTanh}, {"relu", hw::UnaryFn::kRelu},
      {"silu", hw::UnaryFn::kSilu},    {"sigmoid", hw::UnaryFn::kSigmoid},    {"tanh", hw::UnaryFn::kTanh}};
  const auto it = a.kind == Arg::Kind::kString ? names.find(a.text) : names.end();
  if (it == names.end()) reject(c, "the fused activation is not gelu, relu, silu, sigmoid or tanh");
  return it->second;
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
  const bool mv = c.op == "mv" || c.op == "addmv";
  if (mv) {
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
  if (use_bias && mv) {  // addmv's bias, broadcast to the [M] result, as the [M, 1] column it is here
    const ir::View bv = b.view(bias->view);
    const int64_t rows = b.view(m.out).sizes[0];
    m.bias = b.derive(bias->view, {rows, 1}, {bv.sizes.empty() || bv.sizes[0] == 1 ? 0 : bv.strides[0], 0});
  } else if (use_bias) {  // broadcast by the compiler, which reads its columns contiguously
    const ir::View bv = b.view(bias->view);
    const size_t bn = bv.sizes.size();
    const bool cols_ok = bn == 0 || bv.sizes[bn - 1] == 1 || bv.strides[bn - 1] == 0 || bv.strides[bn - 1] == 1;
    m.bias = cols_ok ? bias->view : packed(b, bias->view);
  }
  if (c.op == "_addmm_activation") {  // relu, or gelu (torch's CPU kernel: the erf form)
    m.activation = c.flag("use_gelu", false) ? hw::UnaryFn::kGeluErf : hw::UnaryFn::kRelu;
  } else if (const Arg* act = c.get("activation")) {  // the planner's fused activation (fusion.py)
    m.activation = activation_of(c, *act);
  }
  if (const Arg* residual = c.get("residual")) {  // the planner's fused residual add (fusion.py)
    if (residual->kind != Arg::Kind::kTensor || out != result || mv || c.op == "dot") {
      reject(c, "a fused residual is a tensor added to a matrix result written in place");
    }
    m.residual = residual->view;
    const std::string fn = c.text("residual_fn", "add");
    if (fn != "add" && fn != "mul") reject(c, "a fused residual is added or multiplied");
    m.residual_fn = fn == "mul" ? hw::BinaryFn::kMul : hw::BinaryFn::kAdd;
  }
  b.add(m);
  if (out != result) copy(b, out, result);
}

// addbmm(self, batch1, batch2, beta, alpha) = beta self + alpha sum_i batch1[i] @ batch2[i], as
// torch's CPU kernel: one addmm per batch into the result, each rounded to its type (fp16's sum
// rounds after every batch there too).
void addbmm(Builder& b, const Call& c) {
  const uint32_t x = c.tensor("batch1"), y = c.tensor("batch2"), result = c.out();
  const ir::View xv = b.view(x), yv = b.view(y);
  if (xv.sizes.size() != 3 || yv.sizes.size() != 3) reject(c, "addbmm takes 3-d batches");
  if (b.view(result).numel() == 0) return;
  const auto pick = [&](uint32_t v, const ir::View& t, int64_t i) {
    return Arg::tensor(b.derive(v, i * t.strides[0], {t.sizes[1], t.sizes[2]}, {t.strides[1], t.strides[2]}));
  };
  Call step = c;
  step.op = "addmm";
  step.args.erase("batch1");
  step.args.erase("batch2");
  if (xv.sizes[0] == 0) {  // no batches: beta self
    step.args["mat1"] = Arg::tensor(b.derive(x, {xv.sizes[1], 0}, {1, 1}));
    step.args["mat2"] = Arg::tensor(b.derive(y, {0, yv.sizes[2]}, {1, 1}));
    return matmul(b, step);
  }
  for (int64_t i = 0; i < xv.sizes[0]; ++i) {
    step.args["mat1"] = pick(x, xv, i);
    step.args["mat2"] = pick(y, yv, i);
    matmul(b, step);
    step.args["self"] = Arg::tensor(result);  // the next batch adds to the sum so far
    step.args["beta"] = Arg::num(1);
  }
}

// _grouped_mm(self, mat2, offs, bias, out_dtype) with the group offsets known (a list of ints:
// the eager front door reads them; a compiled graph's tensor of offsets is not taken):
//   2d x 3d: rows [offs[g-1], offs[g]) of self times mat2[g]   -> [M_total, N]
//   3d x 2d: self[g] times columns [offs[g-1], offs[g]) of mat2 -> [M, N_total]
//   2d x 2d: the K dim of both split by offs, one product each  -> [G, M, N]
//   3d x 3d: a batched matmul (no offsets)                     -> [G, M, N]
// Rows or columns past the last offset are zeros.
void grouped_mm(Builder& b, const Call& c) {
  const uint32_t a = readable(b, c.tensor("self")), w = readable(b, c.tensor("mat2")), out = c.out();
  const ir::View av = b.view(a), wv = b.view(w), ov = b.view(out);
  const hw::DType type = av.dtype;
  if (!hw::dtype_is_float(type) || wv.dtype != type || ov.dtype != type)
    reject(c, "float operands and result of one type");
  if (c.get("bias")) reject(c, "a bias is not modelled");
  const size_t ra = av.sizes.size(), rw = wv.sizes.size();
  const auto mm = [&](uint32_t x, uint32_t y, uint32_t z) {
    ir::Matmul m;
    m.a = x;
    m.b = y;
    m.out = z;
    m.compute = type;
    b.add(m);
  };
  if (ra == 3 && rw == 3) return mm(a, w, out);
  const Arg* offs = c.get("offs");
  if (!offs || offs->kind != Arg::Kind::kInts) reject(c, "the group offsets must be known (read from the device)");
  const std::vector<int64_t> ends = offs->ints;
  const auto slice = [&](uint32_t v, size_t dim, int64_t from, int64_t to) {
    const ir::View t = b.view(v);
    std::vector<int64_t> sizes = t.sizes;
    sizes[dim] = to - from;
    return b.derive(v, from * t.strides[dim], sizes, t.strides);
  };
  const auto pick = [&](uint32_t v, int64_t g) {  // v[g] of a 3-d view
    const ir::View t = b.view(v);
    return b.derive(v, g * t.strides[0], {t.sizes[1], t.sizes[2]}, {t.strides[1], t.strides[2]});
  };
  if (ra == 2 && rw == 2) fill(b, out, 0);  // empty K groups are zeros
  int64_t from = 0;
  for (size_t g = 0; g < ends.size(); ++g) {
    const int64_t to = ends[g];
    if (to < from) reject(c, "the offsets must not decrease");
    if (to == from) continue;
    if (ra == 2 && rw == 3) {
      mm(slice(a, 0, from, to), pick(w, static_cast<int64_t>(g)), slice(out, 0, from, to));
    } else if (ra == 3 && rw == 2) {
      mm(pick(a, static_cast<int64_t>(g)), slice(w, 1, from, to), slice(out, 1, from, to));
    } else if (ra == 2 && rw == 2) {
      mm(slice(a, 1, from, to), slice(w, 0, from, to), pick(out, static_cast<int64_t>(g)));
    } else {
      reject(c, "operands must be 2-d or 3-d");
    }
    from = to;
  }
  if (ra == 2 && rw == 3 && from < ov.sizes[0]) fill(b, slice(out, 0, from, ov.sizes[0]), 0);
  if (ra == 3 && rw == 2 && from < ov.sizes[1]) fill(b, slice(out, 1, from, ov.sizes[1]), 0);
}

}  // namespace

const Table& matmul_ops() {
  static const Table t = {{"mm", matmul},
                          {"bmm", matmul},
                          {"addmm", matmul},
                          {"baddbmm", matmul},
                          {"addmv", matmul},
                          {"addbmm", addbmm},
                          {"mv", matmul},
                          {"dot", matmul},
                          {"_grouped_mm", grouped_mm},
                          {"_addmm_activation", matmul}};
  return t;
}

}  // namespace spyre::compiler::ops
