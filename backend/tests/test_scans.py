"""Scans and bit-level ops composed of native device ops (torch_spyre/_scans.py), each against CPU
torch with the CPU fallback forbidden: logcumsumexp, cummax / cummin, gcd / lcm, the shifts,
nextafter, frexp and hash_tensor, their edge values, out= and in-place forms and backward."""

from __future__ import annotations

import pytest
import torch
import torch_spyre

S = "spyre"
INF, NAN = float("inf"), float("nan")


@pytest.fixture(autouse=True)
def _native_only():
    torch_spyre.set_cpu_fallback("error")  # a fallback fails the test


def exact(got, want):
    """Bit for bit, NaNs of any payload alike; dtype and shape too."""
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.is_floating_point():
        assert torch.equal(got.isnan(), want.isnan())
        got, want = torch.where(got.isnan(), 0, got), torch.where(want.isnan(), 0, want)
        assert torch.equal(torch.signbit(got), torch.signbit(want))  # -0 is not +0 here
    assert torch.equal(got, want), (got, want)


def raises_like(fn, *args, **kwargs):
    """fn raises on spyre what it raises on the CPU (the type and the message)."""
    with pytest.raises(Exception) as cpu:
        fn(*args, **kwargs)
    moved = [a.to(S) if isinstance(a, torch.Tensor) else a for a in args]
    with pytest.raises(type(cpu.value)) as dev:
        fn(*moved, **kwargs)
    assert str(dev.value) == str(cpu.value)


# ---------------------------------------------------------------------------------- logcumsumexp
def test_logcumsumexp_keeps_precision_at_every_magnitude():
    x = torch.tensor([-200.0, 0.0])
    exact(torch.logcumsumexp(x.to(S), 0), torch.logcumsumexp(x, 0))  # [-200, 0], not [-200, ~0]
    g = torch.Generator().manual_seed(0)
    for scale in (1e-3, 1.0, 100.0, 1e4):
        x = torch.randn(4, 40, generator=g) * scale
        want = torch.logcumsumexp(x.double(), 1)
        got = torch.logcumsumexp(x.to(S), 1).cpu().double()
        cpu = torch.logcumsumexp(x, 1).double()
        # within float32's epsilon of the result plus a few 1e-7 in absolute terms, as CPU is
        bound = 2 * torch.finfo(torch.float32).eps * want.abs() + 4e-7
        assert ((got - want).abs() <= bound).all() and ((cpu - want).abs() <= bound).all()


def test_logcumsumexp_infinities_and_nan_as_cpu():
    for row in (
        [-200.0, 0, 1, -INF, 3, INF, 2, NAN, 1],
        [-INF, -INF, -5, -INF],
        [INF, -INF, INF, 1],
        [3.4e38, 3.4e38, -3.4e38],
        [-3.4e38, -INF, -3.4e38],
    ):
        x = torch.tensor(row)
        torch.testing.assert_close(torch.logcumsumexp(x.to(S), 0).cpu(), torch.logcumsumexp(x, 0), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_logcumsumexp_batches_dims_and_layouts(dtype):
    x = torch.randn(3, 6, 5, generator=torch.Generator().manual_seed(1)).to(dtype)
    tol = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 1e-2}
    for dim in (0, 1, -1):
        torch.testing.assert_close(torch.logcumsumexp(x.to(S), dim).cpu(), torch.logcumsumexp(x, dim), **tol)
    t = x.transpose(0, 2)  # non-contiguous
    torch.testing.assert_close(torch.logcumsumexp(t.to(S), 1).cpu(), torch.logcumsumexp(t, 1), **tol)
    out = torch.empty(0, dtype=dtype, device=S)
    torch.logcumsumexp(x.to(S), 1, out=out)
    torch.testing.assert_close(out.cpu(), torch.logcumsumexp(x, 1), **tol)
    exact(
        torch.logcumsumexp(torch.tensor(2.5, dtype=dtype).to(S), 0),
        torch.logcumsumexp(torch.tensor(2.5, dtype=dtype), 0),
    )
    exact(torch.logcumsumexp(torch.empty(0, 3, dtype=dtype).to(S), 0), torch.empty(0, 3, dtype=dtype))


