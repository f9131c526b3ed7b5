// Reductions on the device: sum, prod, mean, amax, amin, all, any, max and min (with and without
// dim), argmax, argmin, var and std, softmax and log_softmax and their backwards, and isin. Here is
// what is torch's (dims, result types and shapes, out=, its errors); the IR of each comes from the
// op library (backend/compiler/src/ops/reduce.cpp), which torch.compile's programs use too. Each
// call is one launch.
#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>

#include <cmath>
#include <map>
#include <stdexcept>

#include "boxed.h"
#include "compute.h"
#include "pointwise_common.h"

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
    for (int64_t d : dims->toIntVector()) {
      const int64_t w = at::maybe_wrap_dim(d, t.dim());
      TORCH_CHECK(std::find(out.begin(), out.end(), w) == out.end(), "dim ", w,
                  " appears multiple times in the list of dims");
      out.push_back(w);
    }
  } else {
    for (int64_t d = 0; d < t.dim(); ++d) out.push_back(d);
  }
  return out;
}

// CPU's refusal of a max or min over no elements: of an empty tensor with no dim named, or along
// a dim of size 0. Along other dims the result is empty, and nothing is refused.
void check_extremum_of_empty(const std::string& base, const at::Tensor& self, const c10::IValue* dim,
                             const std::vector<int64_t>& dims) {
  if (self.numel() != 0) return;
  const bool every_dim = !dim || (!dim->isInt() && dim->toIntVector().empty());
  if (every_dim && (base == "argmax" || base == "argmin")) {
    TORCH_CHECK_INDEX(false, base, "(): Expected reduction dim to be specified for input.numel() == 0.");
  }
  TORCH_CHECK(!every_dim, base, "(): Expected reduction dim to be specified for input.numel() == 0. ",
              "Specify the reduction dim with the 'dim' argument.");
  // CPU names a dim of a list as given (amax(-1)), a single dim wrapped (max(-1) names dim 0).
  const std::vector<int64_t> named = dim->isInt() ? dims : dim->toIntVector();
  for (size_t i = 0; i < dims.size(); ++i) {
    TORCH_CHECK_INDEX(self.size(dims[i]) != 0, base, "(): Expected reduction dim ", named[i],
                      " to have non-zero size.");
  }
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

// Runs the op library's lowering of call `c` with results `outs`; false when it fell back.
bool lowered(BoxedCall& c, const std::vector<at::Tensor>& outs, at::ScalarType common, at::ScalarType result) {
  Launch l;
  return lower_or_fall_back(l, library_call(c, l, outs, common, result), c);
}

struct ReduceRow {
  ReduceFn fn;
  bool mean = false;
  bool logical = false;  // all / any: of "not zero", with a bool result
};

// nansum is sum of the input with its NaNs as 0 (the op library masks them).
const std::map<std::string, ReduceRow, std::less<>> kReduce = {
    {"sum", {ReduceFn::kSum}},
    {"nansum", {ReduceFn::kSum}},
    {"prod", {ReduceFn::kProd}},
    {"mean", {ReduceFn::kSum, true}},
    {"amax", {ReduceFn::kMax}},
    {"amin", {ReduceFn::kMin}},
    {"all", {ReduceFn::kMin, false, true}},
    {"any", {ReduceFn::kMax, false, true}},
};

// sum, prod, mean (dtype=, dim=, keepdim=), amax, amin, all, any.
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
  const bool extremum = (row.fn == ReduceFn::kMax || row.fn == ReduceFn::kMin) && !row.logical;
  if (const std::optional<at::Tensor> o = c.out()) {  // what torch's out= variants accept
    const at::ScalarType want = o->scalar_type();
    TORCH_CHECK(!extremum || want == self.scalar_type(), "Expected the dtype for input and out to match, but got ",
                self.scalar_type(), " for input's dtype and ", want, " for out's dtype.");
    TORCH_CHECK(!row.logical || want == type, c.base(), " only supports bool tensor for result, got: ", want);
    TORCH_CHECK(!row.mean || c10::canCast(type, want), "result type ", type,
                " can't be cast to the desired output type ", want);
    if (!c.get("dtype")) type = want;
  }
  if (extremum) check_extremum_of_empty(c.base(), self, c.get("dim"), dims);
  if (!device_dtype(type) || !device_dtype(self.scalar_type()) || (row.mean && !at::isFloatingType(type))) {
    return c.fall_back();  // torch's own error for an integer mean comes from the CPU kernel
  }
  at::Tensor out = result_tensor(c, "out", self, result_sizes(self, dims, keepdim), type);
  if (out.numel() == 0) return c.finish(out);
  if (lowered(c, {out}, self.scalar_type(), type)) c.finish(out);
}

