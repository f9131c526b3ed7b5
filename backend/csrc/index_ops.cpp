// Indexing ops on the device: index_select (and so embedding), gather, scatter, scatter_add,
// index_add, embedding_dense_backward, and the nll_loss pair built on them. Each becomes an IR
// index op (indirect DMA: rows chosen by an int64 index vector, every index bounds-checked by the
// core) on views arranged so that the indexed dim is the table's row dim. Ops the device does not
// take (other dtypes, options it does not model) run on the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Dispatch.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <c10/util/strides.h>
#include <torch/library.h>

#include <stdexcept>

#include "boxed.h"
#include "compute.h"
#include "index_common.h"

namespace spyre::backend {
namespace {

using indexing::finish;
using indexing::index_op;
using indexing::int64_indices;
using indexing::rows_view;
using Kind = ir::Index::Kind;

// A 0-dim tensor as the 1-element vector the kernels index.
at::Tensor one_d(const at::Tensor& t) {
  return t.dim() == 0 ? t.view({1}) : t;
}

// What an op that updates a copy of self writes: self when in place, otherwise the out= tensor (or
// a new one) holding self's values.
at::Tensor copy_of_self(const BoxedCall& c, const at::Tensor& self) {
  if (c.inplace()) return self;
  return c.out_or(self.sizes(), [&] { return at::empty_like(self); }).copy_(self);
}

// The reductions of scatter_reduce and index_reduce: the SCATTER that combines each row with the
// table's, and the value a position starts from when the table's own is left out (include_self).
struct Reduction {
  Kind kind;
  bool mean;
};

std::optional<Reduction> reduction(const std::string& reduce) {
  if (reduce == "sum") return Reduction{Kind::kScatterAdd, false};
  if (reduce == "mean") return Reduction{Kind::kScatterAdd, true};
  if (reduce == "prod") return Reduction{Kind::kScatterMul, false};
  if (reduce == "amax") return Reduction{Kind::kScatterMax, false};
  if (reduce == "amin") return Reduction{Kind::kScatterMin, false};
  return std::nullopt;
}

at::Scalar identity(Kind kind, at::ScalarType t) {
  const bool max = kind == Kind::kScatterMax;
  if (kind != Kind::kScatterMax && kind != Kind::kScatterMin) return kind == Kind::kScatterMul ? 1 : 0;
  if (t == at::kBool) return !max;
  if (at::isFloatingType(t))
    return max ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  return AT_DISPATCH_INTEGRAL_TYPES(t, "identity", [&] {
    return at::Scalar(max ? std::numeric_limits<scalar_t>::lowest() : std::numeric_limits<scalar_t>::max());
  });
}

// A mean's division by its count, in place: integers round down, as CPU's.
void divide_by_count(at::Tensor& result, const at::Tensor& count) {
  if (at::isFloatingType(result.scalar_type())) {
    result.div_(count);
  } else {
    result.div_(count, "floor");
  }
}

// index_select(self, dim, index): out[..., i, ...] = self[..., index[i], ...] (the op library's).
void index_select_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  const int64_t dim = at::maybe_wrap_dim(c.at(1).toInt(), std::max<int64_t>(self.dim(), 1));
  const at::Tensor index = c.at(2).toTensor();
  TORCH_CHECK(index.dim() <= 1, "index_select(): Index is supposed to be a vector");
  TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt,
              "index_select(): Expected dtype int32/int64 for index");
  TORCH_CHECK(index.is_privateuseone(),
              "Expected all tensors to be on the same device, but found at least two "
              "devices, ",
              self.device(), " and ", index.device(), "! (the index of index_select)");
  if (!device_dtype(self.scalar_type())) return c.fall_back();
  std::vector<int64_t> out_sizes = self.sizes().vec();
  if (self.dim() > 0) out_sizes[static_cast<size_t>(dim)] = index.numel();
  at::Tensor out;
  if (std::optional<at::Tensor> o = c.out()) {
    out = *o;
    TORCH_CHECK(out.scalar_type() == self.scalar_type(),
                "index_select(): self and result must have the same scalar type");
    at::native::resize_output(out, out_sizes);
  } else {
    out = at::empty(out_sizes, self.options());
  }
  if (out.numel() == 0) return c.finish(out);
  Launch l;
  if (lower_or_fall_back(l, library_call(c, l, {out}, self.scalar_type(), self.scalar_type()), c)) c.finish(out);
}