def test_logcumsumexp_errors_as_cpu():
    raises_like(torch.logcumsumexp, torch.ones(3, dtype=torch.int64), 0)
    raises_like(torch.logcumsumexp, torch.ones(3), 2)


def test_logcumsumexp_backward_runs_natively_with_large_inputs():
    """The backward subtracts results near 10000 from each other: a forward rounded to the ulp of
    10000 at every step of the scan would not give CPU's gradient."""
    g = torch.Generator().manual_seed(2)
    for dim in (0, 1):
        x = torch.randn(5, 5, 5, generator=g)
        x[0] = 10000
        w = torch.randn(5, 5, 5, generator=g)
        want = torch.autograd.grad(torch.logcumsumexp(x.requires_grad_(), dim), x, w)[0]
        xd = x.detach().to(S).requires_grad_()
        got = torch.autograd.grad(torch.logcumsumexp(xd, dim), xd, w.to(S))[0]
        torch.testing.assert_close(got.cpu(), want)


# ------------------------------------------------------------------------------------ cummax/min
@pytest.mark.parametrize("fn", [torch.cummax, torch.cummin])
def test_cummax_cummin_ties_nan_and_signed_zeros_as_cpu(fn):
    rows = [
        [1.0, NAN, 3, NAN, 2],
        [1.0, 1, 0, -0.0, 0, NAN, NAN, -5],
        [2.0, 2, 2, 1, 3, 3],
        [-INF, INF, -INF, INF, 0],
        [NAN, 1, 2],
    ]
    for row in rows:
        x = torch.tensor(row)
        got, want = fn(x.to(S), 0), fn(x, 0)
        exact(got.values, want.values)
        exact(got.indices, want.indices)


@pytest.mark.parametrize("fn", [torch.cummax, torch.cummin])
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int8, torch.int16,
              torch.uint8, torch.bool]
)  # fmt: skip
def test_cummax_cummin_dtypes_dims_and_layouts(fn, dtype):
    x = torch.randint(0, 4, (4, 19, 3), generator=torch.Generator().manual_seed(3)).to(dtype)  # many ties
    for dim in (0, 1, 2, -1):
        got, want = fn(x.to(S), dim), fn(x, dim)
        exact(got.values, want.values)
        exact(got.indices, want.indices)
    t = x.transpose(0, 1)
    got, want = fn(t.to(S), 2), fn(t, 2)
    exact(got.values, want.values)
    exact(got.indices, want.indices)


def test_cummax_out_zero_dim_and_empty():
    x = torch.tensor([3.0, 1, 4, 1, 5])
    values, indices = torch.empty(0, device=S), torch.empty(0, dtype=torch.int64, device=S)
    torch.cummax(x.to(S), 0, out=(values, indices))
    exact(values, torch.cummax(x, 0).values)
    exact(indices, torch.cummax(x, 0).indices)
    for t in (torch.tensor(7.0), torch.empty(0, 4)):
        got, want = torch.cummin(t.to(S), 0), torch.cummin(t, 0)
        exact(got.values, want.values)
        exact(got.indices, want.indices)


@pytest.mark.parametrize("fn", [torch.cummax, torch.cummin])
def test_cummax_cummin_backward(fn):
    x = torch.randint(0, 3, (4, 6), generator=torch.Generator().manual_seed(4)).float()
    w = torch.randn(4, 6, generator=torch.Generator().manual_seed(5))
    want = torch.autograd.grad(fn(x.requires_grad_(), 1).values, x, w)[0]
    xd = x.detach().to(S).requires_grad_()
    got = torch.autograd.grad(fn(xd, 1).values, xd, w.to(S))[0]
    torch.testing.assert_close(got.cpu(), want)


