// scaled_dot_product_attention on the device. Torch asks each backend which SDPA kernel to use
// (_fused_sdp_choice); spyre answers "overrideable" for what its kernel takes, grouped-query
// attention included, and "math" (torch's decomposition into ops that are native here) for the
// rest: dropout, unequal head counts without enable_gqa, or shapes other than [batch, heads,
// length, dim].
//
// The kernel (_scaled_dot_product_fused_attention_overrideable) is one launch of the op library's
// lowering (backend/compiler/src/ops/attention.cpp), which torch.compile's programs use too: the
// scores S = scale * Q K^T in fp32, the causal mask or the bias, a row softmax kept as its
// logsumexp for the backward, and O = P V. Its backward recomputes P from the logsumexp and runs
// the five products of the attention gradient, also one launch.
#include <ATen/ATen.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_transformer_encoder_layer_fwd_native.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>

#include "boxed.h"
#include "compute.h"

namespace spyre::backend {
namespace {

// True when the device kernel takes these arguments (the rest go to torch's math path).
// `gqa`: query heads may be a multiple of the key and value heads (grouped-query attention: query
// head h attends with key head h / (query heads / key heads)).
bool kernel_takes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& mask,
                  double dropout_p, bool is_causal, bool gqa) {
  if (dropout_p != 0.0 || q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return false;
  const at::ScalarType t = q.scalar_type();
  if (!at::isFloatingType(t) || !device_dtype(t) || k.scalar_type() != t || v.scalar_type() != t) return false;
  if (!q.is_privateuseone() || !k.is_privateuseone() || !v.is_privateuseone()) return false;
  if (q.size(0) != k.size(0) || q.size(0) != v.size(0) || k.size(1) != v.size(1) || k.size(2) != v.size(2) ||
      q.size(3) != k.size(3) || k.size(1) == 0) {
    return false;
  }
  if (q.size(1) != k.size(1) && !(gqa && q.size(1) % k.size(1) == 0)) return false;
  if (mask && mask->defined()) {
    if (is_causal || mask->dim() > 4 || !device_dtype(mask->scalar_type())) return false;
    const std::vector<int64_t> scores = {q.size(0), q.size(1), q.size(2), k.size(2)};
    if (!at::is_expandable_to(mask->sizes(), scores)) return false;
  }
  return true;
}

int64_t choose(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& mask,
               double dropout_p, bool is_causal, std::optional<double> /*scale*/, bool enable_gqa) {
  const at::Context& ctx = at::globalContext();
  if (ctx.userEnabledOverrideableSDP() && kernel_takes(q, k, v, mask, dropout_p, is_causal, enable_gqa)) {
    return static_cast<int64_t>(at::SDPBackend::overrideable);
  }
  return static_cast<int64_t>(ctx.userEnabledMathSDP() ? at::SDPBackend::math : at::SDPBackend::error);
}

int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  return choose(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa);
}

// A tensor of q's shape with last dim `e`, its dims in the order of q's strides.
at::Tensor like_query(const at::Tensor& q, int64_t e) {
  if (q.size(3) == e) return at::empty_like(q);
  std::vector<int64_t> order = {0, 1, 2, 3}, sizes = q.sizes().vec(), strides(4);
  sizes[3] = e;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return q.stride(a) > q.stride(b); });
  int64_t stride = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    strides[*it] = stride;
    stride *= sizes[*it];
  }
  return at::empty_strided(sizes, strides, q.options());
}

// (output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, philox_seed, philox_offset, debug_attn_mask)
void attention_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor q = c.at(0).toTensor(), k = c.at(1).toTensor(), v = c.at(2).toTensor();
  const c10::IValue* bias_arg = c.get("attn_bias");
  const at::Tensor bias = bias_arg ? bias_arg->toTensor() : at::Tensor();
  const double dropout_p = c.get("dropout_p")->toDouble();
  const bool is_causal = c.get("is_causal")->toBool();
  TORCH_CHECK(kernel_takes(q, k, v, bias.defined() ? std::optional(bias) : std::nullopt, dropout_p, is_causal, true),
              "spyre: _scaled_dot_product_fused_attention_overrideable takes [batch, heads, length, dim] query, key "
              "and value of one float type, no dropout, and a bias or causal masking, not both");
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), S = k.size(2);
  // The layouts torch's meta function promises (torch.compile plans views on them): the output
  // is laid out as the query is, the seed and offset are 0-dim.
  at::Tensor out = like_query(q, v.size(3));
  at::Tensor lse = at::empty({B, H, L}, q.options().dtype(at::kFloat));
  const at::Tensor none = at::empty({}, q.options().dtype(at::kLong));
  Launch l;
  if (!try_lower(l, library_call(c, l, {out, lse}, q.scalar_type(), q.scalar_type()), c)) {
    TORCH_CHECK(false, "spyre: the attention kernel did not compile");
  }
  c.finish(std::initializer_list<c10::IValue>{out, lse, at::Tensor(), at::Tensor(), c10::SymInt(L), c10::SymInt(S),
                                              none, none, at::empty({0}, q.options())});
}

