// Data movement on the device: cat (the op library's: each input copied into its slice of the
// output, several per launch) and tril / triu (a select against row and column indices). Views, transpose, permute and
// contiguous need no kernel here: they are metadata, and the copy kernel (compute.cpp) moves data.
#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <torch/library.h>

#include "boxed.h"
#include "compute.h"

namespace spyre::backend {
namespace {

// cat(tensors, dim, out=): inputs converted to the promoted type as they are copied; torch's legacy
// rule skips 1-d empty inputs.
void cat_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const std::vector<at::Tensor> all = c.at(0).toTensorVector();
  std::vector<at::Tensor> inputs;
  for (const at::Tensor& t : all) {
    if (!(t.dim() == 1 && t.size(0) == 0)) inputs.push_back(t);
  }
  TORCH_CHECK(!all.empty(), "torch.cat(): expected a non-empty list of Tensors");
  for (size_t i = 0; i < all.size(); ++i) {
    TORCH_CHECK(all[i].dim() > 0, "zero-dimensional tensor (at position ", i, ") cannot be concatenated");
  }
  const at::ScalarType type = at::native::result_type(at::ITensorListRef(all));
  if (!device_dtype(type)) return c.fall_back();
  if (inputs.empty()) {  // only legacy empty inputs: an empty result
    return c.finish(c.out_or({0}, [&] { return at::empty({0}, all[0].options().dtype(type)); }));
  }
  const at::Tensor& first = inputs[0];
  const int64_t dim = at::maybe_wrap_dim(c.at(1).toInt(), first.dim());
  std::vector<int64_t> sizes = first.sizes().vec();
  sizes[static_cast<size_t>(dim)] = 0;
  for (const at::Tensor& t : inputs) {
    TORCH_CHECK(t.dim() == first.dim(), "torch.cat(): Tensors must have same number of dimensions: got ", first.dim(),
                " and ", t.dim());
    for (int64_t d = 0; d < t.dim(); ++d) {
      TORCH_CHECK(d == dim || t.size(d) == first.size(d), "Sizes of tensors must match except in dimension ", dim,
                  ". Expected size ", first.size(d), " but got size ", t.size(d), " for tensor number in the list.");
    }
    TORCH_CHECK(t.is_privateuseone() && device_dtype(t.scalar_type()), "torch.cat(): expected spyre tensors");
    sizes[static_cast<size_t>(dim)] += t.size(dim);
  }
  at::Tensor out;
  if (std::optional<at::Tensor> o = c.out()) {
    out = *o;
    TORCH_CHECK(c10::canCast(type, out.scalar_type()),
                "torch.cat(): input types can't be cast to the desired output "
                "type ",
                out.scalar_type());
    at::native::resize_output(out, sizes);
  } else {
    out = at::empty(sizes, first.options().dtype(type));
  }
  if (!device_dtype(out.scalar_type())) return c.fall_back();
  // A launch holds at most 16 tensors: up to 8 inputs per launch, each into its slice of out.
  int64_t offset = 0;
  for (size_t i = 0; i < inputs.size() && out.numel() > 0; i += 8) {
    const std::vector<at::Tensor> part(inputs.begin() + static_cast<std::ptrdiff_t>(i),
                                       inputs.begin() + static_cast<std::ptrdiff_t>(std::min(inputs.size(), i + 8)));
    int64_t n = 0;
    for (const at::Tensor& t : part) n += t.size(dim);
    Launch l;
    compiler::ops::Call call;
    call.op = "cat";
    std::vector<uint32_t> views;
    views.reserve(part.size());
    for (const at::Tensor& t : part) views.push_back(l.view(t));
    call.args["tensors"] = compiler::ops::Arg::tensors(std::move(views));
    call.args["dim"] = compiler::ops::Arg::num(static_cast<double>(dim), true);
    call.outs = {l.view(out.narrow(dim, offset, n))};
    if (!lower_or_fall_back(l, call, c)) return;
    offset += n;
  }
  c.finish(out);
}

// tril(self, diagonal) / triu: keep x where col - row <= diagonal (tril) or >= diagonal (triu).
void triangle_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  const int64_t diagonal = c.at(1).toInt();
  const bool lower = c.base() == "tril";
  TORCH_CHECK(self.dim() >= 2, c.base(), ": input tensor must have at least 2 dimensions");
  if (const std::optional<at::Tensor> o = c.out()) {  // CPU's structured kernel: out of self's type
    TORCH_CHECK(o->scalar_type() == self.scalar_type(), "Expected out tensor to have dtype ", self.scalar_type(),
                ", but got ", o->scalar_type(), " instead");
  }
  if (!device_dtype(self.scalar_type())) return c.fall_back();
  const at::Tensor out =
      c.inplace() ? self : c.out_or(self.sizes(), [&] { return at::empty(self.sizes(), self.options()); });
  if (out.numel() == 0) return c.finish(out);
  const int64_t R = self.size(-2), C = self.size(-1);
  Launch l;
  const at::Tensor rows = l.scratch({R, 1}, self, at::kLong), cols = l.scratch({1, C}, self, at::kLong);
  for (const auto& [t, n] : {std::pair{rows, R}, std::pair{cols, C}}) {
    ir::Pointwise iota;
    iota.kind = ir::PointwiseKind::kIota;
    iota.compute = hw::DType::kI64;
    iota.out = l.view(t, {n}, {1});
    l.add(iota);
  }
  // Index arithmetic in int64 for integer and bool tensors (a bool causal mask included).
  ir::Expr e(at::isFloatingType(self.scalar_type()) ? checked_device_dtype(self.scalar_type()) : hw::DType::kI64);
  const int32_t x = e.input(ir::Operand::of(l.view(self)));
  const int32_t r = e.input(ir::Operand::of(l.view(rows))), col = e.input(ir::Operand::of(l.view(cols)));
  const int32_t d = e.binary(hw::BinaryFn::kSub, col, r);
  const int32_t keep =
      e.binary(lower ? hw::BinaryFn::kLe : hw::BinaryFn::kGe, d, e.constant(static_cast<double>(diagonal)));
  e.select(keep, x, e.constant(0.0));
  l.add(e.done(l.view(out)));
  if (!run_or_fall_back(l, c)) return;
  c.finish(out);
}