# -------------------------------------------------------------------------------------- gcd, lcm
def test_gcd_lcm_int64_extremes_zeros_and_negatives():
    lo, hi = -(2**63), 2**63 - 1
    a = torch.tensor([lo, lo, lo, lo, 0, -5, 6, 12345678912, 0, hi, hi, -12, 2**62, 3**39])
    b = torch.tensor([0, 6, 3, lo, 0, 0, -4, 98765432100, 9, hi, lo + 2, 18, 3, 2 * 3**38])
    exact(torch.gcd(a.to(S), b.to(S)), torch.gcd(a, b))
    exact(torch.lcm(a.to(S), b.to(S)), torch.lcm(a, b))  # wrapping products, abs(INT64_MIN)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int8, torch.int16, torch.uint8])
def test_gcd_lcm_narrow_types_wrap_as_cpu(dtype):
    info = torch.iinfo(dtype)
    vals = torch.tensor(sorted({info.min, info.max, 0, 1, 6, 7, 8, 25, 75, 100, 126, max(info.min, -9)}))
    a, b = vals[:, None].to(dtype), vals[None, :].to(dtype)  # every pair
    exact(torch.gcd(a.to(S), b.to(S)), torch.gcd(a, b))
    # CPU's lcm divides INT_MIN by a gcd of -1 (gcd(INT_MIN, INT_MAX)), which traps: not compared
    a, b = torch.broadcast_tensors(a, b)
    keep = ~((a == info.min) & (torch.gcd(a, b) == -1))
    a, b = a[keep], b[keep]
    exact(torch.lcm(a.to(S), b.to(S)), torch.lcm(a, b))


def test_gcd_lcm_inplace_out_and_errors():
    g = torch.Generator().manual_seed(6)
    a, b = torch.randint(-50, 50, (5, 4), generator=g), torch.randint(-50, 50, (4,), generator=g)
    d = a.to(S)
    d.gcd_(b.to(S))
    exact(d, torch.gcd(a, b))
    d = a.to(S)
    d.lcm_(b.to(S))
    exact(d, torch.lcm(a, b))
    out = torch.empty(0, dtype=torch.int64, device=S)
    torch.gcd(a.to(S)[:, ::2], b.to(S)[::2], out=out)  # non-contiguous operands
    exact(out, torch.gcd(a[:, ::2], b[::2]))
    six = torch.tensor(6)  # a CPU scalar beside a device tensor, as TensorIterator takes it
    exact(torch.gcd(a.to(S), six), torch.gcd(a, six))
    exact(torch.lcm(six, a.to(S)), torch.lcm(six, a))
    exact(torch.bitwise_left_shift(a.to(S), torch.tensor(3)), torch.bitwise_left_shift(a, torch.tensor(3)))
    raises_like(torch.gcd, torch.ones(3), torch.ones(3))
    raises_like(torch.lcm, torch.ones(3, dtype=torch.bool), torch.ones(3, dtype=torch.bool))
    raises_like(lambda x, y: x.gcd_(y), torch.ones(3, dtype=torch.int64), torch.ones(2, 3, dtype=torch.int64))


# ----------------------------------------------------------------------------------------- shifts
SHIFT_TYPES = [torch.int8, torch.int32, torch.int64, torch.int16, torch.uint8]


