"""scaled_dot_product_attention: the device's own kernel (chosen through _fused_sdp_choice) against
CPU torch, forward and backward, and the cases it leaves to torch's math path."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torch_spyre
from conftest import run_with_stats
from torch.nn.attention import SDPBackend, sdpa_kernel

OVERRIDEABLE = int(SDPBackend.OVERRIDEABLE)
MATH = int(SDPBackend.MATH)


def _mask(kind, shape, gen):
    if kind == "bool":
        m = torch.rand(*shape, generator=gen) > 0.3
        m[..., 0] = True  # every query keeps a key
        return m
    if kind == "float":
        return torch.randn(*shape, generator=gen).requires_grad_()
    return None


CASES = [
    # B, H, L, S, E, Ev, causal, mask kind, mask shape
    (2, 3, 5, 7, 8, 6, False, None, None),
    (2, 3, 7, 7, 8, 8, True, None, None),
    (1, 2, 4, 9, 8, 8, True, None, None),  # more keys than queries: torch's mask is top-left aligned
    (1, 2, 9, 4, 8, 8, True, None, None),  # fewer: the later queries see every key
    (2, 2, 5, 6, 4, 4, False, "bool", (2, 1, 5, 6)),
    (2, 2, 5, 6, 4, 4, False, "float", (1, 1, 5, 6)),  # broadcast bias, with its gradient
    (2, 2, 5, 6, 4, 4, False, "float", (2, 2, 5, 6)),
    (1, 1, 70, 130, 24, 40, True, None, None),  # several tiles per matrix
]
GQA = [  # B, H, key heads, L, S, E, causal, mask shape (float)
    (2, 4, 2, 5, 5, 8, True, None),
    (1, 6, 2, 4, 7, 8, False, (1, 1, 4, 7)),
    (2, 4, 1, 3, 6, 4, False, None),
]


@pytest.mark.parametrize("B,H,L,S,E,Ev,causal,kind,mshape", CASES)
def test_attention_kernel_matches_cpu(B, H, L, S, E, Ev, causal, kind, mshape, cpu_gen):
    q, k, v = (torch.randn(B, H, n, d, generator=cpu_gen) for n, d in ((L, E), (S, E), (S, Ev)))
    mask = _mask(kind, mshape, cpu_gen)
    dq, dk, dv = (t.to("spyre").requires_grad_() for t in (q, k, v))
    dmask = None if mask is None else mask.detach().to("spyre").requires_grad_(mask.requires_grad)
    for t in (q, k, v):
        t.requires_grad_()
    torch_spyre.set_cpu_fallback("error")
    assert torch._fused_sdp_choice(dq, dk, dv, dmask, 0.0, causal) == OVERRIDEABLE
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    with sdpa_kernel([SDPBackend.OVERRIDEABLE]):  # the device kernel, or an error: no silent math path
        got = F.scaled_dot_product_attention(dq, dk, dv, attn_mask=dmask, is_causal=causal)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)
    grad = torch.randn(want.shape, generator=cpu_gen)
    want.backward(grad)
    got.backward(grad.to("spyre"))
    pairs = [(dq, q), (dk, k), (dv, v)] + ([(dmask, mask)] if mask is not None and mask.requires_grad else [])
    for d, c in pairs:
        torch.testing.assert_close(d.grad.cpu(), c.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("B,H,Hkv,L,S,E,causal,mshape", GQA)
def test_grouped_query_attention_runs_on_the_kernel(B, H, Hkv, L, S, E, causal, mshape, cpu_gen):
    q = torch.randn(B, H, L, E, generator=cpu_gen)
    k, v = (torch.randn(B, Hkv, S, E, generator=cpu_gen) for _ in range(2))
    mask = None if mshape is None else torch.randn(*mshape, generator=cpu_gen)
    dq, dk, dv = (t.to("spyre").requires_grad_() for t in (q, k, v))
    dmask = None if mask is None else mask.to("spyre")
    for t in (q, k, v):
        t.requires_grad_()
    torch_spyre.set_cpu_fallback("error")
    assert torch._fused_sdp_choice(dq, dk, dv, dmask, 0.0, causal, enable_gqa=True) == OVERRIDEABLE
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=True)
    with sdpa_kernel([SDPBackend.OVERRIDEABLE]):
        got = F.scaled_dot_product_attention(dq, dk, dv, attn_mask=dmask, is_causal=causal, enable_gqa=True)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)
    grad = torch.randn(want.shape, generator=cpu_gen)
    want.backward(grad)
    got.backward(grad.to("spyre"))
    for d, c in ((dq, q), (dk, k), (dv, v)):
        torch.testing.assert_close(d.grad.cpu(), c.grad, rtol=1e-4, atol=1e-4)


# The fused kernel's tiling: keys in blocks of up to 128 (several blocks, a short last one), rows
# in blocks (a short last one), grouped query heads packed per key head, causal blocks skipped.
FUSED = [  # B, H, Hkv, L, S, E, Ev, mask, dtype
    (1, 4, 1, 300, 300, 32, 32, "causal", torch.float32),  # four row blocks of 75: skips and a partial block
    (2, 8, 2, 130, 300, 64, 64, "bool", torch.float32),  # a fully masked row below
    (1, 6, 3, 33, 257, 40, 24, "float", torch.float32),  # bias per head, head dims 40 and 24
    (2, 4, 4, 1, 700, 16, 16, None, torch.float32),  # decode: one query row, six key blocks
    (1, 32, 8, 64, 520, 128, 128, "bool", torch.bfloat16),  # Llama-3's heads
    (1, 4, 2, 100, 260, 64, 64, "causal", torch.float16),
]


@pytest.mark.parametrize("B,H,Hkv,L,S,E,Ev,mask,dtype", FUSED)
def test_the_fused_kernel_matches_cpu_over_many_key_blocks(B, H, Hkv, L, S, E, Ev, mask, dtype, cpu_gen):
    q = torch.randn(B, H, L, E, generator=cpu_gen).to(dtype)
    k = torch.randn(B, Hkv, S, E, generator=cpu_gen).to(dtype)
    v = torch.randn(B, Hkv, S, Ev, generator=cpu_gen).to(dtype)
    bias = None
    if mask == "bool":
        bias = torch.rand(B, 1, L, S, generator=cpu_gen) > 0.2
        bias[:, :, L // 2] = False  # a row that sees no key: zeros, as torch's math path gives
    elif mask == "float":
        bias = torch.randn(1, H, L, S, generator=cpu_gen).to(dtype)
    causal = mask == "causal"
    ref_bias = bias if bias is None or bias.dtype == torch.bool else bias.float()
    want = F.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), attn_mask=ref_bias, is_causal=causal, enable_gqa=True
    )
    torch_spyre.set_cpu_fallback("error")
    with sdpa_kernel([SDPBackend.OVERRIDEABLE]):
        got = F.scaled_dot_product_attention(
            q.to("spyre"),
            k.to("spyre"),
            v.to("spyre"),
            attn_mask=None if bias is None else bias.to("spyre"),
            is_causal=causal,
            enable_gqa=True,
        )
    tol = 1e-4 if dtype == torch.float32 else (2e-3 if dtype == torch.float16 else 2e-2)
    torch.testing.assert_close(got.float().cpu(), want, rtol=tol, atol=tol)
    if mask == "bool":
        assert got[:, :, L // 2].abs().sum().item() == 0


def test_attention_runs_as_one_launch_that_keeps_its_scores_on_chip(tmp_path):
    # The stats name each launch's program: one "attention" launch, no score matrix in memory
    # (it would be 64 x 1000 x 1000 fp32 = 256 MB of stores; the output is 64 x 1000 x 64 and the
    # logsumexp that torch's kernel returns 64 x 1000, both fp32).
    code = (
        "import torch, torch_spyre, torch.nn.functional as F\n"
        "q = torch.randn(1, 64, 1000, 64).to('spyre'); k = torch.randn(1, 8, 1000, 64).to('spyre')\n"
        "o = F.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=True); torch.spyre.synchronize()\n"
    )
    launches = run_with_stats(code, tmp_path)[0]["cards"][0]["launches"]
    attention = [x for x in launches if x["name"].startswith("attention")]
    assert len(attention) == 1 and attention[0]["name"] == "attention f32 [1,64,1000,64] x 1000 keys causal"
    assert attention[0]["bytes_stored"] == 64 * 1000 * 64 * 4 + 64 * 1000 * 4


def test_causal_row_blocks_are_dealt_to_the_cores_evenly(tmp_path):
    """Causal attention's later rows see more keys. With fewer key heads than cores, the cores
    sharing a head's row blocks take them to and fro (an early and a late one every two steps), so
    few of them idle while another finishes the last rows: under a tenth of the launch's core
    cycles are idle (4 %; two fifths were when each core took a run of consecutive blocks). The
    values are CPU's."""
    code = (
        "import torch, torch_spyre, torch.nn.functional as F\n"
        "g = torch.Generator().manual_seed(0)\n"
        "q = torch.randn(1, 32, 1024, 64, generator=g); k = torch.randn(1, 8, 1024, 64, generator=g)\n"
        "v = torch.randn(1, 8, 1024, 64, generator=g)\n"
        "want = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)\n"
        "got = F.scaled_dot_product_attention(q.to('spyre'), k.to('spyre'), v.to('spyre'), is_causal=True,"
        " enable_gqa=True)\n"
        "torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)\n"
    )
    launches = run_with_stats(code, tmp_path)[0]["cards"][0]["launches"]
    (launch,) = [x for x in launches if x["name"].startswith("attention")]
    stall = launch["stall"]
    assert stall["sync"] + stall["idle"] < 0.1 * sum(stall.values()), stall


