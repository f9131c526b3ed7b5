// Advanced indexing on the device: index and index_put (integer tensor indices over adjacent dims,
// as one linear index), masked_select and masked_scatter (a compaction of the mask into scatter
// destinations), and nonzero. Each becomes IR index ops (indirect DMA) as in index_ops.cpp.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Dispatch.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <c10/util/strides.h>
#include <torch/library.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

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

// Integer indices split by a slice (x[:, i, :, j]) index as torch indexes them: over self with the
// indexed dims moved to its front, in order, where they are adjacent (the result's index dims come
// first). Anything else (adjacent indices, a mask, more indices than dims) is returned as it is.
std::pair<at::Tensor, c10::IValue> indexed_dims_to_front(const at::Tensor& self, const c10::IValue& list) {
  const c10::List<std::optional<at::Tensor>> indices = list.toOptionalTensorList();
  std::vector<int64_t> front;
  c10::List<std::optional<at::Tensor>> kept;
  for (size_t k = 0; k < indices.size(); ++k) {
    const std::optional<at::Tensor> t = indices.get(k);
    if (!t || !t->defined()) continue;
    if (t->scalar_type() == at::kBool || static_cast<int64_t>(indices.size()) > self.dim()) return {self, list};
    front.push_back(static_cast<int64_t>(k));
    kept.push_back(t);
  }
  if (front.empty() || front.back() - front.front() + 1 == static_cast<int64_t>(front.size())) return {self, list};
  std::vector<int64_t> order = front;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (std::find(front.begin(), front.end(), d) == front.end()) order.push_back(d);
  }
  return {self.permute(order), c10::IValue(kept)};
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
  if (c.at(0).toTensor().dim() == 0 || c.out() || !device_dtype(c.at(0).toTensor().scalar_type())) {
    return c.fall_back();
  }
  const auto [self, list] = indexed_dims_to_front(c.at(0).toTensor(), c.at(1));
  const std::optional<LinearIndex> ix = linear_index(self, list);
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
    self.masked_fill_(mask->dim() == self.dim() ? *mask : mask->view(shape), values.item());
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
  // values broadcast against the indexing result's shape, then flatten to one row per index; packed
  // only when their rows are not contiguous already (a transposed view of keys is, row by row).
  at::Tensor src = values.to(self.scalar_type()).expand(indexed_shape(self, *ix)).reshape(rows_shape);
  if (!rows_view(src, dim)) src = src.contiguous();
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
  } else if (const auto out_rows = rows_view(*target, dim), src_rows = rows_view(src, dim); out_rows && src_rows) {
    // Whole rows (what follows dim is contiguous in both: a KV cache's heads): one index per row,
    // shared by the dims before dim, rather than one per element.
    Launch l;
    const at::Tensor idx = int64_indices(l, index);
    const auto& [ts, tt] = *out_rows;
    const auto& [rs, rt] = *src_rows;
    std::vector<int64_t> is(ts.begin(), ts.end() - 2), it(is.size(), 0);
    is.push_back(idx.numel());
    it.push_back(idx.stride(0));
    index_op(l, Kind::kScatter, l.view(*target, ts, tt), l.view(idx, is, it), l.view(src, rs, rt));
    if (!run_or_fall_back(l, c)) return;
  } else {  // rows of one element, along dim
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
  sel.compute = checked_device_dtype(self.scalar_type());
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
  const hw::DType type = checked_device_dtype(self.scalar_type());
  ir::Expr ne(type == hw::DType::kBool ? hw::DType::kI64 : type);
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
  return true;
}();

}  // namespace
}  // namespace spyre::backend
