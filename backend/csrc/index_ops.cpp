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

namespace spyre::backend {
namespace {

using Kind = ir::Index::Kind;

// Indices as int64 on the device: int32 ones are converted by a copy kernel (into a scratch).
at::Tensor int64_indices(Launch& l, const at::Tensor& idx) {
  TORCH_CHECK(idx.scalar_type() == at::kLong || idx.scalar_type() == at::kInt,
              "index must be an int64 or int32 tensor, got ", idx.scalar_type());
  if (idx.scalar_type() == at::kLong) return idx;
  const at::Tensor wide = l.scratch(idx.sizes(), idx, at::kLong);
  ir::Pointwise p;
  p.kind = ir::PointwiseKind::kCopy;
  p.compute = hw::DType::kI64;
  p.inputs = {ir::Operand::of(l.view(idx))};
  p.out = l.view(wide);
  l.add(p);
  return wide;
}

// Views of `t` as [dims before `dim`..., size(dim), the rest flattened] when the rest is contiguous;
// nullopt otherwise (the caller packs it first).
std::optional<std::pair<std::vector<int64_t>, std::vector<int64_t>>> rows_view(const at::Tensor& t, int64_t dim) {
  std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().begin() + dim + 1);
  std::vector<int64_t> strides(t.strides().begin(), t.strides().begin() + dim + 1);
  int64_t inner = 1, expect = 1;
  for (int64_t d = t.dim(); d-- > dim + 1;) {
    if (t.size(d) != 1 && t.stride(d) != expect && t.numel() > 0) return std::nullopt;
    expect *= t.size(d);
    inner *= t.size(d);
  }
  sizes.push_back(inner);
  strides.push_back(1);
  return std::make_pair(sizes, strides);
}

// A 0-dim tensor as the 1-element vector the kernels index.
at::Tensor one_d(const at::Tensor& t) {
  return t.dim() == 0 ? t.view({1}) : t;
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

void finish(BoxedCall& c, Launch& l, const at::Tensor& result) {
  if (run_or_fall_back(l, c)) c.finish(result);
}

uint32_t index_op(Launch& l, Kind kind, uint32_t table, uint32_t index, uint32_t rows) {
  ir::Index x;
  x.kind = kind;
  x.table = table;
  x.index = index;
  x.rows = rows;
  ir::Op op;
  op.family = ir::Op::Family::kIndex;
  op.index = x;
  l.graph().ops.push_back(op);
  return rows;
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
    out = c.out() ? *c.out() : at::empty(index.sizes(), self.options());
    if (c.out()) at::native::resize_output(out, index.sizes());
    if (index.numel() == 0) return c.finish(out);
  } else {
    if (index.numel() == 0) return c.finish(c.inplace() ? self : (c.out() ? c.out()->copy_(self) : self.clone()));
    out = c.inplace() ? self : (c.out() ? *c.out() : self.clone());
    if (!c.inplace() && c.out()) {
      at::native::resize_output(out, self.sizes());
      out.copy_(self);
    }
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
  at::Tensor result = c.inplace() ? self : (c.out() ? *c.out() : self.clone());
  if (!c.inplace() && c.out()) {
    at::native::resize_output(result, self.sizes());
    result.copy_(self);
  }
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
    p.compute = *device_dtype(source.scalar_type());
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

// Indexing wraps negative indices (x[-1] is the last row); index_select and scatter do not.
at::Tensor wrapped(const at::Tensor& idx, int64_t size) {
  return at::where(idx < 0, idx + size, idx);
}

// Advanced indexing over adjacent dims of self, as one index into those dims flattened: `dim` is
// the first indexed dim, `span` how many, `lin` the flat row of each result element and `shape`
// the shape the indexed dims become in the result.
struct LinearIndex {
  int64_t dim = 0, span = 0;
  at::Tensor lin;
  std::vector<int64_t> shape;
  // The index tensors as torch's indexing iterator takes them, as meta tensors of `shape` with
  // their strides (integer indices broadcast together; a mask's nonzero columns): the result's
  // layout follows from them.
  std::vector<at::Tensor> as_torch;
};

// The linear index of an index list: integer tensors, broadcast together, on adjacent dims
// (x[i], x[:, i, j]); or one bool mask (x[m], x[:, m]), whose true positions in row-major order
// are the rows taken. Other forms (indices split by a slice, a mask beside integer indices, CPU
// indices) give nullopt and take the CPU fallback. An integer index wraps when negative; one out of
// range gives a row past the end, so the transfer faults, as with index_select.
std::optional<LinearIndex> linear_index(const at::Tensor& self, const c10::IValue& list) {
  const c10::List<std::optional<at::Tensor>> indices = list.toOptionalTensorList();
  LinearIndex r;
  std::vector<at::Tensor> ints;
  std::optional<at::Tensor> mask;
  int64_t d = 0;
  bool ended = false;  // an undefined index came after defined ones
  for (size_t k = 0; k < indices.size(); ++k) {
    const std::optional<at::Tensor> t = indices.get(k);
    if (!t || !t->defined()) {
      ended = ended || !ints.empty() || mask;
      ++d;
      continue;
    }
    if (ended || !t->is_privateuseone()) return std::nullopt;
    if (ints.empty() && !mask) r.dim = d;
    if (t->scalar_type() == at::kBool) {
      if (mask || !ints.empty() || t->dim() == 0) return std::nullopt;
      mask = *t;
      d += t->dim();
    } else if (t->scalar_type() == at::kLong || t->scalar_type() == at::kInt) {
      if (mask) return std::nullopt;
      ints.push_back(*t);
      ++d;
    } else {
      return std::nullopt;
    }
  }
  if (ints.empty() && !mask) return std::nullopt;
  TORCH_CHECK_INDEX(d <= self.dim(), "too many indices for tensor of dimension ", self.dim());
  if (mask) {
    r.span = mask->dim();
    for (int64_t j = 0; j < r.span; ++j) {
      TORCH_CHECK_INDEX(mask->size(j) == self.size(r.dim + j), "The shape of the mask ", mask->sizes(), " at index ", j,
                        " does not match the shape of the indexed tensor ", self.sizes(), " at index ", r.dim + j);
    }
    r.lin = at::nonzero(mask->reshape({-1})).reshape({-1});
    r.shape = {r.lin.numel()};
    const at::TensorOptions meta = at::TensorOptions().device(c10::kMeta).dtype(at::kLong);
    r.as_torch.assign(static_cast<size_t>(r.span), at::empty_strided(r.shape, {r.span}, meta));
    return r;
  }
  r.span = static_cast<int64_t>(ints.size());
  for (const at::Tensor& t : ints) r.shape = at::infer_size(r.shape, t.sizes());
  for (const at::Tensor& t : ints) {
    r.as_torch.push_back(at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta)).expand(r.shape));
  }
  if (r.span == 1) {
    r.lin = wrapped(ints[0].to(at::kLong), self.size(r.dim));
    return r;
  }
  at::Tensor lin, bad;
  int64_t rows = 1;
  for (int64_t j = 0; j < r.span; ++j) {
    const int64_t size = self.size(r.dim + j);
    const at::Tensor w = wrapped(ints[static_cast<size_t>(j)].to(at::kLong), size).expand(r.shape);
    const at::Tensor out = at::logical_or(w < 0, w >= size);
    lin = j == 0 ? w : lin * size + w;
    bad = j == 0 ? out : at::logical_or(bad, out);
    rows *= size;
  }
  r.lin = at::where(bad, rows, lin);
  return r;
}

// self with dims [dim, dim + span) merged into one, as a view (nullopt when they do not merge; a
// tensor with no elements always merges). Dims of size 1 take no part: their strides are arbitrary.
std::optional<at::Tensor> merged(const at::Tensor& self, int64_t dim, int64_t span) {
  int64_t inner = 1, expect = 0;
  bool seen = false;
  for (int64_t j = dim + span - 1; j >= dim; --j) {
    if (self.size(j) == 1) continue;
    if (seen && self.numel() > 0 && self.stride(j) != expect) return std::nullopt;
    if (!seen) inner = self.stride(j);
    seen = true;
    expect = self.stride(j) * self.size(j);
  }
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().begin() + dim);
  std::vector<int64_t> strides(self.strides().begin(), self.strides().begin() + dim);
  int64_t rows = 1;
  for (int64_t j = dim; j < dim + span; ++j) rows *= self.size(j);
  sizes.push_back(rows);
  strides.push_back(inner);
  sizes.insert(sizes.end(), self.sizes().begin() + dim + span, self.sizes().end());
  strides.insert(strides.end(), self.strides().begin() + dim + span, self.strides().end());
  return self.as_strided(sizes, strides, self.storage_offset());
}