def _values(dtype):
    info = torch.iinfo(dtype)
    return torch.tensor(sorted({info.min, info.max, -1 % (info.max + 1), 0, 1, 5, 100, info.max // 3}), dtype=dtype)


@pytest.mark.parametrize("dtype", SHIFT_TYPES)
def test_shifts_by_every_amount_as_cpu(dtype):
    a = _values(dtype)[:, None]
    for amounts in (torch.arange(-70, 70).to(dtype)[None, :], torch.arange(-70, 70)[None, :]):  # int64: promotes
        for fn in (torch.bitwise_left_shift, torch.bitwise_right_shift):
            exact(fn(a.to(S), amounts.to(S)), fn(a, amounts))


@pytest.mark.parametrize("dtype", SHIFT_TYPES)
def test_shift_scalar_operator_and_inplace_forms(dtype):
    a = _values(dtype)
    for k in (0, 1, 3, 7, 258, -1):  # 258 is 2 in int8, as CPU casts the scalar
        exact(a.to(S) << k, a << k)
        exact(a.to(S) >> k, a >> k)
        exact(torch.bitwise_left_shift(a.to(S), k), torch.bitwise_left_shift(a, k))
        exact(torch.bitwise_right_shift(a.to(S), k), torch.bitwise_right_shift(a, k))
    amounts = torch.arange(len(a)).to(dtype)
    exact(torch.bitwise_left_shift(3, amounts.to(S)), torch.bitwise_left_shift(3, amounts))
    exact(torch.bitwise_right_shift(-300, amounts.to(S)), torch.bitwise_right_shift(-300, amounts))
    exact(a.to(S) << amounts.to(S), a << amounts)
    for op in ("__ilshift__", "__irshift__", "bitwise_left_shift_", "bitwise_right_shift_"):
        for other in (amounts, 2):
            d, c = a.to(S), a.clone()
            r = getattr(d, op)(other.to(S) if isinstance(other, torch.Tensor) else other)
            assert r is d
            exact(d, getattr(c, op)(other))
    out = torch.empty(0, dtype=torch.int64, device=S)  # a wider out= takes the result
    torch.bitwise_left_shift(a.to(S), amounts.to(S), out=out)
    exact(out, torch.bitwise_left_shift(a, amounts).long())


def test_shift_errors_as_cpu():
    x = torch.tensor([-5, 3], dtype=torch.int8)
    raises_like(torch.bitwise_left_shift, torch.ones(2), torch.ones(2))
    raises_like(lambda t: t << 1.5, x)
    raises_like(lambda t: t >> torch.tensor([True]), torch.tensor([True, False]))
    raises_like(lambda t, s: t.__ilshift__(s), x, torch.tensor([[1, 2]]))
    raises_like(lambda t: t.__ilshift__(1.5), x)


# -------------------------------------------------------------------------------------- nextafter
def test_nextafter_edge_values_as_cpu():
    x = [0.0, 0.0, -0.0, 1, INF, -INF, NAN, 1, 3.4028234663852886e38, 1e-45, -1e-45, 1e-40, -2.5, 2, 2, -0.0, 0.0]
    y = [-0.0, 1, -1, 1, 0, 0, 1, NAN, INF, 0, 0, 1, -3, 1, 3, 0.0, -0.0]
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        a, b = torch.tensor(x, dtype=dtype), torch.tensor(y, dtype=dtype)
        exact(torch.nextafter(a.to(S), b.to(S)), torch.nextafter(a, b))
        exact(torch.nextafter(b.to(S), a.to(S)), torch.nextafter(b, a))


def test_nextafter_broadcast_inplace_out_and_errors():
    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(4, 5, generator=g), torch.randn(5, generator=g)
    exact(torch.nextafter(a.to(S).t(), b[:4].to(S)), torch.nextafter(a.t(), b[:4]))
    d = a.to(S)
    d.nextafter_(b.to(S))
    exact(d, torch.nextafter(a, b))
    out = torch.empty(0, device=S)
    torch.nextafter(a.to(S), b.to(S), out=out)
    exact(out, torch.nextafter(a, b))
    exact(torch.nextafter(a.to(S), torch.tensor(0.0)), torch.nextafter(a, torch.tensor(0.0)))
    raises_like(torch.nextafter, torch.ones(2, dtype=torch.int64), torch.ones(2, dtype=torch.int64))


# ----------------------------------------------------------------------------------------- frexp
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_frexp_edge_values_as_cpu(dtype):
    info = torch.finfo(dtype)
    vals = [0.0, -0.0, INF, -INF, NAN, info.tiny, info.tiny / 4, -info.smallest_normal / 1024, info.max, -info.max,
            1.0, -0.75, 3.0, 1e-3, 123.456]  # fmt: skip
    x = torch.tensor(vals, dtype=torch.float32).to(dtype)
    got, want = torch.frexp(x.to(S)), torch.frexp(x)
    exact(got.mantissa, want.mantissa)
    exact(got.exponent, want.exponent)
    t = torch.randn(6, 4, generator=torch.Generator().manual_seed(8)).to(dtype).t()  # non-contiguous
    got, want = torch.frexp(t.to(S)), torch.frexp(t)
    exact(got.mantissa, want.mantissa)
    exact(got.exponent, want.exponent)


def test_frexp_out_errors_and_backward():
    x = torch.tensor([0.3, -7.0, 1e-40])
    m, e = torch.empty(0, device=S), torch.empty(0, dtype=torch.int32, device=S)
    torch.frexp(x.to(S), out=(m, e))
    exact(m, torch.frexp(x).mantissa)
    exact(e, torch.frexp(x).exponent)
    bad = (torch.empty(3, dtype=torch.float64), torch.empty(3, dtype=torch.int32))
    raises_like(lambda t, m, e: torch.frexp(t, out=(m, e)), x, *bad)
    raises_like(lambda t, m, e: torch.frexp(t, out=(m, e)), x, torch.empty(3), torch.empty(3, dtype=torch.int64))
    raises_like(torch.frexp, torch.ones(3, dtype=torch.int64))
    w = torch.tensor([1.0, 2.0, 3.0])
    xc = x.clone().requires_grad_()
    want = torch.autograd.grad(torch.frexp(xc).mantissa, xc, w)[0]
    xd = x.to(S).requires_grad_()
    got = torch.autograd.grad(torch.frexp(xd).mantissa, xd, w.to(S))[0]
    torch.testing.assert_close(got.cpu(), want)


# ------------------------------------------------------------------------------------ hash_tensor
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int32, torch.int16,
              torch.int8, torch.uint8, torch.bool]
)  # fmt: skip
def test_hash_tensor_as_cpu(dtype):
    x = (torch.randn(3, 5, 7, generator=torch.Generator().manual_seed(9)) * 100).to(dtype)
    for kwargs in ({}, {"dim": 1}, {"dim": [0, 2], "keepdim": True}, {"dim": -1}):
        exact(torch.hash_tensor(x.to(S), **kwargs), torch.hash_tensor(x, **kwargs))
    exact(torch.hash_tensor(x.to(S).transpose(0, 2), dim=0), torch.hash_tensor(x.transpose(0, 2), dim=0))


def test_hash_tensor_special_floats_zero_dim_empty_and_errors():
    bits = torch.tensor([0x7F800001, 0x7FC00000, -0x00400000, 0x00000001, -0x80000000], dtype=torch.int32)
    x = bits.view(torch.float32)  # a signalling NaN, quiet NaNs, a denormal, -0
    for i in range(len(x)):
        exact(torch.hash_tensor(x[i : i + 1].to(S)), torch.hash_tensor(x[i : i + 1]))
    exact(torch.hash_tensor(torch.tensor(3.5).to(S)), torch.hash_tensor(torch.tensor(3.5)))
    exact(torch.hash_tensor(torch.empty(0, 3).to(S), 1), torch.hash_tensor(torch.empty(0, 3), 1))
    out = torch.empty(4, dtype=torch.uint64, device=S)
    with pytest.warns(UserWarning):  # resized as CPU resizes it
        torch.hash_tensor(x.to(S), out=out)
    exact(out, torch.hash_tensor(x))
    raises_like(torch.hash_tensor, torch.empty(0, 3))
    raises_like(torch.hash_tensor, torch.empty(0, 3), 0)
    raises_like(lambda t: torch.hash_tensor(t, mode=1), torch.ones(3))
    raises_like(
        lambda t: torch.hash_tensor(t, 0, out=torch.empty(0, dtype=torch.int64, device=t.device)), torch.ones(3)
    )
