"""Random numbers on spyre: seeded, reproducible, independent of tiling, with the right
distributions (checked against their analytical moments), and dropout that trains."""

from __future__ import annotations

import math

import pytest
import torch
import torch_spyre
from conftest import run_python

N = 200_000


def _within(value: float, expected: float, sd: float, n: int) -> bool:
    """|value - expected| within five standard errors of a mean of n draws."""
    return abs(value - expected) <= 5 * sd / math.sqrt(n)


def test_manual_seed_reproduces_and_seeds_differ():
    torch_spyre.set_cpu_fallback("error")
    torch.manual_seed(123)
    a = torch.randn(1000, device="spyre").cpu()
    torch.manual_seed(123)
    b = torch.randn(1000, device="spyre").cpu()
    torch.manual_seed(124)
    c = torch.randn(1000, device="spyre").cpu()
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert torch.spyre.initial_seed() == 124


def test_half_precision_uniforms_stay_below_one():
    """torch keeps a type's significand digits of randomness (11 for fp16, 8 for bf16), so every
    uniform is a multiple of 2**-digits below 1; 24 bits rounded into bf16 reach 1 about once in
    512 draws."""
    torch_spyre.set_cpu_fallback("error")
    torch.manual_seed(5)
    for dtype, digits in [(torch.float16, 11), (torch.bfloat16, 8)]:
        u = torch.rand(N, device="spyre", dtype=dtype).cpu().double()
        assert u.min() >= 0 and u.max() < 1, dtype
        assert torch.equal(u * 2**digits, (u * 2**digits).floor()), dtype
        assert len(u.unique()) == 2**digits, dtype  # every value is reachable
        assert _within(u.mean().item(), 0.5 - 2 ** -(digits + 1), 1 / math.sqrt(12), N)


def test_state_and_generator_objects():
    torch_spyre.set_cpu_fallback("error")
    state = torch.spyre.get_rng_state()
    first = torch.rand(64, device="spyre").cpu()
    torch.spyre.set_rng_state(state)
    assert torch.equal(torch.rand(64, device="spyre").cpu(), first)
    g1 = torch.Generator(device="spyre").manual_seed(7)
    g2 = torch.Generator(device="spyre").manual_seed(7)
    assert torch.equal(
        torch.rand(9, device="spyre", generator=g1).cpu(), torch.rand(9, device="spyre", generator=g2).cpu()
    )


def test_distributions_have_their_moments():
    torch_spyre.set_cpu_fallback("error")
    torch.manual_seed(0)
    u = torch.empty(N, device="spyre").uniform_(-2.0, 3.0).cpu()
    assert u.min() >= -2.0 and u.max() < 3.0
    assert _within(u.mean().item(), 0.5, 5 / math.sqrt(12), N)
    n = torch.empty(N, device="spyre").normal_(1.5, 2.0).cpu()
    assert _within(n.mean().item(), 1.5, 2.0, N)
    assert abs(n.std().item() - 2.0) < 0.03
    assert abs(((n - 1.5).abs() < 2.0).float().mean().item() - 0.6827) < 0.01  # one sigma
    b = torch.empty(N, device="spyre").bernoulli_(0.3).cpu()
    assert set(b.unique().tolist()) <= {0.0, 1.0}
    assert _within(b.mean().item(), 0.3, math.sqrt(0.21), N)
    h = torch.randn(N, device="spyre", dtype=torch.float16).cpu().float()
    assert _within(h.mean().item(), 0.0, 1.0, N)


def test_dropout_drops_p_and_scales_the_rest_and_its_gradient_follows():
    torch_spyre.set_cpu_fallback("error")
    torch.manual_seed(1)
    x = torch.ones(N, device="spyre", requires_grad=True)
    y = torch.nn.functional.dropout(x, 0.25, training=True)
    y.sum().backward()
    out, grad = y.detach().cpu(), x.grad.cpu()
    assert _within((out == 0).float().mean().item(), 0.25, math.sqrt(0.25 * 0.75), N)
    assert torch.equal(out[out != 0], torch.full_like(out[out != 0], 1 / 0.75))
    assert torch.equal(grad, out)  # d(dropout)/dx is the same mask and scale
    assert torch.equal(torch.nn.functional.dropout(x, 0.25, training=False).detach().cpu(), torch.ones(N))


def test_numbers_do_not_depend_on_tiling_or_cores(tmp_path):
    code = "import torch; torch.manual_seed(9); print(torch.rand(100_003, device='spyre').sum().item())"
    small = tmp_path / "small.json"
    small.write_text('{"chip": {"lx_bytes": 262144, "cores": 5}}')
    outs = [run_python(code, env=env) for env in (None, {"SPYRE_CONFIG": str(small)})]
    assert all(p.returncode == 0 for p in outs), [p.stderr for p in outs]
    assert outs[0].stdout == outs[1].stdout


def test_randint_draws_every_integer_of_its_range_alike_on_the_card():
    """randint and random_ took the CPU fallback. Now the card draws them for ranges up to 2**24,
    in every integer type it holds and in the float ones: each value of the range about equally
    often (a chi-square test over the counts), none outside it, reproducible from the seed."""
    torch_spyre.set_cpu_fallback("error")
    cases = [(torch.int64, -5, 3), (torch.int32, 0, 10), (torch.int8, -128, 128), (torch.bool, 0, 2),
             (torch.float32, -3, 7), (torch.bfloat16, 0, 100), (torch.int64, 2**40, 2**40 + 9)]  # fmt: skip
    for dtype, low, high in cases:
        torch.manual_seed(11)
        x = torch.randint(low, high, (N,), dtype=dtype, device="spyre").cpu()
        assert x.dtype == dtype
        torch.manual_seed(11)
        assert torch.equal(torch.randint(low, high, (N,), dtype=dtype, device="spyre").cpu(), x)
        counts = torch.bincount((x.long() - low).reshape(-1), minlength=high - low)
        assert counts.numel() == high - low, (dtype, low, high)  # nothing outside [low, high)
        expected = N / (high - low)
        chi2 = float(((counts - expected) ** 2 / expected).sum())
        dof = high - low - 1
        assert chi2 < dof + 6 * math.sqrt(2 * dof), (dtype, low, high, chi2)  # 6 standard deviations
    wide = torch.randint(0, 2**24, (N,), device="spyre").cpu().double()
    assert wide.min() >= 0 and wide.max() < 2**24
    assert _within(wide.mean().item(), (2**24 - 1) / 2, 2**24 / math.sqrt(12), N)
    top = torch.empty(N, dtype=torch.bfloat16, device="spyre").random_().cpu()  # [0, 2**8] as torch
    assert top.min() == 0 and top.max() == 256
    with pytest.raises(RuntimeError, match="'from' to be less than 'to'"):
        torch.empty(3, dtype=torch.int64, device="spyre").random_(7, 2)
