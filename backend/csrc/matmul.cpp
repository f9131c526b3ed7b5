// The matmul family on the device, registered by table: mm, bmm, addmm, baddbmm, addbmm, mv, addmv and dot (and
// through them torch's matmul, linear, einsum and @), in float32, float16 and bfloat16 with fp32
// accumulation. Here are torch's checks and where the result goes; the IR (PT-array tiles with the
// scale and the bias in the epilogue) comes from the op library (backend/compiler/src/ops/matmul.cpp).
// Other dtypes take the CPU fallback (which honours TORCH_SPYRE_CPU_FALLBACK).
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <map>
#include <stdexcept>

#include "boxed.h"
#include "compute.h"

namespace spyre::backend {
namespace {

struct MatmulRow {
  int dims;          // of the first matrix operand: 2 (mm), 3 (bmm), 1 for mv's vector and dot
  bool bias;         // the first argument is the bias (addmm, baddbmm)
  bool vector_left;  // dot: the left operand is a vector too
};

const std::map<std::string, MatmulRow, std::less<>> kMatmul = {
    {"mm", {2, false, false}},     {"bmm", {3, false, false}},
    {"addmm", {2, true, false}},   {"_addmm_activation", {2, true, false}},
    {"baddbmm", {3, true, false}}, {"mv", {1, false, false}},
    {"addbmm", {3, true, false}},  {"addmv", {1, true, false}},
    {"dot", {1, false, true}},
};

void matmul_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const MatmulRow& row = kMatmul.at(c.base());
  const size_t first = row.bias ? 1 : 0;
  const at::Tensor a = c.at(first).toTensor(), b = c.at(first + 1).toTensor();
  const at::Tensor bias = row.bias ? c.at(0).toTensor() : at::Tensor();
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected m1 and m2 to have the same dtype, but got: ", a.dtype(),
              " != ", b.dtype());
  TORCH_CHECK(b.is_privateuseone() && (!bias.defined() || bias.is_privateuseone()),
              "Expected all tensors to be on the same device, but found at least two devices");
  // Shapes as [batch, M, K] @ [batch, K, N]; vectors become one-row or one-column matrices.
  std::vector<int64_t> out_sizes;
  if (row.dims == 1 && !row.vector_left) {  // mv, addmv
    TORCH_CHECK(a.dim() == 2 && b.dim() == 1, "vector + matrix @ vector expected, got ", a.dim(), ", ", b.dim());
    TORCH_CHECK(a.size(1) == b.size(0), "size mismatch, got input (", a.size(0), "), mat (", a.size(0), "x", a.size(1),
                "), vec (", b.size(0), ")");
    out_sizes = {a.size(0)};
  } else if (row.vector_left) {
    TORCH_CHECK(a.dim() == 1 && b.dim() == 1, "1D tensors expected, but got ", a.dim(), "D and ", b.dim(), "D tensors");
    TORCH_CHECK(a.size(0) == b.size(0), "inconsistent tensor size, expected tensor [", a.size(0), "] and src [",
                b.size(0), "] to have the same number of elements, but got ", a.size(0), " and ", b.size(0),
                " elements respectively");
  } else {
    TORCH_CHECK(a.dim() == row.dims && b.dim() == row.dims, c.base(), ": expected ", row.dims, "-D tensors, got ",
                a.dim(), "-D and ", b.dim(), "-D");
    TORCH_CHECK(a.size(-1) == b.size(-2), "mat1 and mat2 shapes cannot be multiplied (", a.size(-2), "x", a.size(-1),
                " and ", b.size(-2), "x", b.size(-1), ")");
    if (row.dims == 3) {
      TORCH_CHECK(a.size(0) == b.size(0), "batch1 and batch2 must have same number of batches, got ", a.size(0),
                  " and ", b.size(0));
      out_sizes = {a.size(0), a.size(1), b.size(2)};
      if (c.base() == "addbmm") out_sizes = {a.size(1), b.size(2)};  // summed over the batches
    } else {
      out_sizes = {a.size(0), b.size(1)};
    }
  }
  const at::ScalarType type = a.scalar_type();
  if (type != at::kFloat && type != at::kHalf && type != at::kBFloat16) return c.fall_back();
  if (bias.defined()) {
    TORCH_CHECK(bias.scalar_type() == type, c.base(), ": expected self and mat2 to have the same dtype");
    TORCH_CHECK(at::infer_size(bias.sizes(), out_sizes) == c10::IntArrayRef(out_sizes), c.base(),
                ": the bias of shape ", bias.sizes(), " does not broadcast to ", out_sizes);
  }