// trace(self): the sum of a matrix's diagonal, of sum's result type.
void trace_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  TORCH_CHECK(self.dim() == 2, "trace: expected a matrix, but got tensor with dim ", self.dim());
  check_types_as_cpu(c);  // a bool matrix has no trace
  const at::ScalarType type = at::isIntegralType(self.scalar_type(), true) ? at::kLong : self.scalar_type();
  if (!device_dtype(self.scalar_type())) return c.fall_back();
  at::Tensor out = at::empty({}, self.options().dtype(type));
  if (lowered(c, {out}, self.scalar_type(), type)) c.finish(out);
}

// count_nonzero(self, dim): int64 counts of x != 0 over dim (none: every dim).
void count_nonzero_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  const std::vector<int64_t> dims = reduce_dims(self, c.get("dim"));
  if (!device_dtype(self.scalar_type())) return c.fall_back();
  at::Tensor out = result_tensor(c, "out", self, result_sizes(self, dims, false), at::kLong);
  if (out.numel() == 0) return c.finish(out);
  if (lowered(c, {out}, self.scalar_type(), at::kLong)) c.finish(out);
}

// max.dim, min.dim (values and indices), argmax, argmin, and the full max and min.
void arg_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const std::string& base = c.base();
  const bool is_max = base == "max" || base == "argmax";
  const bool values = base == "max" || base == "min";
  const bool indices = base == "argmax" || base == "argmin" || c.get("dim");
  const at::Tensor self = c.at(0).toTensor();
  const std::vector<int64_t> dims = reduce_dims(self, c.get("dim"));
  const c10::IValue* keep = c.get("keepdim");
  const bool keepdim = keep && keep->toBool();
  TORCH_CHECK(self.scalar_type() != at::kBool || values, base, "(): does not support bool input");
  check_extremum_of_empty(base, self, c.get("dim"), dims);
  if (!device_dtype(self.scalar_type())) return c.fall_back();
  const std::vector<int64_t> sizes = result_sizes(self, dims, keepdim);
  // The out= names of max.dim_max and min.dim_min are (max, max_values) and (min, min_indices).
  at::Tensor vals, idx;
  if (values) vals = result_tensor(c, indices ? (is_max ? "max" : "min") : "out", self, sizes, self.scalar_type());
  if (indices) idx = result_tensor(c, values ? (is_max ? "max_values" : "min_indices") : "out", self, sizes, at::kLong);
  std::vector<at::Tensor> outs;
  if (values) outs.push_back(vals);
  if (indices) outs.push_back(idx);
  if (self.numel() != 0 && !lowered(c, outs, self.scalar_type(), self.scalar_type())) return;
  if (values && indices) return c.finish({vals, idx});
  c.finish(values ? vals : idx);
}

// var and std with a correction.
void moment_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  if (!device_dtype(self.scalar_type()) || !at::isFloatingType(self.scalar_type())) return c.fall_back();
  const std::vector<int64_t> dims = reduce_dims(self, c.get("dim"));
  const c10::IValue* keep = c.get("keepdim");
  const bool keepdim = keep && keep->toBool();
  at::Tensor out = result_tensor(c, "out", self, result_sizes(self, dims, keepdim), self.scalar_type());
  if (out.numel() == 0) return c.finish(out);
  if (lowered(c, {out}, self.scalar_type(), self.scalar_type())) c.finish(out);
}

// _softmax(self, dim, half_to_float) and _log_softmax.
void softmax_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  at::maybe_wrap_dim(c.at(1).toInt(), self.dim());  // torch's error for a bad dim
  const bool half_to_float = c.at(2).toBool();
  if (!device_dtype(self.scalar_type()) || !at::isFloatingType(self.scalar_type())) return c.fall_back();
  const at::ScalarType type = half_to_float ? at::kFloat : self.scalar_type();
  if (const std::optional<at::Tensor> o = c.out()) {
    TORCH_CHECK(o->scalar_type() == type, "Expected out tensor to have dtype ", type, ", but got ", o->scalar_type(),
                " instead");
  }
  at::Tensor out = result_tensor(c, "out", self, self.sizes(), type);
  if (out.numel() == 0) return c.finish(out);
  if (lowered(c, {out}, self.scalar_type(), type)) c.finish(out);
}