// The result shape of indexing: self[:dim] + the index's shape + self[dim + span:].
std::vector<int64_t> indexed_shape(const at::Tensor& self, const LinearIndex& ix) {
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().begin() + ix.dim);
  shape.insert(shape.end(), ix.shape.begin(), ix.shape.end());
  shape.insert(shape.end(), self.sizes().begin() + ix.dim + ix.span, self.sizes().end());
  return shape;
}

// The layout torch gives an indexing result: its iterator's over self restrided to the result's
// shape (stride 0 along the index's dims) and each index reshaped to the result's rank (size 1
// along self's other dims, with the strides reshape gives them: they count where self's size is 1).
std::vector<int64_t> index_result_strides(const at::Tensor& self, const LinearIndex& ix, c10::IntArrayRef shape) {
  std::vector<int64_t> src;
  for (int64_t d = 0; d < ix.dim; ++d) src.push_back(self.stride(d));
  src.insert(src.end(), ix.shape.size(), 0);
  for (int64_t d = ix.dim + ix.span; d < self.dim(); ++d) src.push_back(self.stride(d));
  if (src.size() != shape.size() || shape.size() < 2) {
    const c10::DimVector s = c10::contiguous_strides(shape);
    return {s.begin(), s.end()};
  }
  std::vector<int64_t> padded(static_cast<size_t>(ix.dim), 1);
  padded.insert(padded.end(), ix.shape.begin(), ix.shape.end());
  padded.resize(shape.size(), 1);
  const at::TensorOptions meta = at::TensorOptions().device(c10::kMeta);
  at::TensorIteratorConfig config;
  config.check_all_same_dtype(false).set_check_mem_overlap(false);
  config.add_owned_output(at::Tensor());
  config.add_owned_const_input(at::empty_strided(shape, src, meta.dtype(self.scalar_type())));
  for (const at::Tensor& index : ix.as_torch) {
    const at::Tensor reshaped = index.reshape(padded);  // in self's dtype: only the layout counts here
    config.add_owned_const_input(
        at::empty_strided(reshaped.sizes(), reshaped.strides(), meta.dtype(self.scalar_type())));
  }
  const at::TensorIterator iter = config.build();
  return iter.output().strides().vec();
}

