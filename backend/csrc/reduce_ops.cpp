// Reductions on the device, registered by table: sum, prod, mean, amax, amin, max and min (with
// and without dim), argmax, argmin, var and std, softmax and log_softmax. Each is one launch: a
// composite (mean, var, softmax) is a graph of reduce and pointwise ops with small temporaries.
#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>

#include <map>
#include <stdexcept>

#include "boxed.h"
#include "compute.h"

namespace spyre::backend {
namespace {

using hw::BinaryFn;
using hw::ReduceFn;

// The dims to reduce: `dims` wrapped, or every dim when it is absent or empty.
std::vector<int64_t> reduce_dims(const at::Tensor& t, const c10::IValue* dims) {
  std::vector<int64_t> out;
  if (t.dim() == 0) {
    if (dims && dims->isInt()) at::maybe_wrap_dim(dims->toInt(), int64_t{0});  // torch's error for a bad dim
    return out;                                                                // a scalar: nothing to reduce
  }
  if (dims && dims->isInt()) {
    out.push_back(at::maybe_wrap_dim(dims->toInt(), t.dim()));
  } else if (dims && !dims->toIntVector().empty()) {
    for (int64_t d : dims->toIntVector()) out.push_back(at::maybe_wrap_dim(d, t.dim()));
  } else {
    for (int64_t d = 0; d < t.dim(); ++d) out.push_back(d);
  }
  return out;
}

std::vector<int64_t> keepdim_sizes(const at::Tensor& t, const std::vector<int64_t>& dims) {
  std::vector<int64_t> s = t.sizes().vec();
  for (int64_t d : dims) s[static_cast<size_t>(d)] = 1;
  return s;
}

std::vector<int64_t> result_sizes(const at::Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  if (keepdim) return keepdim_sizes(t, dims);
  std::vector<int64_t> s;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) s.push_back(t.size(d));
  }
  return s;
}

// `out` (shaped with or without the reduced dims) viewed in the keepdim form the IR wants, with its
// dims in the order `perm` (the input's order when empty).
uint32_t keepdim_view(Launch& l, const at::Tensor& out, const at::Tensor& self, const std::vector<int64_t>& dims,
                      const std::vector<int64_t>& perm = {}) {
  std::vector<int64_t> sizes, strides;
  int64_t k = 0;
  for (int64_t d = 0; d < self.dim(); ++d) {
    const bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    const bool kept_dim = out.dim() == self.dim() || !reduced;
    sizes.push_back(reduced ? 1 : out.size(k));
    strides.push_back(kept_dim ? out.stride(k) : 0);
    if (kept_dim) ++k;
  }
  if (perm.empty()) return l.view(out, sizes, strides);
  std::vector<int64_t> ps, pt;
  for (int64_t d : perm) {
    ps.push_back(sizes[static_cast<size_t>(d)]);
    pt.push_back(strides[static_cast<size_t>(d)]);
  }
  return l.view(out, ps, pt);
}

// The result tensor: out= (resized), or a new one.
at::Tensor result_tensor(const BoxedCall& c, const char* name, const at::Tensor& self, c10::IntArrayRef sizes,
                         at::ScalarType type) {
  if (const c10::IValue* o = c.get(name)) {
    at::Tensor out = o->toTensor();
    at::native::resize_output(out, sizes);
    return out;
  }
  return at::empty(sizes, self.options().dtype(type));
}

ir::Pointwise scale(uint32_t view, hw::DType t, double k) {
  ir::Pointwise p;
  p.kind = ir::PointwiseKind::kBinary;
  p.binary = BinaryFn::kMul;
  p.compute = t;
  p.inputs = {ir::Operand::of(view), ir::Operand::constant(k)};
  p.out = view;
  return p;
}

ir::Reduce reduction(ReduceFn fn, hw::DType compute, uint32_t in, uint32_t out, const std::vector<int64_t>& dims) {
  ir::Reduce r;
  r.fn = fn;
  r.compute = compute;
  r.in = in;
  r.out = out;
  r.dims = dims;
  return r;
}

// A reduction's input as the compiler takes it: the tensor, the dims to reduce in its coordinates,
// and the permutation of the original dims it is laid out in (empty: the original order).
struct ReduceInput {
  at::Tensor tensor;
  std::vector<int64_t> dims;
  std::vector<int64_t> perm;
};

