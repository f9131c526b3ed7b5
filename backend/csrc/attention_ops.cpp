// scaled_dot_product_attention on the device. Torch asks each backend which SDPA kernel to use
// (_fused_sdp_choice); spyre answers "overrideable" for what its kernel takes, grouped-query
// attention included, and "math" (torch's decomposition into ops that are native here) for the
// rest: dropout, unequal head counts without enable_gqa, or shapes other than [batch, heads,
// length, dim].
//
// The kernel (_scaled_dot_product_fused_attention_overrideable) is one launch: the scores
// S = scale * Q K^T in fp32, the causal mask or the additive bias, a row softmax kept as its
// logsumexp for the backward, and O = P V. Its backward recomputes P from the logsumexp and runs
// the five products of the attention gradient in two launches (16 arguments each at most).
#include <ATen/ATen.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>

#include "boxed.h"
#include "compute.h"

namespace spyre::backend {
namespace {

using hw::BinaryFn;
using hw::UnaryFn;
using Refs = std::vector<int32_t>;

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

void matmul(Launch& l, uint32_t a, uint32_t b, uint32_t out, double alpha, const at::Tensor& like) {
  ir::Matmul m;
  m.a = a;
  m.b = b;
  m.out = out;
  m.alpha = alpha;
  m.compute = *device_dtype(like.scalar_type());
  l.matmul(m);
}

// A [B, H, rows, cols] tensor as [B, H / g, g, rows, cols] (the query heads of each key head
// together), or with `repeat`, a [B, Hkv, rows, cols] one as [B, Hkv, g, rows, cols] with each
// head repeated g times; with `swap`, its last two dims swapped. Products over these 5-d views
// pair every query head with its key head.
uint32_t heads(Launch& l, const at::Tensor& t, int64_t g, bool repeat, bool swap = false) {
  const int64_t r = swap ? 3 : 2, c = swap ? 2 : 3;
  const int64_t kv = repeat ? t.size(1) : t.size(1) / g;
  return l.view(
      t, {t.size(0), kv, g, t.size(r), t.size(c)},
      {t.stride(0), repeat ? t.stride(1) : g * t.stride(1), repeat ? 0 : t.stride(1), t.stride(r), t.stride(c)});
}

// out = sum over each key head's g query heads of `full` [B, H, X, Y] into [B, H / g, X, Y].
void sum_groups(Launch& l, const at::Tensor& full, const at::Tensor& out, int64_t g) {
  reduce(l, hw::ReduceFn::kSum, heads(l, full, g, false),
         l.view(out, {out.size(0), out.size(1), 1, out.size(2), out.size(3)},
                {out.stride(0), out.stride(1), 0, out.stride(2), out.stride(3)}),
         {2});
}

// The scores [B, H, L, S] in fp32 (`s`): scale * Q K^T, then the causal mask (keys after the query's
// position, counted from the top left as torch does, are -inf) or the additive bias.
void scores(Launch& l, const at::Tensor& q, const at::Tensor& k, const at::Tensor& bias, bool is_causal, double scale,
            const at::Tensor& s) {
  const uint32_t sv = l.view(s);
  const int64_t g = q.size(1) / k.size(1);
  matmul(l, heads(l, q, g, false), heads(l, k, g, true, true), heads(l, s, g, false), scale, q);
  const int64_t L = s.size(2), S = s.size(3);
  if (is_causal) {  // key j is masked for query i when j > i (top-left aligned, as torch)
    const at::Tensor rows = l.scratch({L}, s), cols = l.scratch({S}, s);  // 0, 1, 2, ... in fp32
    for (const at::Tensor& t : {rows, cols}) {
      ir::Pointwise iota;
      iota.kind = ir::PointwiseKind::kIota;
      iota.compute = hw::DType::kF32;
      iota.out = l.view(t);
      l.pointwise(iota);
    }
    ir::Expr e(hw::DType::kF32);
    const int32_t x = e.input(ir::Operand::of(sv));
    const int32_t row = e.input(ir::Operand::of(l.view(rows, s.sizes(), {0, 0, 1, 0})));
    const int32_t col = e.input(ir::Operand::of(l.view(cols, s.sizes(), {0, 0, 0, 1})));
    e.select(e.binary(BinaryFn::kGt, col, row), e.constant(-INFINITY), x);
    l.pointwise(e.done(sv));
  } else if (bias.defined()) {
    const at::Tensor b = bias.expand(s.sizes());
    if (b.scalar_type() == at::kBool) {  // true keeps the score
      expr(l, {l.view(b), sv}, sv, [](ir::Expr& e, const Refs& in) { e.select(in[0], in[1], e.constant(-INFINITY)); });
    } else {
      expr(l, {sv, l.view(b)}, sv, [](ir::Expr& e, const Refs& in) { e.binary(BinaryFn::kAdd, in[0], in[1]); });
    }
  }
}

double scale_of(const BoxedCall& c, const at::Tensor& q) {
  const c10::IValue* s = c.get("scale");
  return s ? s->toDouble() : 1.0 / std::sqrt(static_cast<double>(q.size(3)));
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
  const auto finish = [&] {
    c.finish(std::initializer_list<c10::IValue>{out, lse, at::Tensor(), at::Tensor(), c10::SymInt(L), c10::SymInt(S),
                                                none, none, at::empty({0}, q.options())});
  };
  if (out.numel() == 0 || S == 0) {  // no keys: torch's math path gives NaN rows; keep its shape rules
    if (out.numel() > 0) out.fill_(std::numeric_limits<double>::quiet_NaN());
    lse.fill_(-INFINITY);
    return finish();
  }
  Launch l;
  const at::Tensor s = l.scratch({B, H, L, S}, q);
  scores(l, q, k, bias, is_causal, scale_of(c, q), s);
  const uint32_t sv = l.view(s), m = l.view(l.scratch({B, H, L, 1}, q)), sum = l.view(l.scratch({B, H, L, 1}, q));
  reduce(l, hw::ReduceFn::kMax, sv, m, {3});
  // exp(S - max); a row with every key masked has max -inf and takes 0 instead, so its weights are
  // 0 and its output 0, as torch's math path gives (its softmax is the safe one).
  expr(l, {m}, m, [](ir::Expr& e, const Refs& in) {
    e.select(e.binary(BinaryFn::kEq, in[0], e.constant(-INFINITY)), e.constant(0.0), in[0]);
  });
  expr(l, {sv, m}, sv,
       [](ir::Expr& e, const Refs& in) { e.unary(UnaryFn::kExp, e.binary(BinaryFn::kSub, in[0], in[1])); });
  reduce(l, hw::ReduceFn::kSum, sv, sum, {3});
  const at::Tensor p_tensor = q.scalar_type() == at::kFloat ? s : l.scratch({B, H, L, S}, q, q.scalar_type());
  const uint32_t p = l.view(p_tensor);
  expr(l, {sv, sum}, p, [](ir::Expr& e, const Refs& in) {
    e.select(e.binary(BinaryFn::kGt, in[1], e.constant(0.0)), e.binary(BinaryFn::kDiv, in[0], in[1]), e.constant(0.0));
  });
  const int64_t g = H / k.size(1);
  const at::Tensor pt = q.scalar_type() == at::kFloat ? s : p_tensor;
  matmul(l, heads(l, pt, g, false), heads(l, v, g, true), heads(l, out, g, false), 1.0, v);
  expr(l, {m, sum}, l.view(lse.view({B, H, L, 1})),
       [](ir::Expr& e, const Refs& in) { e.binary(BinaryFn::kAdd, in[0], e.unary(UnaryFn::kLog, in[1])); });
  l.run(c.name());
  finish();
}

// (grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q, cum_seq_k,
//  max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, *, scale) -> (dq, dk, dv, dbias):
//   P = exp(S - logsumexp);  dV = P^T dO;  dP = dO V^T;  D = rowsum(dO * O);
//   dS = P * (dP - D);  dQ = scale * dS K;  dK = scale * dS^T Q;  dbias = dS summed to the bias's shape.
void attention_backward_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor go = c.at(0).toTensor(), q = c.at(1).toTensor(), k = c.at(2).toTensor(), v = c.at(3).toTensor();
  const c10::IValue* bias_arg = c.get("attn_bias");
  const at::Tensor bias = bias_arg ? bias_arg->toTensor() : at::Tensor();
  const std::vector<bool> mask = c.at(5).toBoolList().vec();
  const at::Tensor o = c.at(6).toTensor(), lse = c.at(7).toTensor();
  const bool is_causal = c.get("is_causal")->toBool();
  TORCH_CHECK(c.get("dropout_p")->toDouble() == 0.0, "spyre: the attention kernel has no dropout");
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), S = k.size(2), g = H / k.size(1);
  const double scale = scale_of(c, q);
  at::Tensor dq = at::zeros_like(q);  // laid out as the inputs are, as torch's meta function says
  at::Tensor dk = at::zeros_like(k);
  at::Tensor dv = at::zeros_like(v);
  at::Tensor dbias = mask[3] && bias.defined() ? at::zeros_like(bias, at::MemoryFormat::Contiguous) : at::Tensor();
  if (go.numel() == 0 || S == 0) return c.finish({dq, dk, dv, dbias});
  const bool f32 = q.scalar_type() == at::kFloat;
  // P and dS in fp32, and in the operands' type for the products (the same tensors for fp32).
  const at::Tensor p = at::empty({B, H, L, S}, q.options().dtype(at::kFloat));
  const at::Tensor ds = at::empty({B, H, L, S}, q.options().dtype(at::kFloat));
  const at::Tensor pc = f32 ? p : at::empty({B, H, L, S}, q.options());
  const at::Tensor dsc = f32 ? ds : at::empty({B, H, L, S}, q.options());
  {
    Launch l;
    scores(l, q, k, bias, is_causal, scale, p);
    const uint32_t pv = l.view(p), lv = l.view(lse.view({B, H, L, 1}));
    expr(l, {pv, lv}, pv, [](ir::Expr& e, const Refs& in) {  // a row with every key masked: 0
      e.select(e.binary(BinaryFn::kEq, in[1], e.constant(-INFINITY)), e.constant(0.0),
               e.unary(UnaryFn::kExp, e.binary(BinaryFn::kSub, in[0], in[1])));
    });
    if (!f32) expr(l, {pv}, l.view(pc), [](ir::Expr& e, const Refs& in) { e.unary(UnaryFn::kCopy, in[0]); });
    if (g == 1) {
      matmul(l, heads(l, pc, 1, false, true), heads(l, go, 1, false), heads(l, dv, 1, false), 1.0, go);
    } else {  // each query head's share, then the sum over each key head's group
      const at::Tensor full = l.scratch({B, H, S, v.size(3)}, v);
      matmul(l, heads(l, pc, g, false, true), heads(l, go, g, false), heads(l, full, g, false), 1.0, go);
      sum_groups(l, full, dv, g);
    }
    const uint32_t dsv = l.view(ds);
    matmul(l, heads(l, go, g, false), heads(l, v, g, true, true), heads(l, ds, g, false), 1.0, go);
    const at::Tensor prod = l.scratch(o.sizes(), o);
    const uint32_t d = l.view(l.scratch({B, H, L, 1}, o));
    expr(l, {l.view(go), l.view(o)}, l.view(prod),
         [](ir::Expr& e, const Refs& in) { e.binary(BinaryFn::kMul, in[0], in[1]); });
    reduce(l, hw::ReduceFn::kSum, l.view(prod), d, {3});
    expr(l, {pv, dsv, d}, dsv,
         [](ir::Expr& e, const Refs& in) { e.binary(BinaryFn::kMul, in[0], e.binary(BinaryFn::kSub, in[1], in[2])); });
    if (!f32) expr(l, {dsv}, l.view(dsc), [](ir::Expr& e, const Refs& in) { e.unary(UnaryFn::kCopy, in[0]); });
    if (!try_run(l, c)) TORCH_CHECK(false, "spyre: the attention backward did not compile");
  }
  Launch l;
  matmul(l, heads(l, dsc, g, false), heads(l, k, g, true), heads(l, dq, g, false), scale, q);
  if (g == 1) {
    matmul(l, heads(l, dsc, 1, false, true), heads(l, q, 1, false), heads(l, dk, 1, false), scale, q);
  } else {
    const at::Tensor full = l.scratch({B, H, S, k.size(3)}, k);
    matmul(l, heads(l, dsc, g, false, true), heads(l, q, g, false), heads(l, full, g, false), scale, q);
    sum_groups(l, full, dk, g);
  }
  if (dbias.defined()) {  // dS summed over the dims the bias broadcasts along
    const at::Tensor db = dbias.expand({B, H, L, S});
    std::vector<int64_t> dims, kept = {B, H, L, S};
    for (int64_t dim = 0; dim < 4; ++dim) {
      if (db.stride(dim) == 0) {
        dims.push_back(dim);
        kept[dim] = 1;
      }
    }
    if (dims.empty()) {
      expr(l, {l.view(ds)}, l.view(db), [](ir::Expr& e, const Refs& in) { e.unary(UnaryFn::kCopy, in[0]); });
    } else {
      reduce(l, hw::ReduceFn::kSum, l.view(ds), l.view(dbias.view(kept)), dims);
    }
  }
  if (!try_run(l, c)) TORCH_CHECK(false, "spyre: the attention backward did not compile");
  c.finish({dq, dk, dv, dbias});
}

const bool g_registered = [] {
  register_boxed({"_scaled_dot_product_fused_attention_overrideable"}, {""}, &attention_kernel);
  register_boxed({"_scaled_dot_product_fused_attention_overrideable_backward"}, {""}, &attention_backward_kernel);
  return true;
}();

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", TORCH_FN(fused_sdp_choice));
}

}  // namespace spyre::backend

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &spyre::backend::choose);
}  // namespace at::native