// index.Tensor(self, indices): index_select of the linear index along the merged indexed dims.
void index_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  if (self.dim() == 0 || c.out() || !device_dtype(self.scalar_type())) return c.fall_back();
  const std::optional<LinearIndex> ix = linear_index(self, c.at(1));
  if (!ix) return c.fall_back();
  std::optional<at::Tensor> table = merged(self, ix->dim, ix->span);
  if (!table) table = merged(self.contiguous(), ix->dim, ix->span);
  TORCH_CHECK_INDEX(!table || table->size(ix->dim) > 0 || ix->lin.numel() == 0,
                    "index is out of bounds for dimension with size 0");
  TORCH_CHECK(table, "spyre: internal: indexed dims that do not merge in a contiguous tensor");
  at::Tensor result = at::index_select(*table, ix->dim, ix->lin.reshape({-1})).view(indexed_shape(self, *ix));
  const std::vector<int64_t> strides = index_result_strides(self, *ix, result.sizes());
  if (result.strides() != c10::IntArrayRef(strides)) {
    result = at::empty_strided(result.sizes(), strides, result.options()).copy_(result);
  }
  c.finish(result);
}

// index_put_(self, indices, values, accumulate): index_add (accumulate) or a scatter of rows along
// the merged indexed dims.
void index_put_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  const at::Tensor values = c.at(2).toTensor();
  const bool accumulate = c.at(3).toBool();
  // As torch: one bool mask and one value is a masked_fill (the value converts to self's type).
  const c10::List<std::optional<at::Tensor>> list = c.at(1).toOptionalTensorList();
  const std::optional<at::Tensor> mask = list.size() == 1 ? list.get(0) : std::nullopt;
  if (!accumulate && values.numel() == 1 && mask && mask->defined() && mask->scalar_type() == at::kBool &&
      mask->is_privateuseone() && mask->dim() <= self.dim() &&
      self.sizes().slice(0, static_cast<size_t>(mask->dim())) == mask->sizes()) {
    std::vector<int64_t> shape = mask->sizes().vec();
    shape.resize(static_cast<size_t>(self.dim()), 1);
    at::Tensor target = self;  // a mask of self's rank as it is: it may be self (x[x] = v)
    target.masked_fill_(mask->dim() == self.dim() ? *mask : mask->view(shape), values.item());
    return c.finish(self);
  }
  if (values.device() == self.device()) at::assert_no_overlap(self, values);  // as CPU, after the masked_fill
  for (size_t i = 0; i < list.size(); ++i) {
    const std::optional<at::Tensor> index = list.get(i);
    if (index && index->defined() && index->device() == self.device()) at::assert_no_overlap(self, *index);
  }
  TORCH_CHECK(values.scalar_type() == self.scalar_type(),
              "Index put requires the source and destination dtypes match, ", "got ", self.scalar_type(),
              " for the destination and ", values.scalar_type(), " for the source.");
  if (self.dim() == 0 || !c.inplace() || !device_dtype(self.scalar_type()) || !values.is_privateuseone()) {
    return c.fall_back();
  }
  const std::optional<LinearIndex> ix = linear_index(self, c.at(1));
  if (!ix) return c.fall_back();
  const std::optional<at::Tensor> target = merged(self, ix->dim, ix->span);
  if (!target) return c.fall_back();
  const at::Tensor index = ix->lin.reshape({-1});
  const int64_t dim = ix->dim;
  std::vector<int64_t> rows_shape = target->sizes().vec();
  rows_shape[static_cast<size_t>(dim)] = index.numel();
  // values broadcast against the indexing result's shape, then flatten to one row per index.
  const at::Tensor src =
      values.to(self.scalar_type()).expand(indexed_shape(self, *ix)).reshape(rows_shape).contiguous();
  if (index.numel() == 0) return c.finish(self);
  if (accumulate) {
    target->index_add_(dim, index, src);
  } else if (at::globalContext().deterministicAlgorithms() && index.numel() > 1) {
    // Deterministic: a row named twice takes its last value, as on CPU. The indices sorted stably
    // put each row's writes together in order; the last of each run is the one kept.
    const auto [sorted, order] = index.sort(/*stable=*/true, 0, false);
    const int64_t n = index.numel();
    const at::Tensor last = at::cat(
        {sorted.narrow(0, 0, n - 1).ne(sorted.narrow(0, 1, n - 1)), at::ones({1}, sorted.options().dtype(at::kBool))});
    const at::Tensor keep = order.masked_select(last);
    const at::Tensor rows = src.index_select(dim, keep), at = index.index_select(0, keep);
    std::vector<int64_t> view(static_cast<size_t>(target->dim()), 1), shape = rows_shape;
    view[static_cast<size_t>(dim)] = at.numel();
    shape[static_cast<size_t>(dim)] = at.numel();
    target->scatter_(dim, at.view(view).expand(shape), rows);
  } else {  // rows of a scatter along dim
    std::vector<int64_t> view(static_cast<size_t>(target->dim()), 1);
    view[static_cast<size_t>(dim)] = index.numel();
    target->scatter_(dim, index.view(view).expand(rows_shape), src);
  }
  c.finish(self);
}