// Builds the launch with `build(launch, input)` and runs it. When the compiler does not take the
// input's layout (reduced dims that do not merge into one), retries once with a contiguous copy
// whose kept dims come first and reduced dims last; then falls back to the CPU.
template <typename Build>
bool launch_with(BoxedCall& c, const at::Tensor& self, const std::vector<int64_t>& dims, Build build) {
  std::vector<int64_t> perm, moved;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) perm.push_back(d);
  }
  for (int64_t d : dims) {
    perm.push_back(d);
    moved.push_back(static_cast<int64_t>(perm.size()) - 1);
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    const ReduceInput in =
        attempt == 0 ? ReduceInput{self, dims, {}} : ReduceInput{self.permute(perm).contiguous(), moved, perm};
    Launch l;
    build(l, in);
    if (try_run(l, c)) return true;
  }
  c.fall_back();
  return false;
}

struct ReduceRow {
  ReduceFn fn;
  bool mean = false;
  bool logical = false;  // all / any: of "not zero", with a bool result
};

const std::map<std::string, ReduceRow, std::less<>> kReduce = {
    {"sum", {ReduceFn::kSum}},
    {"prod", {ReduceFn::kProd}},
    {"mean", {ReduceFn::kSum, true}},
    {"amax", {ReduceFn::kMax}},
    {"amin", {ReduceFn::kMin}},
    {"all", {ReduceFn::kMin, false, true}},
    {"any", {ReduceFn::kMax, false, true}},
};

// sum, prod, mean (dtype=, dim=, keepdim=), amax, amin.
void reduce_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const ReduceRow& row = kReduce.at(c.base());
  const at::Tensor self = c.at(0).toTensor();
  const std::vector<int64_t> dims = reduce_dims(self, c.get("dim"));
  const c10::IValue* keep = c.get("keepdim");
  const bool keepdim = keep && keep->toBool();
  at::ScalarType type = self.scalar_type();
  if (const c10::IValue* d = c.get("dtype")) {
    type = d->toScalarType();
  } else if ((row.fn == ReduceFn::kSum || row.fn == ReduceFn::kProd) && at::isIntegralType(type, true)) {
    type = at::kLong;
  }
  if (row.logical) type = self.scalar_type() == at::kByte ? at::kByte : at::kBool;
  if (const c10::IValue* o = c.get("out"); o && !c.get("dtype")) type = o->toTensor().scalar_type();
  const bool extremum = (row.fn == ReduceFn::kMax || row.fn == ReduceFn::kMin) && !row.logical;
  if (!device_dtype(type) || !device_dtype(self.scalar_type()) || (row.mean && !at::isFloatingType(type)) ||
      (extremum && self.numel() == 0)) {
    return c.fall_back();  // torch's own errors for empty max and integer mean come from the CPU kernel
  }
  at::Tensor out = result_tensor(c, "out", self, result_sizes(self, dims, keepdim), type);
  if (out.numel() == 0) return c.finish(out);
  if (self.numel() == 0) {  // an empty sum or product: the identity
    const bool one = row.fn == ReduceFn::kProd || (row.logical && row.fn == ReduceFn::kMin);  // prod, all
    out.fill_(row.mean ? std::numeric_limits<double>::quiet_NaN() : (one ? 1.0 : 0.0));
    return c.finish(out);
  }
  int64_t count = 1;
  for (int64_t d : dims) count *= self.size(d);
  // fp16 and bf16 accumulate in fp32 (as torch does) and round once into the result.
  const hw::DType t = *device_dtype(type);
  const bool narrow = t == hw::DType::kF16 || t == hw::DType::kBF16;
  const hw::DType compute = narrow ? hw::DType::kF32 : t;
  if (launch_with(c, self, dims, [&](Launch& l, const ReduceInput& in) {
        const uint32_t o = keepdim_view(l, out, self, dims, in.perm);
        const bool direct = !narrow && !row.mean;
        const uint32_t acc = direct ? o : l.view(l.scratch(keepdim_sizes(in.tensor, in.dims), self, at::kFloat));
        l.reduce(reduction(row.fn, compute, l.view(in.tensor), acc, in.dims));
        if (!direct) {
          ir::Pointwise p = scale(acc, compute, row.mean ? 1.0 / static_cast<double>(count) : 1.0);
          p.out = o;
          l.pointwise(p);
        }
      })) {
    c.finish(out);
  }
}