def test_causal_training_over_dealt_row_blocks_matches_cpu(cpu_gen):
    # The shape of the test above: each core's row blocks (and the logsumexp rows the backward
    # reads) are found by the kernel, not walked by the nest.
    q = torch.randn(1, 32, 1024, 64, generator=cpu_gen, requires_grad=True)
    k, v = (torch.randn(1, 8, 1024, 64, generator=cpu_gen, requires_grad=True) for _ in range(2))
    grad = torch.randn(1, 32, 1024, 64, generator=cpu_gen)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    want.backward(grad)
    dq, dk, dv = (x.detach().to("spyre").requires_grad_() for x in (q, k, v))
    torch_spyre.set_cpu_fallback("error")
    got = F.scaled_dot_product_attention(dq, dk, dv, is_causal=True, enable_gqa=True)
    got.backward(grad.to("spyre"))
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-4)
    for d, c in ((dq, q), (dk, k), (dv, v)):
        torch.testing.assert_close(d.grad.cpu(), c.grad, rtol=1e-4, atol=1e-4)


def test_a_row_with_every_key_masked_gives_zeros_like_torch(cpu_gen):
    q, k, v = (torch.randn(1, 2, 3, 8, generator=cpu_gen) for _ in range(3))
    mask = torch.ones(1, 1, 3, 3, dtype=torch.bool)
    mask[0, 0, 1] = False
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch_spyre.set_cpu_fallback("error")
    with sdpa_kernel([SDPBackend.OVERRIDEABLE]):
        got = F.scaled_dot_product_attention(q.to("spyre"), k.to("spyre"), v.to("spyre"), attn_mask=mask.to("spyre"))
    torch.testing.assert_close(got.cpu(), want)
    assert got[0, :, 1].abs().sum().item() == 0


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 2e-3), (torch.bfloat16, 2e-2)])
def test_half_types_compute_scores_in_fp32(dtype, tol, cpu_gen):
    q, k, v = (torch.randn(2, 4, 16, 32, generator=cpu_gen).to(dtype) for _ in range(3))
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    torch_spyre.set_cpu_fallback("error")
    with sdpa_kernel([SDPBackend.OVERRIDEABLE]):
        got = F.scaled_dot_product_attention(q.to("spyre"), k.to("spyre"), v.to("spyre"), is_causal=True)
    assert got.dtype == dtype
    torch.testing.assert_close(got.float().cpu(), want, rtol=tol, atol=tol)