// _softmax_backward_data(g, y, dim, input_dtype) and _log_softmax_backward_data.
void softmax_backward_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor g = c.at(0).toTensor(), y = c.at(1).toTensor();
  at::maybe_wrap_dim(c.at(2).toInt(), std::max<int64_t>(y.dim(), 1));
  const at::ScalarType type = c.at(3).toScalarType();
  if (!device_dtype(type) || !device_dtype(y.scalar_type()) || !device_dtype(g.scalar_type())) return c.fall_back();
  at::Tensor out =
      result_tensor(c, c.base() == "_log_softmax_backward_data" ? "out" : "grad_input", y, y.sizes(), type);
  if (out.numel() == 0) return c.finish(out);
  if (lowered(c, {out}, y.scalar_type(), type)) c.finish(out);
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
  const at::Tensor out =
      c.out_or(elements.sizes(), [&] { return at::empty(elements.sizes(), elements.options().dtype(at::kBool)); });
  if (out.numel() == 0) return c.finish(out);
  if (tests.numel() == 0) return c.finish(out.fill_(invert));
  const int64_t n = elements.numel(), m = tests.numel();
  Launch l;
  const at::Tensor hits = l.scratch({n, m}, elements, at::kBool);
  ir::Expr eq(checked_device_dtype(common));
  eq.binary(BinaryFn::kEq, eq.input(ir::Operand::of(l.view(elements.reshape({n, 1})))),
            eq.input(ir::Operand::of(l.view(tests.reshape({1, m})))));
  l.add(eq.done(l.view(hits)));
  const at::Tensor any = invert ? l.scratch({n, 1}, elements, at::kBool) : out.view({n, 1});
  reduce(l, ReduceFn::kMax, l.view(hits), l.view(any), {1}, hw::DType::kBool);
  if (invert) {
    ir::Expr no(hw::DType::kBool);
    no.unary(hw::UnaryFn::kLogicalNot, no.input(ir::Operand::of(l.view(any))));
    l.add(no.done(l.view(out.view({n, 1}))));
  }
  if (!run_or_fall_back(l, c)) return;
  c.finish(out);
}

// histc(self, bins, min, max, out=): with min >= max the range is the data's own (a read-back, as
// torch's other devices do), widened by one either side when that is a single value.
void histc_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  const int64_t bins = c.at(1).toInt();
  double lo = c.at(2).toScalar().toDouble(), hi = c.at(3).toScalar().toDouble();
  TORCH_CHECK(bins > 0, "torch.histc(): bins must be > 0, but got ", bins, " for bins");
  TORCH_CHECK(std::isfinite(lo) && std::isfinite(hi), "torch.histc(): range of [", lo, ", ", hi, "] is not finite");
  TORCH_CHECK(lo <= hi, "torch.histc(): max must be larger than min");
  if (!device_dtype(self.scalar_type()) || self.scalar_type() == at::kBool) return c.fall_back();
  if (lo == hi && self.numel() > 0) {
    lo = self.min().item().toDouble();
    hi = self.max().item().toDouble();
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  const at::Tensor out = c.out_or({bins}, [&] { return at::empty({bins}, self.options()); });
  Launch l;
  compiler::ops::Call call = library_call(c, l, {out}, self.scalar_type(), out.scalar_type());
  call.args["min"] = compiler::ops::Arg::num(lo);
  call.args["max"] = compiler::ops::Arg::num(hi);
  if (lower_or_fall_back(l, call, c)) c.finish(out);
}

const bool g_registered = [] {
  register_boxed({"histc"}, {"", "out"}, &histc_kernel);
  register_boxed({"isin"}, {"Tensor_Tensor", "Tensor_Tensor_out"}, &isin_kernel);
  register_boxed({"_softmax_backward_data"}, {"", "out"}, &softmax_backward_kernel);
  register_boxed({"_log_softmax_backward_data"}, {"", "out"}, &softmax_backward_kernel);
  register_boxed({"sum"}, {"", "dim_IntList", "IntList_out", "out"}, &reduce_kernel);
  register_boxed({"nansum"}, {"", "out"}, &reduce_kernel);
  register_boxed({"trace"}, {""}, &trace_kernel);
  register_boxed({"count_nonzero"}, {"", "dim_IntList", "out", "dim_IntList_out"}, &count_nonzero_kernel);
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