// max.dim, min.dim (values and indices), argmax, argmin, and the full max and min.
void arg_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const std::string& base = c.base();
  const bool is_max = base == "max" || base == "argmax";
  const bool values = base == "max" || base == "min";
  const bool indices = base == "argmax" || base == "argmin" || c.get("dim");
  const at::Tensor self = c.at(0).toTensor();
  const c10::IValue* dim = c.get("dim");
  const std::vector<int64_t> dims = reduce_dims(self, dim);
  const c10::IValue* keep = c.get("keepdim");
  const bool keepdim = keep && keep->toBool();
  if (!device_dtype(self.scalar_type()) || self.numel() == 0) return c.fall_back();  // torch's error when empty
  const std::vector<int64_t> sizes = result_sizes(self, dims, keepdim);
  // The out= names of max.dim_max and min.dim_min are (max, max_values) and (min, min_indices).
  at::Tensor vals, idx;
  if (values) vals = result_tensor(c, indices ? (is_max ? "max" : "min") : "out", self, sizes, self.scalar_type());
  if (indices) idx = result_tensor(c, values ? (is_max ? "max_values" : "min_indices") : "out", self, sizes, at::kLong);
  // Argmax with no dim indexes the flattened tensor, so it reduces a contiguous copy.
  const at::Tensor src = (indices && !dim) ? self.contiguous() : self;
  if (launch_with(c, src, dims, [&](Launch& l, const ReduceInput& in) {
        const hw::DType t = *device_dtype(self.scalar_type());
        const uint32_t x = l.view(in.tensor);
        if (values) {
          l.reduce(reduction(is_max ? ReduceFn::kMax : ReduceFn::kMin, t, x, keepdim_view(l, vals, self, dims, in.perm),
                             in.dims));
        }
        if (indices) {
          l.reduce(reduction(is_max ? ReduceFn::kArgMax : ReduceFn::kArgMin, t, x,
                             keepdim_view(l, idx, self, dims, in.perm), in.dims));
        }
      })) {
    if (values && indices) return c.finish({vals, idx});
    c.finish(values ? vals : idx);
  }
}

// var and std with a correction: mean, deviations, their squares' mean (and a square root).
void moment_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  if (!device_dtype(self.scalar_type()) || !at::isFloatingType(self.scalar_type())) return c.fall_back();
  const std::vector<int64_t> dims = reduce_dims(self, c.get("dim"));
  const c10::IValue* keep = c.get("keepdim");
  const bool keepdim = keep && keep->toBool();
  double correction = 1;
  if (const c10::IValue* v = c.get("correction")) correction = v->toScalar().toDouble();
  int64_t count = 1;
  for (int64_t d : dims) count *= self.size(d);
  at::Tensor out = result_tensor(c, "out", self, result_sizes(self, dims, keepdim), self.scalar_type());
  if (out.numel() == 0) return c.finish(out);
  if (count == 0) return c.finish(out.fill_(std::numeric_limits<double>::quiet_NaN()));  // no elements: nan
  const hw::DType f32 = hw::DType::kF32;
  const bool sqrt = c.base() == "std";
  if (launch_with(c, self, dims, [&](Launch& l, const ReduceInput& in) {
        // The mean, in the input's layout (dims permuted like it), and the deviations.
        const at::Tensor mean = l.scratch(keepdim_sizes(in.tensor, in.dims), self);
        const uint32_t x = l.view(in.tensor), m = l.view(mean), d = l.view(l.scratch(in.tensor.sizes(), self));
        const uint32_t o = keepdim_view(l, out, self, dims, in.perm);
        const std::vector<int64_t>& dims = in.dims;
        l.reduce(reduction(ReduceFn::kSum, f32, x, m, dims));
        l.pointwise(scale(m, f32, 1.0 / static_cast<double>(count)));
        ir::Pointwise diff;
        diff.kind = ir::PointwiseKind::kBinary;
        diff.binary = BinaryFn::kSub;
        diff.compute = f32;
        diff.inputs = {ir::Operand::of(x), ir::Operand::of(m)};
        diff.out = d;
        l.pointwise(diff);
        ir::Pointwise sq = diff;
        sq.binary = BinaryFn::kMul;
        sq.inputs = {ir::Operand::of(d), ir::Operand::of(d)};
        l.pointwise(sq);
        l.reduce(reduction(ReduceFn::kSum, f32, d, m, dims));
        l.pointwise(scale(m, f32, 1.0 / std::max(0.0, static_cast<double>(count) - correction)));
        ir::Pointwise fin;
        fin.kind = ir::PointwiseKind::kUnary;
        fin.unary = sqrt ? hw::UnaryFn::kSqrt : hw::UnaryFn::kCopy;
        fin.compute = f32;
        fin.inputs = {ir::Operand::of(m)};
        fin.out = o;
        l.pointwise(fin);
      })) {
    c.finish(out);
  }
}