// take(self, index): the flattened self at each index, in the index's shape.
void take_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor(), index = c.at(1).toTensor();
  TORCH_CHECK(index.scalar_type() == at::kLong, "take(): Expected a long tensor for index, but got ",
              index.scalar_type());
  TORCH_CHECK(index.is_privateuseone(),
              "Expected all tensors to be on the same device, but found at least two devices, ", self.device(), " and ",
              index.device(), "! (the index of take)");
  TORCH_CHECK_INDEX(self.numel() > 0 || index.numel() == 0, "take(): tried to take from an empty tensor");
  if (!device_dtype(self.scalar_type())) return c.fall_back();
  at::Tensor out;
  if (std::optional<at::Tensor> o = c.out()) {
    out = *o;
    TORCH_CHECK(out.scalar_type() == self.scalar_type(), "take(): self and result must have the same scalar type");
    at::native::resize_output(out, index.sizes());
  } else {
    out = at::empty(index.sizes(), self.options());
  }
  if (out.numel() == 0) return c.finish(out);
  Launch l;
  if (lower_or_fall_back(l, library_call(c, l, {out}, self.scalar_type(), self.scalar_type()), c)) c.finish(out);
}

// put_(self, index, source, accumulate): source written (or added) at the flattened indices, as
// an index_put_ into the flattened self (a contiguous copy of it when it has no flat view).
void put_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor(), index = c.at(1).toTensor(), source = c.at(2).toTensor();
  const bool accumulate = c.at(3).toBool();
  TORCH_CHECK(index.scalar_type() == at::kLong, "put_(): Expected a long tensor for index, but got ",
              index.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(),
              "put_(): self and source expected to have the same dtype, but got self.dtype = ", self.scalar_type(),
              " and source.dtype = ", source.scalar_type());
  TORCH_CHECK_INDEX(source.numel() == index.numel(),
                    "put_(): Expected source and index to have the same number of elements, but got source.numel() = ",
                    source.numel(), ", index.numel() = ", index.numel());
  TORCH_CHECK_INDEX(self.numel() > 0 || index.numel() == 0, "put_(): Tried to put elements into an empty tensor");
  if (!device_dtype(self.scalar_type())) return c.fall_back();
  if (index.numel() == 0) return c.finish(self);
  at::Tensor flat = self.is_contiguous() ? self.view({-1}) : self.contiguous().view({-1});
  const c10::List<std::optional<at::Tensor>> indices({index.reshape({-1})});
  flat.index_put_(indices, source.reshape({-1}), accumulate);
  if (!self.is_contiguous()) self.copy_(flat.view(self.sizes()));
  c.finish(self);
}

// index_fill_(self, dim, index, value): value at every position whose index along dim is listed,
// as an index_put_ with the index in dim's place.
void index_fill_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  const int64_t dim = at::maybe_wrap_dim(c.at(1).toInt(), std::max<int64_t>(self.dim(), 1));
  const at::Tensor index = c.at(2).toTensor();
  TORCH_CHECK_INDEX(index.scalar_type() == at::kLong, "index_fill_(): Expected dtype int64 for index.");
  TORCH_CHECK(index.dim() <= 1, "Index has to be a vector/scalar");
  at::Tensor value;
  if (c.at(3).isTensor()) {
    value = c.at(3).toTensor();
    TORCH_CHECK(value.dim() == 0, "index_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
                value.dim(), " dimension(s).");
    value = value.to(self.options());
  } else {
    value = at::scalar_tensor(c.at(3).toScalar(), self.options());
  }
  if (!device_dtype(self.scalar_type())) return c.fall_back();
  if (index.numel() == 0 || self.numel() == 0) return c.finish(self);
  c10::List<std::optional<at::Tensor>> indices;
  for (int64_t d = 0; d < dim; ++d) indices.push_back(std::nullopt);
  indices.push_back(index.reshape({-1}));
  (self.dim() == 0 ? self.view({1}) : self).index_put_(indices, value);
  c.finish(self);
}