// The positions of the true elements of `mask` (flat, [n]) among them, as scatter destinations:
// dest[i] = (number of true elements before i) where mask[i], else n (a row kept for the rest).
// Returns the scratch holding dest; `count` receives a scratch with the number of true elements.
at::Tensor compaction(Launch& l, const at::Tensor& mask, at::Tensor& count) {
  const int64_t n = mask.numel();
  const at::Tensor flat = l.scratch({1, n}, mask, at::kLong);
  {
    ir::Pointwise p;
    p.kind = ir::PointwiseKind::kCopy;
    p.compute = hw::DType::kI64;
    p.inputs = {ir::Operand::of(l.view(mask.reshape({1, n})))};
    p.out = l.view(flat);
    l.add(p);
  }
  const at::Tensor running = l.scratch({1, n}, mask, at::kLong);
  ir::Op scan;
  scan.family = ir::Op::Family::kScan;
  scan.scan.compute = hw::DType::kI64;
  scan.scan.in = l.view(flat);
  scan.scan.out = l.view(running);
  l.graph().ops.push_back(scan);
  count = l.scratch({1, 1}, mask, at::kLong);
  ir::Expr last(hw::DType::kI64);
  last.unary(hw::UnaryFn::kCopy, last.input(ir::Operand::of(l.view(running.narrow(1, n - 1, 1)))));
  l.add(last.done(l.view(count)));
  const at::Tensor dest = l.scratch({n}, mask, at::kLong);
  ir::Expr d(hw::DType::kI64);
  const int32_t m = d.input(ir::Operand::of(l.view(flat.view({n}))));
  const int32_t r = d.input(ir::Operand::of(l.view(running.view({n}))));
  d.select(d.binary(hw::BinaryFn::kNe, m, d.constant(0)), d.binary(hw::BinaryFn::kSub, r, d.constant(1)),
           d.constant(static_cast<double>(n)));
  l.add(d.done(l.view(dest)));
  return dest;
}