// (grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q, cum_seq_k,
//  max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, *, scale) -> (dq, dk, dv, dbias).
void attention_backward_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor q = c.at(1).toTensor(), k = c.at(2).toTensor(), v = c.at(3).toTensor();
  const c10::IValue* bias_arg = c.get("attn_bias");
  const at::Tensor bias = bias_arg ? bias_arg->toTensor() : at::Tensor();
  const std::vector<bool> mask = c.at(5).toBoolList().vec();
  TORCH_CHECK(c.get("dropout_p")->toDouble() == 0.0, "spyre: the attention kernel has no dropout");
  // Laid out as the inputs are, as torch's meta function says.
  const at::Tensor dq = at::empty_like(q), dk = at::empty_like(k), dv = at::empty_like(v);
  const at::Tensor dbias =
      mask[3] && bias.defined() ? at::empty_like(bias, at::MemoryFormat::Contiguous) : at::Tensor();
  Launch l;
  if (!try_lower(l, library_call(c, l, {dq, dk, dv, dbias}, q.scalar_type(), q.scalar_type()), c)) {
    TORCH_CHECK(false, "spyre: the attention backward did not compile");
  }
  c.finish({dq, dk, dv, dbias});
}

const bool g_registered = [] {
  register_boxed({"_scaled_dot_product_fused_attention_overrideable"}, {""}, &attention_kernel);
  register_boxed({"_scaled_dot_product_fused_attention_overrideable_backward"}, {""}, &attention_backward_kernel);
  return true;
}();

}  // namespace

// _native_multi_head_attention: nn.MultiheadAttention's fast path (and so the eval fast path of
// nn.TransformerEncoderLayer), as torch's own kernels compute it, out of native ops: the input
// projections, scaled dot-product attention (the device's kernel when the weights are not asked
// for), the output projection. `mask` is additive (float) or says where not to attend (bool), of
// shape [L, S] (mask_type 0), [B, S] (key padding, 1) or broadcastable to [B, H, L, S] (2).
std::tuple<at::Tensor, at::Tensor> native_multi_head_attention(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, int64_t embed_dim, int64_t num_head,
    const at::Tensor& qkv_weight, const at::Tensor& qkv_bias, const at::Tensor& proj_weight,
    const at::Tensor& proj_bias, const std::optional<at::Tensor>& mask, bool need_weights, bool average_attn_weights,
    std::optional<int64_t> mask_type) {
  TORCH_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3,
              "_native_multi_head_attention: expected 3-d "
              "batch-first query, key and value");
  TORCH_CHECK(embed_dim % num_head == 0, "_native_multi_head_attention: embed_dim must divide into the heads");
  const int64_t B = query.size(0), L = query.size(1), S = key.size(1), D = embed_dim / num_head;
  at::Tensor q, k, v;
  if (query.is_same(key) && key.is_same(value)) {
    const std::vector<at::Tensor> qkv = at::linear(query, qkv_weight, qkv_bias).chunk(3, -1);
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    const std::vector<at::Tensor> w = qkv_weight.chunk(3, 0), b = qkv_bias.chunk(3, 0);
    q = at::linear(query, w[0], b[0]), k = at::linear(key, w[1], b[1]), v = at::linear(value, w[2], b[2]);
  }
  const auto heads = [&](const at::Tensor& t, int64_t n) { return t.view({B, n, num_head, D}).transpose(1, 2); };
  q = heads(q, L), k = heads(k, S), v = heads(v, S);
  at::Tensor additive;  // [.., L, S], -inf where a query may not attend
  if (mask && mask->defined()) {
    at::Tensor m = *mask;
    if (mask_type == 1) m = m.view({B, 1, 1, S});
    additive = m.scalar_type() == at::kBool ? at::zeros(m.sizes(), q.options()).masked_fill_(m, -INFINITY)
                                            : m.to(q.scalar_type());
  }
  at::Tensor out, weights;
  if (!need_weights) {
    out = at::scaled_dot_product_attention(q, k, v, additive.defined() ? std::optional(additive) : std::nullopt);
  } else {
    at::Tensor scores = at::matmul(q, k.transpose(-2, -1)).mul_(1.0 / std::sqrt(static_cast<double>(D)));
    if (additive.defined()) scores = scores + additive;
    weights = at::softmax(scores, -1);
    out = at::matmul(weights, v);
    if (average_attn_weights) weights = weights.mean(1);
  }
  out = at::linear(out.transpose(1, 2).reshape({B, L, embed_dim}), proj_weight, proj_bias);
  return {out, weights.defined() ? weights : at::empty({0}, query.options())};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", TORCH_FN(fused_sdp_choice));
  m.impl("_native_multi_head_attention", TORCH_FN(native_multi_head_attention));
  // nn.TransformerEncoderLayer's eval fast path: torch's own composition, device-generic, over the
  // native ops above and layer norm, linear and the activations.
  m.impl("_transformer_encoder_layer_fwd", TORCH_FN(at::native::transformer_encoder_layer_forward));
}

}  // namespace spyre::backend

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &spyre::backend::choose);
}  // namespace at::native