// gather(self, dim, index) and scatter / scatter_add(self, dim, index, src): per-element indices,
// as rows of one element along `dim` (moved last, which only changes strides).
void element_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const std::string& base = c.base();
  const at::Tensor self = c.at(0).toTensor();
  const int64_t dim = at::maybe_wrap_dim(c.at(1).toInt(), std::max<int64_t>(self.dim(), 1));
  const at::Tensor index = c.at(2).toTensor();
  const bool gather = base == "gather";
  std::string reduce = base == "scatter_add" ? "add" : "";
  if (const c10::IValue* r = c.get("reduce")) reduce = r->toStringRef();
  const bool reducing = base == "scatter_reduce";  // sum, prod, mean, amax, amin; include_self
  Reduction how{Kind::kScatter, false};
  const bool include_self = !c.get("include_self") || c.get("include_self")->toBool();
  TORCH_CHECK(index.is_privateuseone(),
              "Expected all tensors to be on the same device, but found at least two "
              "devices, ",
              self.device(), " and ", index.device(), "! (the index of ", base, ")");
  if (!device_dtype(self.scalar_type()) || (c.get("sparse_grad") && c.get("sparse_grad")->toBool())) {
    return c.fall_back();
  }
  if (reducing) {
    const std::optional<Reduction> r = reduction(reduce);
    TORCH_CHECK(r, "reduce argument must be either sum, prod, mean, amax or amin, got ", reduce);
    how = *r;
    if (how.mean && self.scalar_type() == at::kBool) return c.fall_back();
  } else {
    TORCH_CHECK(reduce.empty() || reduce == "add" || reduce == "multiply", base,
                "(): reduce argument must be either add or multiply, got ", reduce);
  }
  TORCH_CHECK(index.numel() == 0 || one_d(index).dim() == one_d(self).dim(), base,
              "(): Index tensor must have the same number of dimensions as input tensor");
  // The table view takes its batch sizes from the index: an index wider than self (or src) there
  // would address memory outside the tensor, so it is an error, as on CPU.
  for (int64_t d = 0; index.numel() > 0 && d < one_d(index).dim(); ++d) {
    TORCH_CHECK(d == dim || one_d(index).size(d) <= one_d(self).size(d), base, "(): Size does not match at dimension ",
                d, ": expected index ", index.sizes(), " to be no larger than self ", self.sizes(),
                " apart from dimension ", dim);
    const c10::IValue& v = c.at(3);
    if (!gather && v.isTensor()) {
      TORCH_CHECK(one_d(index).size(d) <= one_d(v.toTensor()).size(d), base, "(): Size does not match at dimension ", d,
                  ": expected index ", index.sizes(), " to be no larger than src ", v.toTensor().sizes());
    }
  }
  at::Tensor out;
  at::Tensor src;
  if (gather) {
    out = c.out_or(index.sizes(), [&] { return at::empty(index.sizes(), self.options()); });
    if (index.numel() == 0) return c.finish(out);
  } else {
    out = copy_of_self(c, self);
    if (index.numel() == 0) return c.finish(out);
    const c10::IValue& v = c.at(3);
    if (v.isTensor()) {
      src = one_d(v.toTensor());
      TORCH_CHECK(src.scalar_type() == self.scalar_type(), base, "(): Expected self.dtype to be equal to src.dtype");
      // Only the positions the index covers are read.
      for (int64_t d = 0; d < one_d(index).dim(); ++d) src = src.narrow(d, 0, one_d(index).size(d));
    } else {
      src = at::full({}, v.toScalar(), self.options()).expand(one_d(index).sizes());
    }
  }
  if (index.numel() == 0) return c.finish(out);
  if (reducing && !include_self) out.scatter_(dim, index, identity(how.kind, out.scalar_type()));
  Launch l;
  const at::Tensor idx = int64_indices(l, one_d(index)).movedim(dim, -1);
  const at::Tensor table = one_d(gather ? self : out).movedim(dim, -1);
  const at::Tensor rows = (gather ? one_d(out) : src).movedim(dim, -1);
  // Rows of one element: [batch..., n, 1] against the table's [batch..., R, 1].
  const auto with_unit = [](const at::Tensor& t, c10::IntArrayRef lead_sizes) {
    std::vector<int64_t> sizes(lead_sizes.begin(), lead_sizes.end()), strides(t.strides().begin(), t.strides().end());
    sizes.push_back(1);
    strides.push_back(1);
    return std::make_pair(sizes, strides);
  };
  std::vector<int64_t> table_sizes = idx.sizes().vec();
  table_sizes.back() = table.size(-1);
  const auto [ts, tt] = with_unit(table, table_sizes);
  const auto [rs, rt] = with_unit(rows, idx.sizes());
  const Kind kind = gather                 ? Kind::kGather
                    : reducing             ? how.kind
                    : reduce == "add"      ? Kind::kScatterAdd
                    : reduce == "multiply" ? Kind::kScatterMul
                                           : Kind::kScatter;
  index_op(l, kind, l.view(table, ts, tt), l.view(idx), l.view(rows, rs, rt));
  if (!reducing || !how.mean) return finish(c, l, out);
  if (!run_or_fall_back(l, c)) return;
  at::Tensor count = include_self ? at::ones_like(out) : at::zeros_like(out);
  count.scatter_add_(dim, index, at::ones(index.sizes(), out.options()));
  divide_by_count(out, count.clamp_min_(1));
  c.finish(out);
}