// masked_select(self, mask): the elements where mask (broadcast) is true, flat. The count is read
// back to size the result (a synchronization, as on every device), then the elements are
// scattered to their places among the selected ones.
void masked_select_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor(), mask = c.at(1).toTensor();
  if (!device_dtype(self.scalar_type()) || mask.scalar_type() != at::kBool || !mask.is_privateuseone() || c.out()) {
    return c.fall_back();
  }
  const std::vector<int64_t> shape = at::infer_size(self.sizes(), mask.sizes());
  const at::Tensor x = self.expand(shape).contiguous(), m = mask.expand(shape).contiguous();
  const int64_t n = x.numel();
  if (n == 0) return c.finish(at::empty({0}, self.options()));
  Launch l;
  at::Tensor count;
  const at::Tensor dest = compaction(l, m, count);
  const at::Tensor buf = at::empty({n + 1}, self.options());
  index_op(l, Kind::kScatter, l.view(buf, {n + 1, 1}, {1, 1}), l.view(dest), l.view(x.view({n}), {n, 1}, {1, 1}));
  if (!run_or_fall_back(l, c)) return;
  c.finish(buf.narrow(0, 0, count.item<int64_t>()).clone());
}

// masked_scatter_(self, mask, source): the true positions of mask take source's elements in order
// (a gather from source by each element's place among the true ones, then a select).
void masked_scatter_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor(), mask = c.at(1).toTensor(), source = c.at(2).toTensor();
  if (!device_dtype(self.scalar_type()) || mask.scalar_type() != at::kBool || !mask.is_privateuseone() ||
      source.scalar_type() != self.scalar_type() || !source.is_privateuseone()) {
    return c.fall_back();
  }
  const int64_t n = self.numel(), s = source.numel();
  if (n == 0) return c.finish(self);
  const at::Tensor m = mask.expand(self.sizes()).contiguous();
  // Checked on the host (one sync) so that a short source is an error, not a device fault.
  const int64_t ones = m.sum().item<int64_t>();
  TORCH_CHECK(ones <= s, "masked_scatter_: expected source to have at least as many elements as ones in mask (", s,
              " < ", ones, ")");
  if (ones == 0) return c.finish(self);
  Launch l;
  at::Tensor count;
  const at::Tensor dest = compaction(l, m, count);
  // Elements that are not selected read source[0] (and are not used).
  const at::Tensor safe = l.scratch({n}, self, at::kLong);
  ir::Expr e(hw::DType::kI64);
  const int32_t d = e.input(ir::Operand::of(l.view(dest)));
  e.select(e.binary(hw::BinaryFn::kEq, d, e.constant(static_cast<double>(n))), e.constant(0), d);
  l.add(e.done(l.view(safe)));
  const at::Tensor flat_src = source.contiguous().view({s});
  const at::Tensor picked = l.scratch({n}, self, self.scalar_type());
  index_op(l, Kind::kGather, l.view(flat_src, {s, 1}, {1, 1}), l.view(safe), l.view(picked, {n, 1}, {1, 1}));
  ir::Pointwise sel;
  sel.kind = ir::PointwiseKind::kSelect;
  sel.compute = *device_dtype(self.scalar_type());
  sel.inputs = {ir::Operand::of(l.view(m)), ir::Operand::of(l.view(picked.view(self.sizes()))),
                ir::Operand::of(l.view(self))};
  sel.out = l.view(self);
  l.add(sel);
  finish(c, l, self);
}