// _softmax(self, dim, half_to_float) and _log_softmax, in fp32 with one rounding at the end:
//   m = max(x); t = exp(x - m); s = sum(t); softmax = t / s; log_softmax = x - (m + log(s)).
void softmax_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  const int64_t dim = at::maybe_wrap_dim(c.at(1).toInt(), self.dim());
  const bool half_to_float = c.at(2).toBool();
  const bool log = c.base() == "_log_softmax";
  if (!device_dtype(self.scalar_type()) || !at::isFloatingType(self.scalar_type())) return c.fall_back();
  const at::ScalarType type = half_to_float ? at::kFloat : self.scalar_type();
  at::Tensor out = result_tensor(c, "out", self, self.sizes(), type);
  if (out.numel() == 0) return c.finish(out);
  const std::vector<int64_t> dims = self.dim() == 0 ? std::vector<int64_t>{} : std::vector<int64_t>{dim};
  const hw::DType f32 = hw::DType::kF32;
  if (launch_with(c, self, dims, [&](Launch& l, const ReduceInput& in) {
        const std::vector<int64_t> stat = keepdim_sizes(in.tensor, in.dims);
        const uint32_t x = l.view(in.tensor), m = l.view(l.scratch(stat, self)), s = l.view(l.scratch(stat, self));
        const uint32_t e = l.view(l.scratch(in.tensor.sizes(), self));
        const uint32_t o = keepdim_view(l, out, self, {}, in.perm);
        const auto pointwise = [&](ir::PointwiseKind kind, auto fn, std::vector<uint32_t> args, uint32_t dst) {
          ir::Pointwise p;
          p.kind = kind;
          if constexpr (std::is_same_v<decltype(fn), BinaryFn>) {
            p.binary = fn;
          } else {
            p.unary = fn;
          }
          p.compute = f32;
          for (uint32_t a : args) p.inputs.push_back(ir::Operand::of(a));
          p.out = dst;
          l.pointwise(p);
        };
        l.reduce(reduction(ReduceFn::kMax, f32, x, m, in.dims));
        pointwise(ir::PointwiseKind::kBinary, BinaryFn::kSub, {x, m}, e);
        pointwise(ir::PointwiseKind::kUnary, hw::UnaryFn::kExp, {e}, e);
        l.reduce(reduction(ReduceFn::kSum, f32, e, s, in.dims));
        if (log) {
          pointwise(ir::PointwiseKind::kUnary, hw::UnaryFn::kLog, {s}, s);
          pointwise(ir::PointwiseKind::kBinary, BinaryFn::kAdd, {s, m}, s);
          pointwise(ir::PointwiseKind::kBinary, BinaryFn::kSub, {x, s}, o);
        } else {
          pointwise(ir::PointwiseKind::kBinary, BinaryFn::kDiv, {e, s}, o);
        }
      })) {
    c.finish(out);
  }
}

// _softmax_backward_data(g, y, dim, input_dtype): y * (g - sum(g * y)); and
// _log_softmax_backward_data: g - exp(y) * sum(g). In fp32, one rounding into the result.
void softmax_backward_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor g = c.at(0).toTensor().contiguous(), y = c.at(1).toTensor().contiguous();
  const int64_t dim = at::maybe_wrap_dim(c.at(2).toInt(), std::max<int64_t>(y.dim(), 1));
  const at::ScalarType type = c.at(3).toScalarType();
  const bool log = c.base() == "_log_softmax_backward_data";
  if (!device_dtype(type) || !device_dtype(y.scalar_type()) || !device_dtype(g.scalar_type())) return c.fall_back();
  at::Tensor out = result_tensor(c, log ? "out" : "grad_input", y, y.sizes(), type);
  if (out.numel() == 0) return c.finish(out);
  Launch l;
  const std::vector<int64_t> dims = y.dim() == 0 ? std::vector<int64_t>{} : std::vector<int64_t>{dim};
  const uint32_t gv = l.view(g), yv = l.view(y), s = l.view(l.scratch(keepdim_sizes(y, dims), y));
  const uint32_t o = l.view(out);
  ir::Expr e(hw::DType::kF32);
  if (log) {
    l.reduce(reduction(ReduceFn::kSum, hw::DType::kF32, gv, s, dims));
    const int32_t gi = e.input(ir::Operand::of(gv)), yi = e.input(ir::Operand::of(yv));
    const int32_t si = e.input(ir::Operand::of(s));
    e.binary(BinaryFn::kSub, gi, e.binary(BinaryFn::kMul, e.unary(hw::UnaryFn::kExp, yi), si));
  } else {
    const uint32_t gy = l.view(l.scratch(y.sizes(), y));
    ir::Expr prod(hw::DType::kF32);
    prod.binary(BinaryFn::kMul, prod.input(ir::Operand::of(gv)), prod.input(ir::Operand::of(yv)));
    l.pointwise(prod.done(gy));
    l.reduce(reduction(ReduceFn::kSum, hw::DType::kF32, gy, s, dims));
    const int32_t gi = e.input(ir::Operand::of(gv)), yi = e.input(ir::Operand::of(yv));
    const int32_t si = e.input(ir::Operand::of(s));
    e.binary(BinaryFn::kMul, yi, e.binary(BinaryFn::kSub, gi, si));
  }
  l.pointwise(e.done(o));
  if (!run_or_fall_back(l, c)) return;
  c.finish(out);
}