// index_add(self, dim, index, source, alpha): self[..., index[i], ...] += alpha * source[..., i, ...].
// index_reduce(self, dim, index, source, reduce, include_self): the rows combined by prod, mean,
// amax or amin instead (from the reduction's identity where include_self is false).
void index_add_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  const int64_t dim = at::maybe_wrap_dim(c.at(1).toInt(), std::max<int64_t>(self.dim(), 1));
  const at::Tensor index = c.at(2).toTensor();
  at::Tensor source = c.at(3).toTensor();
  const bool reducing = c.base() == "index_reduce";
  const double alpha = reducing ? 1.0 : c.scalar("alpha", 1.0);
  Reduction how{Kind::kScatterAdd, false};
  bool include_self = true;
  if (reducing) {
    const std::string reduce = c.at(4).toStringRef();
    const std::optional<Reduction> r = reduce == "sum" ? std::nullopt : reduction(reduce);
    TORCH_CHECK(r, "index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got ", reduce, ".");
    how = *r;
    include_self = !c.get("include_self") || c.get("include_self")->toBool();
    if (how.mean && self.scalar_type() == at::kBool) return c.fall_back();
  }
  TORCH_CHECK(index.is_privateuseone() && source.is_privateuseone(),
              "Expected all tensors to be on the same device, "
              "but found at least two devices, ",
              self.device(), " and ", (index.is_privateuseone() ? source : index).device(), "! (index_add)");
  if (!device_dtype(self.scalar_type())) return c.fall_back();
  TORCH_CHECK(source.scalar_type() == self.scalar_type(),
              reducing ? "index_reduce_(): self and source must have the same scalar type"
                       : "index_add_(): self and source must have the same dtype");
  const at::Tensor result = copy_of_self(c, self);
  // Nothing to add (a zero-size row or no rows): the result as it is. The indices are still
  // checked against the dim, as on CPU.
  if (index.numel() == 0) return c.finish(result);
  if (result.numel() == 0 || source.numel() == 0) {
    const int64_t size = result.dim() == 0 ? 1 : result.size(dim);
    TORCH_CHECK_INDEX(size > 0 || index.numel() == 0, "index_add_(): index out of range for a dim of size 0");
    return c.finish(result);
  }
  if (!include_self) result.index_fill_(dim, index, identity(how.kind, result.scalar_type()));
  const at::Tensor dest = one_d(result);
  // Rows are scattered whole: a destination whose rows are not contiguous (a transposed one) is
  // added into a contiguous copy, which is copied back.
  const at::Tensor out = rows_view(dest, dim) ? dest : dest.contiguous();
  source = one_d(source);
  Launch l;
  const at::Tensor idx = int64_indices(l, index.reshape({-1}));
  if (alpha != 1.0 || !rows_view(source, dim)) {  // scaled (and packed) rows in a scratch
    const at::Tensor scaled = l.scratch(source.sizes(), source, source.scalar_type());
    ir::Pointwise p;
    p.kind = ir::PointwiseKind::kBinary;
    p.binary = hw::BinaryFn::kMul;
    p.compute = checked_device_dtype(source.scalar_type());
    p.inputs = {ir::Operand::of(l.view(source)), ir::Operand::constant(alpha)};
    p.out = l.view(scaled);
    l.add(p);
    source = scaled;
  }
  const auto out_rows = rows_view(out, dim), source_rows = rows_view(source, dim);
  TORCH_CHECK(out_rows && source_rows, "spyre: internal: index_add_ rows that are not contiguous");
  const auto [ts, tt] = *out_rows;
  const auto [rs, rt] = *source_rows;
  std::vector<int64_t> is(ts.begin(), ts.end() - 2), it(is.size(), 0);
  is.push_back(idx.numel());
  it.push_back(idx.stride(0));
  index_op(l, how.kind, l.view(out, ts, tt), l.view(idx, is, it), l.view(source, rs, rt));
  if (!run_or_fall_back(l, c)) return;
  if (!out.is_same(dest)) dest.copy_(out);
  if (how.mean) {  // each row's count (1 more with self), broadcast along dim
    at::Tensor count = at::full({result.dim() == 0 ? 1 : result.size(dim)}, include_self ? 1 : 0, result.options());
    count.index_add_(0, index.reshape({-1}), at::ones({index.numel()}, result.options()));
    std::vector<int64_t> shape(std::max<int64_t>(result.dim(), 1), 1);
    shape[dim] = count.numel();
    at::Tensor r = one_d(result);
    divide_by_count(r, count.clamp_min_(1).view(shape));
  }
  c.finish(result);
}

