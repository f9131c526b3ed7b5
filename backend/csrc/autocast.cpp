// Autocast for spyre (torch.autocast("spyre", dtype=torch.float16 or torch.bfloat16)). The op
// policies are PyTorch's own lists, the ones CUDA uses (ATen/autocast_mode.h): matmuls, linear
// layers, convolutions and attention run in the autocast dtype; reductions, norms, softmax and
// transcendental functions run in fp32; ops of mixed inputs promote to the widest. Every other op
// falls through to its spyre kernel unchanged.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace {

// The lists name these types unqualified.
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

// Each list entry is (op) or (op, overload); the policy is appended. (The entries of the list of
// ops redispatched with a dtype argument carry their own.)
#define SPYRE_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define SPYRE_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define SPYRE_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define SPYRE_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(SPYRE_LOWER_PRECISION)
  AT_FORALL_FP32(SPYRE_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(SPYRE_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(SPYRE_PROMOTE)
}

}  // namespace
