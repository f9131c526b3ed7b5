// Reductions: sum (and nansum), prod, mean, amax, amin, all and any; max and min (values and indices), argmax
// and argmin; var and std; softmax and log_softmax and their backwards. fp16 and bf16 accumulate in
// fp32 and round once into the result, as torch's CPU kernels do. An empty reduction is a fill with
// the identity; dims that do not merge into one run are reduced from a copy (ops::reduce).
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "family.h"

namespace spyre::compiler::ops {
namespace {

using hw::BinaryFn;
using hw::DType;
using hw::ReduceFn;
using hw::UnaryFn;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The dims argument: an int, a list (empty: every dim) or none (every dim).
std::vector<int64_t> dims_of(const Call& c, const char* name, size_t nd) {
  const Arg* a = c.get(name);
  if (!a) return wrap_dims({}, nd);
  if (a->kind == Arg::Kind::kNumber) return wrap_dims({static_cast<int64_t>(a->number)}, nd);
  if (a->kind != Arg::Kind::kInts) reject(c, fmt::format("argument '{}' is not a dim or a list of dims", name));
  return wrap_dims(a->ints, nd);
}

bool narrow(DType t) {
  return t == DType::kF16 || t == DType::kBF16;
}

int64_t count_of(const ir::View& x, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= x.sizes[static_cast<size_t>(d)];
  return n;
}

// Result view `out` (with or without the reduced dims) in the keepdim form of `x` over `dims`.
uint32_t keep_view(Builder& b, const Call& c, uint32_t out, const ir::View& x, const std::vector<int64_t>& dims) {
  const ir::View o = b.view(out);
  if (o.sizes.size() == x.sizes.size()) return out;
  if (o.sizes.size() + dims.size() != x.sizes.size()) reject(c, "the result's rank does not match the reduced dims");
  std::vector<int64_t> sizes, strides;
  size_t k = 0;
  for (size_t d = 0; d < x.sizes.size(); ++d) {
    if (std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) != dims.end()) {
      sizes.push_back(1);
      strides.push_back(0);
    } else {
      sizes.push_back(o.sizes[k]);
      strides.push_back(o.strides[k]);
      ++k;
    }
  }
  return b.derive(out, sizes, strides);
}

// x's sizes with the reduced dims of size 1.
std::vector<int64_t> kept_sizes(const ir::View& x, const std::vector<int64_t>& dims) {
  std::vector<int64_t> s = x.sizes;
  for (int64_t d : dims) s[static_cast<size_t>(d)] = 1;
  return s;
}

bool empty(const ir::View& v) {
  return v.numel() == 0;
}

// sum, prod, mean, amax, amin, all, any (self, dim, keepdim, dtype) and prims::sum (inp, dims).
void reduction(Builder& b, const Call& c) {
  const bool prims = c.op == "prims::sum";
  const std::string op = prims || c.op == "nansum" ? "sum" : c.op;
  uint32_t in = c.tensor(prims ? "inp" : "self");
  const ir::View x = b.view(in);
  const std::vector<int64_t> dims = dims_of(c, prims ? "dims" : "dim", x.sizes.size());
  const uint32_t out = c.out();
  if (empty(b.view(out))) return;
  const bool mean = op == "mean", logical = op == "all" || op == "any";
  ReduceFn fn = ReduceFn::kSum;
  if (op == "prod") fn = ReduceFn::kProd;
  if (op == "amax" || op == "any") fn = ReduceFn::kMax;
  if (op == "amin" || op == "all") fn = ReduceFn::kMin;
  const DType t = c.result;
  if (mean && !hw::dtype_is_float(t)) reject(c, "mean of an integer type");
  if (empty(x)) {  // the identity, or NaN for a mean
    if (fn == ReduceFn::kMax && !logical) reject(c, "amax of an empty dim has no identity");
    if (fn == ReduceFn::kMin && !logical) reject(c, "amin of an empty dim has no identity");
    const bool one = fn == ReduceFn::kProd || op == "all";
    return fill(b, out, mean ? kNaN : (one ? 1.0 : 0.0));
  }
  if (c.op == "nansum" && hw::dtype_is_float(x.dtype)) {  // the sum of x with its NaNs as 0
    const uint32_t masked = b.temp(x.sizes, x.dtype);
    ir::Expr e(narrow(x.dtype) ? DType::kF32 : x.dtype);
    const int32_t v = e.input(ir::Operand::of(in));
    e.select(e.unary(UnaryFn::kIsNan, v), e.constant(0.0), v);
    b.add(e.done(masked));
    in = masked;
  }
  const uint32_t o = keep_view(b, c, out, x, dims);
  if (!narrow(t) && !mean) return reduce(b, fn, logical ? DType::kBool : t, in, o, dims);
  uint32_t from = in;
  if (narrow(t) && x.dtype != t && !logical) {  // torch casts the input to a narrower dtype first
    from = b.temp(x.sizes, t);
    copy(b, in, from);
  }
  const uint32_t acc = b.temp(kept_sizes(x, dims), DType::kF32);
  reduce(b, fn, DType::kF32, from, acc, dims);
  scale(b, acc, o, mean ? 1.0 / static_cast<double>(count_of(x, dims)) : 1.0);
}

// max and min: with a dim, (values, indices); without, the value. argmax and argmin: indices (of
// the flattened tensor without a dim).
void extremum(Builder& b, const Call& c) {
  const bool is_max = c.op == "max" || c.op == "argmax";
  const bool arg_only = c.op == "argmax" || c.op == "argmin";
  uint32_t in = c.tensor("self");
  if (empty(b.view(in))) reject(c, "an empty tensor has no extremum");
  const Arg* dim = c.get("dim");
  const bool values = !arg_only, indices = arg_only || dim;
  std::vector<int64_t> dims;
  if (!dim && indices) {  // the index into the flattened tensor
    in = packed(b, in);
    in = b.derive(in, {b.view(in).numel()}, {1});
    dims = {0};
  } else {
    dims = dims_of(c, "dim", b.view(in).sizes.size());
  }
  const ir::View x = b.view(in);
  const auto flat = [&](uint32_t out) {  // a result of the flattened tensor: [1] (of any rank)
    return b.view(out).sizes.size() == x.sizes.size() ? out : b.derive(out, {1}, {1});
  };
  const auto view_of = [&](size_t i) {
    const uint32_t out = c.out(i);
    return !dim && indices ? flat(out) : keep_view(b, c, out, x, dims);
  };
  if (values && c.wants(0) && !empty(b.view(c.out(0)))) {
    reduce(b, is_max ? ReduceFn::kMax : ReduceFn::kMin, x.dtype, in, view_of(0), dims);
  }
  const size_t at = arg_only ? 0 : 1;
  if (indices && c.wants(at) && !empty(b.view(c.out(at)))) {
    reduce(b, is_max ? ReduceFn::kArgMax : ReduceFn::kArgMin, x.dtype, in, view_of(at), dims);
  }
}

// var and std (self, dim, correction, keepdim) and prims::var (inp, dims, correction), in two
// passes as torch's: the mean, then the mean square deviation from it, / (count - correction),
// over the values shifted by each row's first and scaled by its largest magnitude.
void moment(Builder& b, const Call& c) {
  const bool prims = c.op == "prims::var";
  const uint32_t in = c.tensor(prims ? "inp" : "self");
  const ir::View x = b.view(in);
  if (!hw::dtype_is_float(x.dtype)) reject(c, "the variance of an integer type");
  const std::vector<int64_t> dims = dims_of(c, prims ? "dims" : "dim", x.sizes.size());
  const uint32_t out = c.out();
  if (empty(b.view(out))) return;
  const int64_t count = count_of(x, dims);
  if (count == 0) return fill(b, out, kNaN);
  const double correction = c.number("correction", 1);
  const uint32_t o = keep_view(b, c, out, x, dims);
  const std::vector<int64_t> kept = kept_sizes(x, dims);
  const uint32_t m = b.temp(kept, DType::kF32), d = b.temp(x.sizes, DType::kF32);
  // The values less each row's first one: a constant row is exactly 0 (torch accumulates in
  // float64 and gets 0 there too), and the mean cancels less.
  const uint32_t shifted = b.temp(x.sizes, DType::kF32);
  ir::Expr sh(DType::kF32);
  sh.binary(BinaryFn::kSub, sh.input(ir::Operand::of(in)), sh.input(ir::Operand::of(b.derive(in, kept, x.strides))));
  b.add(sh.done(shifted));
  // Divided by the row's largest magnitude, so that squares of values past 1.8e19 do not overflow
  // fp32 where torch's float64 does not (a row of zeros divides by 1).
  const uint32_t hi = b.temp(kept, DType::kF32), lo = b.temp(kept, DType::kF32), sc = b.temp(kept, DType::kF32);
  reduce(b, ReduceFn::kMax, DType::kF32, shifted, hi, dims);
  reduce(b, ReduceFn::kMin, DType::kF32, shifted, lo, dims);
  ir::Expr se(DType::kF32);
  const int32_t mag =
      se.binary(BinaryFn::kMax, se.input(ir::Operand::of(hi)), se.unary(UnaryFn::kNeg, se.input(ir::Operand::of(lo))));
  se.select(se.binary(BinaryFn::kEq, mag, se.constant(0.0)), se.constant(1.0), mag);
  b.add(se.done(sc));
  ir::Expr un(DType::kF32);
  un.binary(BinaryFn::kDiv, un.input(ir::Operand::of(shifted)), un.input(ir::Operand::of(sc)));
  b.add(un.done(shifted));
  reduce(b, ReduceFn::kSum, DType::kF32, shifted, m, dims);
  scale(b, m, m, 1.0 / static_cast<double>(count));
  ir::Expr dev(DType::kF32);
  const int32_t diff = dev.binary(BinaryFn::kSub, dev.input(ir::Operand::of(shifted)), dev.input(ir::Operand::of(m)));
  dev.binary(BinaryFn::kMul, diff, diff);
  b.add(dev.done(d));
  reduce(b, ReduceFn::kSum, DType::kF32, d, m, dims);
  ir::Expr fin(DType::kF32);
  const int32_t v = fin.binary(BinaryFn::kMul, fin.input(ir::Operand::of(m)),
                               fin.constant(1.0 / std::max(0.0, static_cast<double>(count) - correction)));
  const int32_t k = fin.input(ir::Operand::of(sc));
  if (c.op == "std") {
    fin.binary(BinaryFn::kMul, fin.unary(UnaryFn::kSqrt, v), k);
  } else {
    fin.binary(BinaryFn::kMul, fin.binary(BinaryFn::kMul, v, k), k);
  }
  b.add(fin.done(o));
}

// _softmax and _log_softmax (self, dim, half_to_float), in fp32 with one rounding at the end:
//   m = max(x); softmax = exp(x - m) / sum(exp(x - m)); log_softmax = (x - m) - log(sum(exp(x - m))),
// the shift subtracted before anything else, so that large logits lose no precision.
void softmax(Builder& b, const Call& c) {
  const uint32_t in = c.tensor("self");
  const ir::View x = b.view(in);
  if (!hw::dtype_is_float(x.dtype)) reject(c, "softmax of an integer type");
  const uint32_t out = c.out();
  if (empty(b.view(out))) return;
  const std::vector<int64_t> dims =
      x.sizes.empty() ? std::vector<int64_t>{} : wrap_dims({c.integer("dim", -1)}, x.sizes.size());
  const std::vector<int64_t> stat = kept_sizes(x, dims);
  const uint32_t m = b.temp(stat, DType::kF32), s = b.temp(stat, DType::kF32), e = b.temp(x.sizes, DType::kF32);
  reduce(b, ReduceFn::kMax, DType::kF32, in, m, dims);
  ir::Expr ex(DType::kF32);
  ex.unary(UnaryFn::kExp, ex.binary(BinaryFn::kSub, ex.input(ir::Operand::of(in)), ex.input(ir::Operand::of(m))));
  b.add(ex.done(e));
  reduce(b, ReduceFn::kSum, DType::kF32, e, s, dims);
  ir::Expr r(DType::kF32);
  if (c.op == "_log_softmax") {
    const int32_t shifted = r.binary(BinaryFn::kSub, r.input(ir::Operand::of(in)), r.input(ir::Operand::of(m)));
    r.binary(BinaryFn::kSub, shifted, r.unary(UnaryFn::kLog, r.input(ir::Operand::of(s))));
  } else {
    r.binary(BinaryFn::kDiv, r.input(ir::Operand::of(e)), r.input(ir::Operand::of(s)));
  }
  b.add(r.done(out));
}

// _softmax_backward_data(grad_output, output, dim, input_dtype): y * (g - sum(g * y));
// _log_softmax_backward_data: g - exp(y) * sum(g). In fp32, one rounding into the result.
void softmax_backward(Builder& b, const Call& c) {
  const uint32_t g = c.tensor("grad_output"), y = c.tensor("output");
  const ir::View yv = b.view(y);
  const uint32_t out = c.out();
  if (empty(b.view(out))) return;
  const std::vector<int64_t> dims =
      yv.sizes.empty() ? std::vector<int64_t>{} : wrap_dims({c.integer("dim", -1)}, yv.sizes.size());
  const uint32_t s = b.temp(kept_sizes(yv, dims), DType::kF32);
  ir::Expr e(DType::kF32);
  if (c.op == "_log_softmax_backward_data") {
    reduce(b, ReduceFn::kSum, DType::kF32, g, s, dims);
    const int32_t gi = e.input(ir::Operand::of(g)), yi = e.input(ir::Operand::of(y)), si = e.input(ir::Operand::of(s));
    e.binary(BinaryFn::kSub, gi, e.binary(BinaryFn::kMul, e.unary(UnaryFn::kExp, yi), si));
  } else {
    const uint32_t gy = b.temp(yv.sizes, DType::kF32);
    ir::Expr prod(DType::kF32);
    prod.binary(BinaryFn::kMul, prod.input(ir::Operand::of(g)), prod.input(ir::Operand::of(y)));
    b.add(prod.done(gy));
    reduce(b, ReduceFn::kSum, DType::kF32, gy, s, dims);
    const int32_t gi = e.input(ir::Operand::of(g)), yi = e.input(ir::Operand::of(y)), si = e.input(ir::Operand::of(s));
    e.binary(BinaryFn::kMul, yi, e.binary(BinaryFn::kSub, gi, si));
  }
  b.add(e.done(out));
}

// trace(self): the sum of a matrix's diagonal, a strided view of it.
void trace(Builder& b, const Call& c) {
  const uint32_t in = c.tensor("self");
  const ir::View x = b.view(in);
  if (x.sizes.size() != 2) reject(c, "trace of a tensor that is not a matrix");
  Call sum = c;
  sum.op = "sum";
  sum.args.erase("dim");
  sum.args["self"] = Arg::tensor(b.derive(in, {std::min(x.sizes[0], x.sizes[1])}, {x.strides[0] + x.strides[1]}));
  reduction(b, sum);
}

// count_nonzero(self, dim): the int64 sum of x != 0.
void count_nonzero(Builder& b, const Call& c) {
  const uint32_t in = c.tensor("self");
  const ir::View x = b.view(in);
  const uint32_t out = c.out();
  if (empty(b.view(out))) return;
  const std::vector<int64_t> dims = dims_of(c, "dim", x.sizes.size());
  if (empty(x)) return fill(b, out, 0);
  const uint32_t nonzero = b.temp(x.sizes, DType::kI64);
  ir::Expr e(narrow(x.dtype) ? DType::kF32 : x.dtype);
  e.binary(BinaryFn::kNe, e.input(ir::Operand::of(in)), e.constant(0));
  b.add(e.done(nonzero));
  reduce(b, ReduceFn::kSum, DType::kI64, nonzero, keep_view(b, c, out, x, dims), dims);
}

}  // namespace

const Table& reduce_ops() {
  static const Table t = {
      {"sum", reduction},
      {"nansum", reduction},
      {"prod", reduction},
      {"mean", reduction},
      {"amax", reduction},
      {"amin", reduction},
      {"all", reduction},
      {"any", reduction},
      {"prims::sum", reduction},
      {"trace", trace},
      {"count_nonzero", count_nonzero},
      {"max", {extremum, 2}},
      {"min", {extremum, 2}},
      {"argmax", extremum},
      {"argmin", extremum},
      {"var", moment},
      {"std", moment},
      {"prims::var", moment},
      {"_softmax", softmax},
      {"_log_softmax", softmax},
      {"_softmax_backward_data", softmax_backward},
      {"_log_softmax_backward_data", softmax_backward},
  };
  return t;
}

}  // namespace spyre::compiler::ops