// embedding_renorm_(self, indices, max_norm, norm_type): the rows the indices name, scaled in place
// to a norm of at most max_norm (gather the rows, their norms, a scale, scatter them back).
void embedding_renorm_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  const at::Tensor indices = c.at(1).toTensor();
  const double max_norm = c.at(2).toDouble(), p = c.at(3).toDouble();
  if (!at::isFloatingType(self.scalar_type()) || !device_dtype(self.scalar_type()) || self.dim() != 2) {
    return c.fall_back();
  }
  if (indices.numel() == 0) return c.finish(self);
  if (!rows_view(self, 0)) {  // rows the gather cannot address: renorm a packed copy, then write it back
    at::Tensor packed = self.contiguous();
    at::embedding_renorm_(packed, indices, max_norm, p);
    self.copy_(packed);
    return c.finish(self);
  }
  Launch l;
  const at::Tensor idx = int64_indices(l, indices.reshape({-1}));
  const int64_t n = idx.numel(), D = self.size(1);
  const at::Tensor rows = l.scratch({n, D}, self, self.scalar_type());
  const at::Tensor norm = l.scratch({n, 1}, self);
  const uint32_t table = l.view(self), r = l.view(rows), nv = l.view(norm), iv = l.view(idx);
  index_op(l, Kind::kGather, table, iv, r);
  {  // |x|^p summed over the row, then ^(1/p)
    ir::Expr e(hw::DType::kF32);
    e.binary(hw::BinaryFn::kPow, e.unary(hw::UnaryFn::kAbs, e.input(ir::Operand::of(r))), e.constant(p));
    const at::Tensor powered = l.scratch({n, D}, self);
    const uint32_t pw = l.view(powered);
    l.add(e.done(pw));
    ir::Reduce sum;
    sum.fn = hw::ReduceFn::kSum;
    sum.in = pw;
    sum.out = nv;
    sum.dims = {1};
    l.add(sum);
  }
  {  // scale = norm > max_norm ? max_norm / (norm + 1e-7) : 1, applied to the rows
    ir::Expr e(hw::DType::kF32);
    const int32_t x = e.input(ir::Operand::of(r));
    const int32_t nrm = e.binary(hw::BinaryFn::kPow, e.input(ir::Operand::of(nv)), e.constant(1.0 / p));
    const int32_t scale =
        e.binary(hw::BinaryFn::kDiv, e.constant(max_norm), e.binary(hw::BinaryFn::kAdd, nrm, e.constant(1e-7)));
    e.binary(hw::BinaryFn::kMul, x,
             e.select(e.binary(hw::BinaryFn::kGt, nrm, e.constant(max_norm)), scale, e.constant(1.0)));
    l.add(e.done(r));
  }
  index_op(l, Kind::kScatter, table, iv, r);
  finish(c, l, self);
}