// nonzero(self): the coordinates of the non-zero elements, [count, dim], in row-major order.
void nonzero_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor().contiguous();
  if (!device_dtype(self.scalar_type()) || c.out()) return c.fall_back();
  const int64_t n = self.numel(), dims = self.dim();
  if (n == 0) return c.finish(at::empty({0, dims}, self.options().dtype(at::kLong)));
  if (dims == 0) {  // a scalar: one row of no coordinates when it is not zero
    return c.finish(at::empty({self.ne(0).item<bool>() ? 1 : 0, 0}, self.options().dtype(at::kLong)));
  }
  Launch l;
  const at::Tensor nz = l.scratch(self.sizes(), self, at::kBool);
  ir::Expr ne(*device_dtype(self.scalar_type()) == hw::DType::kBool ? hw::DType::kI64
                                                                    : *device_dtype(self.scalar_type()));
  ne.binary(hw::BinaryFn::kNe, ne.input(ir::Operand::of(l.view(self))), ne.constant(0));
  l.add(ne.done(l.view(nz)));
  at::Tensor count;
  const at::Tensor dest = compaction(l, nz, count);
  // Coordinates of every element: (i / stride[d]) % size[d], from an iota over the elements.
  const at::Tensor index = l.scratch({n}, self, at::kLong), coords = l.scratch({n, dims}, self, at::kLong);
  ir::Pointwise iota;
  iota.kind = ir::PointwiseKind::kIota;
  iota.compute = hw::DType::kI64;
  iota.out = l.view(index);
  l.add(iota);
  for (int64_t d = 0; d < dims; ++d) {
    ir::Expr e(hw::DType::kI64);
    const int32_t i = e.input(ir::Operand::of(l.view(index)));
    e.binary(hw::BinaryFn::kRemainder,
             e.binary(hw::BinaryFn::kFloorDiv, i, e.constant(static_cast<double>(self.stride(d)))),
             e.constant(static_cast<double>(self.size(d))));
    l.add(e.done(l.view(coords.select(1, d))));
  }
  const at::Tensor buf = at::empty({n + 1, dims}, self.options().dtype(at::kLong));
  index_op(l, Kind::kScatter, l.view(buf, {n + 1, dims}, {dims, 1}), l.view(dest), l.view(coords));
  if (!run_or_fall_back(l, c)) return;
  // Laid out as CPU's: coordinates of one dim contiguous (a [dims, count] tensor, transposed).
  const int64_t found = count.item<int64_t>();
  const at::Tensor result = at::empty({dims, found}, self.options().dtype(at::kLong)).t();
  c.finish(result.copy_(buf.narrow(0, 0, found)));
}

const bool g_registered = [] {
  register_boxed({"masked_select"}, {""}, &masked_select_kernel);
  register_boxed({"nonzero"}, {""}, &nonzero_kernel);
  register_boxed({"masked_scatter_"}, {""}, &masked_scatter_kernel);
  register_boxed({"index"}, {"Tensor"}, &index_kernel);
  register_boxed({"index_put_", "_index_put_impl_"}, {""}, &index_put_kernel);
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