// isin(elements, test_elements, assume_unique, invert): any(elements[i] == test[j] over j), as one
// launch: the comparisons as a [numel, tests] bool block, reduced by max along the tests.
void isin_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor elements = c.at(0).toTensor(), tests = c.at(1).toTensor();
  const bool invert = c.get("invert") && c.get("invert")->toBool();
  const at::ScalarType common = at::result_type(elements, tests);
  if (!device_dtype(common) || !tests.is_privateuseone() || !device_dtype(elements.scalar_type()) ||
      !device_dtype(tests.scalar_type())) {
    return c.fall_back();
  }
  at::Tensor out = c.out() ? *c.out() : at::empty(elements.sizes(), elements.options().dtype(at::kBool));
  if (c.out()) at::native::resize_output(out, elements.sizes());
  if (out.numel() == 0) return c.finish(out);
  if (tests.numel() == 0) return c.finish(out.fill_(invert));
  const int64_t n = elements.numel(), m = tests.numel();
  Launch l;
  const at::Tensor hits = l.scratch({n, m}, elements, at::kBool);
  ir::Expr eq(*device_dtype(common));
  eq.binary(BinaryFn::kEq, eq.input(ir::Operand::of(l.view(elements.reshape({n, 1})))),
            eq.input(ir::Operand::of(l.view(tests.reshape({1, m})))));
  l.pointwise(eq.done(l.view(hits)));
  const at::Tensor any = invert ? l.scratch({n, 1}, elements, at::kBool) : out.view({n, 1});
  l.reduce(reduction(ReduceFn::kMax, hw::DType::kBool, l.view(hits), l.view(any), {1}));
  if (invert) {
    ir::Expr no(hw::DType::kBool);
    no.unary(hw::UnaryFn::kLogicalNot, no.input(ir::Operand::of(l.view(any))));
    l.pointwise(no.done(l.view(out.view({n, 1}))));
  }
  if (!run_or_fall_back(l, c)) return;
  c.finish(out);
}

const bool g_registered = [] {
  register_boxed({"isin"}, {"Tensor_Tensor", "Tensor_Tensor_out"}, &isin_kernel);
  register_boxed({"_softmax_backward_data"}, {"", "out"}, &softmax_backward_kernel);
  register_boxed({"_log_softmax_backward_data"}, {"", "out"}, &softmax_backward_kernel);
  register_boxed({"sum"}, {"", "dim_IntList", "IntList_out", "out"}, &reduce_kernel);
  register_boxed({"prod"}, {"", "dim_int", "int_out", "out"}, &reduce_kernel);
  register_boxed({"mean"}, {"", "dim", "out", "dtype_out"}, &reduce_kernel);
  register_boxed({"amax", "amin"}, {"", "out"}, &reduce_kernel);
  register_boxed({"all", "any"}, {"", "dim", "dims", "out", "dims_out", "all_out"}, &reduce_kernel);
  register_boxed({"max", "min"}, {"", "dim", "dim_max", "dim_min", "unary_out"}, &arg_kernel);
  register_boxed({"argmax", "argmin"}, {"", "out"}, &arg_kernel);
  register_boxed({"var", "std"}, {"correction", "correction_out"}, &moment_kernel);
  register_boxed({"_softmax", "_log_softmax"}, {"", "out"}, &softmax_kernel);
  return true;
}();

}  // namespace
}  // namespace spyre::backend