// embedding_dense_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq): the rows of
// grad added into a zero table at their indices, skipping padding_idx (the op library's).
void embedding_backward_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor grad = c.at(0).toTensor();
  const at::Tensor indices = c.at(1).toTensor();
  const int64_t num_weights = c.at(2).toInt();
  if (c.at(4).toBool() || !device_dtype(grad.scalar_type()) || !at::isFloatingType(grad.scalar_type()) ||
      !indices.is_privateuseone()) {
    return c.fall_back();  // scale_grad_by_freq is not modelled
  }
  at::Tensor out = at::empty({num_weights, grad.size(-1)}, grad.options());
  if (out.numel() == 0) return c.finish(out);
  Launch l;
  if (lower_or_fall_back(l, library_call(c, l, {out}, grad.scalar_type(), grad.scalar_type()), c)) c.finish(out);
}

const bool g_registered = [] {
  register_boxed({"index_select"}, {"", "out"}, &index_select_kernel);
  register_boxed({"take"}, {"", "out"}, &take_kernel);
  register_boxed({"put_"}, {""}, &put_kernel);
  register_boxed({"index_fill_"}, {"int_Scalar", "int_Tensor"}, &index_fill_kernel);
  register_boxed({"gather"}, {"", "out"}, &element_kernel);
  register_boxed(
      with_inplace({"scatter", "scatter_add"}),
      {"", "src", "value", "src_out", "value_out", "out", "reduce", "value_reduce", "reduce_out", "value_reduce_out"},
      &element_kernel);
  register_boxed(with_inplace({"index_add", "index_reduce"}), {"", "out"}, &index_add_kernel);
  register_boxed(with_inplace({"scatter_reduce"}), {"two", "two_out"}, &element_kernel);
  register_boxed({"embedding_dense_backward"}, {""}, &embedding_backward_kernel);
  register_boxed({"embedding_renorm_"}, {""}, &embedding_renorm_kernel);
  return true;
}();

}  // namespace
}  // namespace spyre::backend