  at::Tensor out;
  if (c.inplace() && c.base() == "addbmm" && bias.sizes() != c10::IntArrayRef(out_sizes)) {
    out = bias;  // CPU's addbmm_ resizes a self that only broadcasts: computed aside, then resized
    at::Tensor result = at::empty(out_sizes, a.options());
    Launch l;
    if (!lower_or_fall_back(l, library_call(c, l, {result}, type, type), c)) return;
    at::native::resize_output(out, out_sizes);
    return c.finish(out.copy_(result));
  }
  if (c.inplace()) {
    out = bias;
    TORCH_CHECK(out.sizes() == c10::IntArrayRef(out_sizes), c.base(), "_: self must have the output's shape ",
                out_sizes);
  } else if (std::optional<at::Tensor> o = c.out()) {
    out = *o;
    TORCH_CHECK(out.scalar_type() == type, c.base(), ": expected out to be ", type, ", got ", out.scalar_type());
    at::native::resize_output(out, out_sizes);
  } else {
    out = at::empty(out_sizes, a.options());
  }
  if (out.numel() == 0) return c.finish(out);
  // The program must not read what it writes (other than the bias of an in-place addmm_, tile by
  // tile): an out= that overlaps an operand gets a fresh buffer, copied into it after.
  const bool overlaps =
      out.is_alias_of(a) || out.is_alias_of(b) || (bias.defined() && !out.is_same(bias) && out.is_alias_of(bias));
  const at::Tensor target = overlaps ? at::empty(out_sizes, a.options()) : out;
  Launch l;
  if (!lower_or_fall_back(l, library_call(c, l, {target}, type, type), c)) return;
  if (overlaps) out.copy_(target);
  c.finish(out);
}

// _grouped_mm(self, mat2, offs, bias, out_dtype) (torch.nn.functional.grouped_mm: the default
// expert path of transformers' mixtures of experts). The offsets decide which rows, columns or
// K range each group takes, so they are read back (one synchronization, as a host must to size
// per-group work); the op library then runs every group's matmul in one launch.
void grouped_mm_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor a = c.at(0).toTensor(), b = c.at(1).toTensor();
  const c10::IValue* offs_arg = c.get("offs");
  const at::Tensor offs = offs_arg ? offs_arg->toTensor() : at::Tensor();
  const c10::IValue* dtype = c.get("out_dtype");
  TORCH_CHECK(a.dim() >= 2 && a.dim() <= 3 && b.dim() >= 2 && b.dim() <= 3, "grouped_mm: 2-d or 3-d operands, got ",
              a.dim(), "-d and ", b.dim(), "-d");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "grouped_mm: operands of one dtype, got ", a.scalar_type(), " and ",
              b.scalar_type());
  TORCH_CHECK((a.dim() == 3 && b.dim() == 3) == !offs.defined(), "grouped_mm: offs is ",
              offs.defined() ? "given" : "missing", " for ", a.dim(), "-d x ", b.dim(), "-d operands");
  const at::ScalarType type = a.scalar_type();
  if (!at::isFloatingType(type) || !device_dtype(type) || c.get("bias") || (dtype && dtype->toScalarType() != type)) {
    return c.fall_back();
  }
  const int64_t K = a.size(-1);
  TORCH_CHECK(b.size(-2) == K, "grouped_mm: contraction dims differ (", K, " and ", b.size(-2), ")");
  std::vector<int64_t> ends;
  if (offs.defined()) {
    TORCH_CHECK(offs.dim() == 1 && (offs.scalar_type() == at::kInt || offs.scalar_type() == at::kLong),
                "grouped_mm: offs must be a 1-d int32 tensor");
    const at::Tensor host = offs.to(at::kCPU, at::kLong);
    ends.assign(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel());
  }
  const int64_t groups = offs.defined() ? offs.numel() : a.size(0);
  std::vector<int64_t> shape;
  if (a.dim() == 2 && b.dim() == 3) shape = {a.size(0), b.size(2)};
  if (a.dim() == 3 && b.dim() == 2) shape = {a.size(1), b.size(1)};
  if (a.dim() == 2 && b.dim() == 2) shape = {groups, a.size(0), b.size(1)};
  if (a.dim() == 3 && b.dim() == 3) shape = {a.size(0), a.size(1), b.size(2)};
  const int64_t jagged = a.dim() == 2 && b.dim() == 3 ? a.size(0) : (b.dim() == 2 && a.dim() == 3 ? b.size(1) : K);
  for (size_t g = 0; g < ends.size(); ++g) {
    TORCH_CHECK(ends[g] >= (g ? ends[g - 1] : 0) && ends[g] <= jagged, "grouped_mm: offs must rise within [0, ", jagged,
                "], got ", offs.cpu());
  }
  TORCH_CHECK(b.dim() == 2 || b.size(0) == groups, "grouped_mm: ", groups, " groups but mat2 has ", b.size(0));
  const at::Tensor out = at::empty(shape, a.options());
  Launch l;
  compiler::ops::Call call = library_call(c, l, {out}, type, type);
  call.args["offs"] = compiler::ops::Arg::list(ends);
  if (lower_or_fall_back(l, call, c)) c.finish(out);
}

const bool g_registered = [] {
  register_boxed({"_grouped_mm"}, {""}, &grouped_mm_kernel);
  register_boxed({"mm", "bmm", "mv", "dot"}, {"", "out"}, &matmul_kernel);
  register_boxed(with_inplace({"addmm", "baddbmm", "addbmm", "addmv"}), {"", "out"}, &matmul_kernel);
  register_boxed({"_addmm_activation"}, {"", "out"}, &matmul_kernel);
  return true;
}();

}  // namespace
}  // namespace spyre::backend
