// The matmul family on the device, registered by table: mm, bmm, addmm, baddbmm, mv and dot (and
// through them torch's matmul, linear, einsum and @), in float32, float16 and bfloat16 with fp32
// accumulation. Each call is one compiled program: PT-array tiles with the scale and the bias in
// the epilogue. Other dtypes take the CPU fallback (which honours TORCH_SPYRE_CPU_FALLBACK).
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
    {"mm", {2, false, false}},     {"bmm", {3, false, false}}, {"addmm", {2, true, false}},
    {"baddbmm", {3, true, false}}, {"mv", {1, false, false}},  {"dot", {1, false, true}},
};

void matmul_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const MatmulRow& row = kMatmul.at(c.base());
  const size_t first = row.bias ? 1 : 0;
  // The PT array reads an operand tile along one contiguous dim; one with none is packed first.
  const auto packed = [](const at::Tensor& t) {
    const bool no_unit_dim = t.dim() >= 2 && t.size(-1) > 1 && t.size(-2) > 1 && t.stride(-1) != 1 && t.stride(-2) != 1;
    return no_unit_dim ? t.contiguous() : t;
  };
  at::Tensor a = packed(c.at(first).toTensor()), b = packed(c.at(first + 1).toTensor());
  const std::optional<at::Tensor> bias = row.bias ? std::optional<at::Tensor>(c.at(0).toTensor()) : std::nullopt;
  const double beta = c.scalar("beta", 1.0);
  const double alpha = c.scalar("alpha", 1.0);
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected m1 and m2 to have the same dtype, but got: ", a.dtype(),
              " != ", b.dtype());
  TORCH_CHECK(b.is_privateuseone() && (!bias || bias->is_privateuseone()),
              "Expected all tensors to be on the same device, but found at least two devices");
  // Shapes as [batch, M, K] @ [batch, K, N]; vectors become one-row or one-column matrices.
  std::vector<int64_t> out_sizes;
  if (c.base() == "mv") {
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
    } else {
      out_sizes = {a.size(0), b.size(1)};
    }
  }
  const at::ScalarType type = a.scalar_type();
  if (type != at::kFloat && type != at::kHalf && type != at::kBFloat16) return c.fall_back();
  if (bias) {
    TORCH_CHECK(bias->scalar_type() == type, c.base(), ": expected self and mat2 to have the same dtype");
    TORCH_CHECK(at::infer_size(bias->sizes(), out_sizes) == c10::IntArrayRef(out_sizes), c.base(),
                ": the bias of shape ", bias->sizes(), " does not broadcast to ", out_sizes);
  }

  at::Tensor out;
  if (c.inplace()) {
    out = *bias;
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
  const int64_t K = a.size(-1);
  const bool use_bias = bias && beta != 0.0;
  if (K == 0) {  // no products: the result is beta * bias, or zeros
    if (use_bias) {
      out.copy_(bias->expand(out_sizes));
      if (beta != 1.0) out.mul_(beta);
    } else {
      out.zero_();
    }
    return c.finish(out);
  }
  // The compiler writes rows of the output contiguously and must not read what it writes (other
  // than the bias of an in-place addmm_, tile by tile); otherwise it works on a fresh buffer.
  const bool direct = (out.dim() == 0 || out.size(-1) == 1 || out.stride(-1) == 1) && !out.is_alias_of(a) &&
                      !out.is_alias_of(b) && (!bias || out.is_same(*bias) || !out.is_alias_of(*bias));
  const at::Tensor target = direct ? out : at::empty(out_sizes, a.options());

  Launch l;
  ir::Matmul mm;
  mm.compute = *device_dtype(type);
  mm.alpha = alpha;
  mm.beta = beta;
  if (c.base() == "mv") {
    mm.a = l.view(a);
    mm.b = l.view(b, {b.size(0), 1}, {b.stride(0), 1});
    mm.out = l.view(target, {a.size(0), 1}, {target.stride(0), 1});
  } else if (row.vector_left) {
    mm.a = l.view(a, {1, K}, {K * a.stride(0), a.stride(0)});
    mm.b = l.view(b, {K, 1}, {b.stride(0), 1});
    mm.out = l.view(target, {1, 1}, {1, 1});
  } else {
    mm.a = l.view(a);
    mm.b = l.view(b);
    mm.out = l.view(target);
  }
  if (use_bias) mm.bias = l.view(*bias);  // addmm and baddbmm: broadcast by the compiler
  l.matmul(mm);
  if (!run_or_fall_back(l, c)) return;
  if (!direct) out.copy_(target);
  c.finish(out);
}

const bool g_registered = [] {
  register_boxed({"mm", "bmm", "mv", "dot"}, {"", "out"}, &matmul_kernel);
  register_boxed(with_inplace({"addmm", "baddbmm"}), {"", "out"}, &matmul_kernel);
  return true;
}();

}  // namespace
}  // namespace spyre::backend
