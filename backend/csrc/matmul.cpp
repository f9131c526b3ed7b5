// Lowering of aten::mm to the Spyre kernel compiler: float32, float16 and bfloat16 run as tile-ISA
// programs on the cores; other dtypes take the CPU fallback (which honours TORCH_SPYRE_CPU_FALLBACK).
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/StringUtil.h>
#include <torch/library.h>

#include <optional>

#include "aten_util.h"
#include "compute.h"
#include "runtime.h"
#include "spyre/compiler/program.h"

namespace spyre::backend {
namespace {

// Row stride of a rows x cols matrix whose columns are unit-stride, or nullopt if it is not one.
std::optional<int64_t> row_stride(const at::Tensor& t) {
  const int64_t rows = t.size(0), cols = t.size(1);
  if (cols > 1 && t.stride(1) != 1) return std::nullopt;
  if (rows == 1) return cols;
  return t.stride(0) >= cols ? std::optional<int64_t>(t.stride(0)) : std::nullopt;
}

at::Tensor& mm_out_fallback(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::mm", "out");
  torch::jit::Stack stack{a, b, out};
  run_on_cpu(op, &stack);
  return out;
}

at::Tensor& mm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, "spyre: mm expects 2-D tensors, got ", a.dim(), "-D and ", b.dim(), "-D");
  TORCH_CHECK(a.size(1) == b.size(0), "mat1 and mat2 shapes cannot be multiplied (", a.size(0), "x", a.size(1), " and ",
              b.size(0), "x", b.size(1), ")");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected m1 and m2 to have the same dtype, but got: ", a.dtype(),
              " != ", b.dtype());
  TORCH_CHECK(a.device() == b.device() && a.device() == out.device(),
              "spyre: mm expects all tensors on one device, got ", a.device(), ", ", b.device(), " and out on ",
              out.device());
  std::optional<hw::DType> type = device_dtype(a.scalar_type());
  if (type != hw::DType::kF32 && type != hw::DType::kF16 && type != hw::DType::kBF16) type = std::nullopt;
  constexpr int64_t kMaxDim = UINT32_MAX;  // the compiler's shapes are 32-bit
  if (!type || out.scalar_type() != a.scalar_type() || a.size(0) > kMaxDim || a.size(1) > kMaxDim ||
      b.size(1) > kMaxDim) {
    return mm_out_fallback(a, b, out);
  }

  const c10::DeviceGuard guard(a.device());
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  if (out.sizes() != c10::IntArrayRef{m, n}) out.resize_({m, n});
  if (m == 0 || n == 0) return out;
  if (k == 0) {
    out.zero_();
    return out;
  }
  const at::Tensor A = row_stride(a) ? a : a.contiguous();
  const at::Tensor B = row_stride(b) ? b : b.contiguous();
  const bool aliased = out.is_alias_of(a) || out.is_alias_of(b);
  at::Tensor C = (!aliased && row_stride(out)) ? out : at::empty({m, n}, a.options());

  compiler::MatmulSpec spec;
  spec.m = static_cast<uint32_t>(m);
  spec.k = static_cast<uint32_t>(k);
  spec.n = static_cast<uint32_t>(n);
  spec.in = spec.out = *type;
  spec.lda = static_cast<uint64_t>(*row_stride(A));
  spec.ldb = static_cast<uint64_t>(*row_stride(B));
  spec.ldc = static_cast<uint64_t>(*row_stride(C));
  DeviceRuntime& rt = DeviceRuntime::get(a.device().index());
  const std::string key =
      c10::str("mm/", static_cast<int>(*type), "/", m, "x", k, "x", n, "/", spec.lda, ",", spec.ldb, ",", spec.ldc);
  rt.launch(
      key, [&] { return compiler::compile_matmul(spec, rt.target()); },
      {device_addr(A), device_addr(B), device_addr(C)}, "aten::mm");
  if (!C.is_same(out)) out.copy_(C);
  return out;
}

at::Tensor mm(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor out = at::empty({0}, a.options());
  return mm_out(a, b, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mm", TORCH_FN(mm));
  m.impl("mm.out", TORCH_FN(mm_out));
}

}  // namespace spyre::backend
