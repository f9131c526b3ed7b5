"""The resident-B matmul plan (backend/compiler/src/lower/matmul_resident.cpp) against CPU PyTorch,
in every layout and epilogue it takes: transposed operands, each bias broadcast, alpha and beta,
a batch dim, fp32, fp16 and bf16, and an output with a row stride of its own.

The compiler takes the plan for large enough GEMMs when its estimate beats the streamed plans'.
Each case checks that it did: the plan's program unrolls its steps, so it is the only matmul
program over 8 KiB (the streamed plans' are a few KiB whatever the size).
"""

from __future__ import annotations

import random

import pytest
import torch
import torch_spyre
from torch_spyre import debug

RESIDENT_PROGRAM_BYTES = 8192
# K of every case: no other test compiles these signatures, so the program cache cannot hold them
# already (a cached program adds no bytes).
K = 1152


def on_device(fn, *cpu_args):
    """Runs fn on the device copies of cpu_args; returns its result on the CPU and the bytes of
    the programs it compiled."""
    args = [x.to("spyre") for x in cpu_args]
    before = debug.program_cache_info()["bytes"]
    out = fn(*args).cpu()
    return out, debug.program_cache_info()["bytes"] - before


def check(fn, *cpu_args, rtol, atol):
    torch_spyre.set_cpu_fallback("error")
    got, program_bytes = on_device(fn, *cpu_args)
    assert program_bytes > RESIDENT_PROGRAM_BYTES, f"the resident plan was not taken ({program_bytes} bytes)"
    want = fn(*[x.float() for x in cpu_args]).to(got.dtype)  # fp32 accumulation, one rounding
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol)


TOLERANCE = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_plain(dtype, cpu_gen):
    a = torch.randn(1024, K, generator=cpu_gen).to(dtype)
    b = torch.randn(K, 1024, generator=cpu_gen).to(dtype)
    tol = TOLERANCE[dtype] * 34  # sums of K products of unit normals
    check(lambda x, y: x @ y, a, b, rtol=TOLERANCE[dtype], atol=tol)


@pytest.mark.parametrize("layout", ["a.t()", "b.t()", "both"])
def test_transposed_operands(layout, cpu_gen):
    a = torch.randn(K, K, generator=cpu_gen).half()
    b = torch.randn(K, K, generator=cpu_gen).half()
    fns = {
        "a.t()": lambda x, y: x.t() @ y,
        "b.t()": lambda x, y: x @ y.t(),  # nn.Linear's weight
        "both": lambda x, y: x.t() @ y.t(),
    }
    check(fns[layout], a, b, rtol=2e-3, atol=0.07)


@pytest.mark.parametrize("bias_shape", [(1024,), (1024, 1), (1024, 1024), ()], ids=["row", "column", "full", "scalar"])
def test_bias_alpha_beta(bias_shape, cpu_gen):
    a = torch.randn(1024, K, generator=cpu_gen)
    b = torch.randn(K, 1024, generator=cpu_gen)
    bias = torch.randn(bias_shape, generator=cpu_gen)
    check(lambda c, x, y: torch.addmm(c, x, y, beta=0.5, alpha=-2.0), bias, a, b, rtol=1e-4, atol=5e-3)
    check(lambda c, x, y: torch.addmm(c, x, y), bias, a, b, rtol=1e-4, atol=5e-3)


def test_batched(cpu_gen):
    a = torch.randn(2, 2048, K, generator=cpu_gen).half()
    b = torch.randn(2, K, 1024, generator=cpu_gen).half()
    bias = torch.randn(2, 2048, 1024, generator=cpu_gen).half()
    check(lambda x, y: torch.bmm(x, y), a, b, rtol=2e-3, atol=0.07)
    check(lambda c, x, y: torch.baddbmm(c, x, y, alpha=0.5), bias, a, b, rtol=2e-3, atol=0.07)


def test_output_with_its_own_row_stride(cpu_gen):
    """mm into the left half of a wider matrix: the stores keep to it and leave the rest alone."""
    a = torch.randn(1024, K, generator=cpu_gen)
    b = torch.randn(K, 1024, generator=cpu_gen)
    torch_spyre.set_cpu_fallback("error")
    wide = torch.full((1024, 1536), 7.0, device="spyre")
    before = debug.program_cache_info()["bytes"]
    torch.mm(a.to("spyre"), b.to("spyre"), out=wide[:, :1024])
    assert debug.program_cache_info()["bytes"] - before > RESIDENT_PROGRAM_BYTES
    got = wide.cpu()
    torch.testing.assert_close(got[:, :1024], a @ b, rtol=1e-4, atol=5e-3)
    assert torch.equal(got[:, 1024:], torch.full((1024, 512), 7.0))


def test_out_aliasing_an_operand(cpu_gen):
    a = torch.randn(K, K, generator=cpu_gen)
    da = a.to("spyre")
    torch.mm(da, da, out=da)
    torch.testing.assert_close(da.cpu(), a @ a, rtol=1e-4, atol=5e-3)


def test_random_layouts_against_cpu(request):
    """Seeded random GEMMs in every layout and epilogue, against CPU. Most of them take the resident
    plan, and the rest take a streamed one; both must agree with CPU. There are 40 cases, or 400
    with --slow."""
    rng = random.Random(2026)
    gen = torch.Generator().manual_seed(2026)
    torch_spyre.set_cpu_fallback("error")
    taken = 0
    cases = 400 if request.config.getoption("--slow") else 40
    for _ in range(cases):
        m, n = rng.choice([64, 256, 384, 768, 1024, 1536]), rng.choice([64, 128, 512, 768, 1024])
        k = 128 * rng.randint(1, 12)
        dtype = rng.choice([torch.float32, torch.float16, torch.bfloat16])
        a = torch.randn(k, m, generator=gen).t() if rng.random() < 0.3 else torch.randn(m, k, generator=gen)
        b = torch.randn(n, k, generator=gen).t() if rng.random() < 0.3 else torch.randn(k, n, generator=gen)
        bias_shape = rng.choice([None, (n,), (m, 1), (m, n)])
        alpha, beta = rng.choice([1.0, 0.5]), rng.choice([1.0, -1.0])
        a, b = a.to(dtype), b.to(dtype)
        bias = None if bias_shape is None else torch.randn(bias_shape, generator=gen).to(dtype)
        before = debug.program_cache_info()["bytes"]
        if bias is None:
            got = (a.to("spyre") @ b.to("spyre")).cpu()
            want = a.float() @ b.float()
        else:
            got = torch.addmm(bias.to("spyre"), a.to("spyre"), b.to("spyre"), alpha=alpha, beta=beta).cpu()
            want = torch.addmm(bias.float(), a.float(), b.float(), alpha=alpha, beta=beta)
        taken += debug.program_cache_info()["bytes"] - before > RESIDENT_PROGRAM_BYTES
        tol = TOLERANCE[dtype]
        case = f"{m}x{k}x{n} {dtype} a {tuple(a.stride())} b {tuple(b.stride())} bias {bias_shape} {alpha} {beta}"
        torch.testing.assert_close(
            got, want.to(dtype), rtol=tol, atol=2 * tol * k**0.5, msg=lambda s, case=case: f"{case}: {s}"
        )
    assert taken >= cases // 4, f"the resident plan took only {taken} of {cases} cases"