// roll(self, shifts, dims): torch's checks; the copies come from the op library.
void roll_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  const std::vector<int64_t> shifts = c.at(1).toIntVector(), dims = c.at(2).toIntVector();
  TORCH_CHECK(!shifts.empty(), "`shifts` required");
  TORCH_CHECK(!(dims.empty() && shifts.size() != 1) && (dims.empty() || dims.size() == shifts.size()),
              "shifts and dimensions must align. shifts: ", shifts.size(), ", dims:", dims.size());
  for (int64_t d : dims) at::maybe_wrap_dim(d, self.dim());  // torch's error for a bad dim
  if (!device_dtype(self.scalar_type())) return c.fall_back();
  const at::Tensor out = c.out_or(self.sizes(), [&] { return at::empty(self.sizes(), self.options()); });
  if (out.numel() == 0) return c.finish(out);
  // The program must not read what it writes: an out= that overlaps self gets a fresh buffer.
  const at::Tensor target =
      out.is_contiguous() && !out.is_alias_of(self) ? out : at::empty(self.sizes(), self.options());
  Launch l;
  if (!lower_or_fall_back(l, library_call(c, l, {target}, self.scalar_type(), self.scalar_type()), c)) return;
  if (!target.is_same(out)) out.copy_(target);
  c.finish(out);
}

// flip(self, dims): a gather along each flipped dim with the reversed indices, one launch.
void flip_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  if (!device_dtype(self.scalar_type())) return c.fall_back();
  std::vector<int64_t> dims;
  for (int64_t d : c.at(1).toIntVector()) {
    const int64_t w = at::maybe_wrap_dim(d, std::max<int64_t>(self.dim(), 1));
    TORCH_CHECK(std::find(dims.begin(), dims.end(), w) == dims.end(), "flip: dim ", w, " appears multiple times");
    if (self.dim() > 0 && self.size(w) > 1) dims.push_back(w);
  }
  const at::Tensor out = c.out_or(self.sizes(), [&] { return at::empty_like(self); });  // CPU's layout: self's
  if (out.numel() == 0) return c.finish(out);
  if (dims.empty()) return c.finish(out.copy_(self));
  Launch l;
  at::Tensor cur = self.contiguous();
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = dims[i], n = self.size(d);
    const at::Tensor idx = l.scratch({n}, self, at::kLong);
    ir::Pointwise iota;
    iota.kind = ir::PointwiseKind::kIota;
    iota.compute = hw::DType::kI64;
    iota.start = static_cast<double>(n - 1);
    iota.step = -1;
    iota.out = l.view(idx);
    l.add(iota);
    const at::Tensor next =
        i + 1 == dims.size() && out.is_contiguous() ? out : l.scratch(self.sizes(), self, self.scalar_type());
    // [before..., n, after...] as the index op's [batch..., rows, row]: the row is what follows d.
    std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().begin() + d + 1), strides;
    int64_t inner = 1;
    for (int64_t k = d + 1; k < self.dim(); ++k) inner *= self.size(k);
    sizes.push_back(inner);
    for (size_t k = 0; k < sizes.size(); ++k) {
      int64_t s = 1;
      for (size_t j = k + 1; j < sizes.size(); ++j) s *= sizes[j];
      strides.push_back(s);
    }
    std::vector<int64_t> is(sizes.begin(), sizes.begin() + d), it(is.size(), 0);
    is.push_back(n);
    it.push_back(1);
    ir::Op g;
    g.family = ir::Op::Family::kIndex;
    g.index.kind = ir::Index::Kind::kGather;
    g.index.table = l.view(cur, sizes, strides);
    g.index.index = l.view(idx, is, it);
    g.index.rows = l.view(next, sizes, strides);
    l.graph().ops.push_back(g);
    cur = next;
  }
  if (!run_or_fall_back(l, c)) return;
  if (!cur.is_same(out)) out.copy_(cur);
  c.finish(out);
}

const bool g_registered = [] {
  register_boxed({"flip"}, {"", "out"}, &flip_kernel);
  register_boxed({"roll"}, {"", "out"}, &roll_kernel);
  register_boxed({"cat"}, {"", "out"}, &cat_kernel);
  register_boxed(with_inplace({"tril", "triu"}), {"", "out"}, &triangle_kernel);
  return true;
}();

}  // namespace
}  // namespace spyre::backend