def test_the_math_path_takes_what_the_kernel_does_not(cpu_gen):
    q = torch.randn(2, 4, 5, 8, generator=cpu_gen).to("spyre")
    kv = torch.randn(2, 2, 5, 8, generator=cpu_gen).to("spyre")  # 2 key heads for 4 query heads
    assert torch._fused_sdp_choice(q, kv, kv, None, 0.0, False) == MATH  # unequal heads without enable_gqa
    assert torch._fused_sdp_choice(q, q, q, None, 0.1, False) == MATH  # dropout
    assert torch._fused_sdp_choice(q[0], q[0], q[0], None, 0.0, False) == MATH  # 3-d
    torch_spyre.set_cpu_fallback("error")
    got = F.scaled_dot_product_attention(q[0], q[0], q[0], scale=0.5)  # 3-d: the math path, natively
    want = F.scaled_dot_product_attention(q[0].cpu(), q[0].cpu(), q[0].cpu(), scale=0.5)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)
    with sdpa_kernel([SDPBackend.MATH]):  # a user's choice of the math path is honoured
        assert torch._fused_sdp_choice(q, q, q, None, 0.0, False) == MATH


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_the_transformer_encoder_layers_eval_fast_path_runs_natively(norm_first, activation):
    """nn.TransformerEncoderLayer in eval takes torch._transformer_encoder_layer_fwd (and, in it,
    _native_multi_head_attention and _addmm_activation): all native, no CPU fallback."""
    import copy

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        32, 4, 64, dropout=0.0, batch_first=True, norm_first=norm_first, activation=activation
    ).eval()
    x = torch.randn(2, 7, 32)
    pad = torch.tensor([[False] * 7, [False] * 5 + [True] * 2])
    torch_spyre.set_cpu_fallback("error")
    torch_spyre.fallback_counts(reset=True)
    with torch.no_grad():
        want = layer(x, src_key_padding_mask=pad)
        got = copy.deepcopy(layer).to("spyre")(x.to("spyre"), src_key_padding_mask=pad.to("spyre"))
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    assert torch_spyre.fallback_counts() == {}


def test_multi_head_attention_returns_cpus_weights():
    import copy

    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True).eval()
    q, kv = torch.randn(2, 6, 32), torch.randn(2, 9, 32)
    torch_spyre.set_cpu_fallback("error")
    dev = copy.deepcopy(mha).to("spyre")
    for average in (True, False):
        with torch.no_grad():
            want = mha(q, kv, kv, need_weights=True, average_attn_weights=average)
            got = dev(q.to("spyre"), kv.to("spyre"), kv.to("spyre"), need_weights=True, average_attn_weights=average)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g.cpu(), w, rtol=1e-5, atol=1e-5)
