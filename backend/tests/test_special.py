"""The special functions of the op library (backend/compiler/src/ops/special.cpp) and of _special.py
against CPU over wide ranges, not only OpInfo's few samples: every result must be within float32
tolerance of CPU's float32 answer, or of the float64 answer rounded to float32 (where CPU's float32
kernel is itself the less accurate), with the CPU fallback forbidden."""

from __future__ import annotations

import pytest
import torch
import torch_spyre

S = torch.special
RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(autouse=True)
def _native_only():
    previous = torch_spyre.get_cpu_fallback()
    torch_spyre.set_cpu_fallback("error")
    yield
    torch_spyre.set_cpu_fallback(previous)


def _check(fn, *args, **kwargs):
    """fn on the device against CPU (float32 and float64) at the same arguments."""
    got = fn(*[a.to("spyre") if isinstance(a, torch.Tensor) else a for a in args], **kwargs).cpu()
    want = fn(*args, **kwargs)
    exact = fn(*[a.double() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
    assert got.dtype == want.dtype and got.shape == want.shape

    def near(a, b):
        return (a.double() - b.double()).abs() <= ATOL + RTOL * b.double().abs()

    same = (got == want) | (got.isnan() & want.isnan())
    closer = (got.double() - exact).abs() <= (want.double() - exact).abs() + ATOL + RTOL * exact.abs()
    ok = same | (got == exact.float()) | near(got, want) | near(got, exact.float()) | closer
    bad = (~ok).flatten().nonzero().flatten()[:5].tolist()
    flat = [a.broadcast_to(got.shape).flatten() for a in args if isinstance(a, torch.Tensor)]
    assert not bad, [([float(a[i]) for a in flat], float(got.flatten()[i]), float(want.flatten()[i])) for i in bad]


def _wide(n=1500):
    """Log-spaced from 1e-8 to 1e4, both signs, and 0."""
    pos = torch.logspace(-8, 4, n, dtype=torch.float64)
    return torch.cat([-pos.flip(0), torch.zeros(1, dtype=torch.float64), pos]).float()


SPECIALS = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-45]

UNARY = [
    "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_i0", "modified_bessel_i1",
    "modified_bessel_k0", "modified_bessel_k1", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1",
    "spherical_bessel_j0", "airy_ai",
]  # fmt: skip


@pytest.mark.parametrize("name", UNARY)
def test_unary_over_wide_range(name):
    x = torch.cat([_wide(), torch.tensor(SPECIALS)])
    _check(getattr(S, name), x)


def test_ndtri_down_to_subnormals():
    p = torch.cat([
        torch.logspace(-45, 0, 3000, dtype=torch.float64).float(),
        (1 - torch.logspace(-7.2, -0.3, 1000, dtype=torch.float64)).float(),
        torch.tensor([0.0, 1.0, 0.5, -0.1, 1.1, float("nan")]),
    ])  # fmt: skip
    _check(S.ndtri, p)


def test_ndtri_backward():
    p = torch.linspace(0.01, 0.99, 50)
    d = p.to("spyre").requires_grad_()
    (g,) = torch.autograd.grad(S.ndtri(d).sum(), d)
    c = p.clone().requires_grad_()
    (want,) = torch.autograd.grad(S.ndtri(c).sum(), c)
    torch.testing.assert_close(g.cpu(), want, rtol=1e-4, atol=1e-5)


def test_zeta_real_orders_and_negative_q():
    s = torch.cat([torch.linspace(1.0, 40, 60), torch.tensor([0.5, 2.0, 3.0, 4.0, float("inf"), float("nan")])])
    q = torch.cat(
        [torch.logspace(-5, 5, 60), -torch.logspace(-3, 2, 30), torch.tensor([0.0, -1.0, -2.5, float("inf")])]
    )
    _check(S.zeta, s[:, None], q[None, :])
    _check(S.zeta, 2.0, q)  # a number for s


@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac])
def test_incomplete_gamma(fn):
    a = torch.cat([torch.logspace(-5, 5, 60), torch.tensor([0.0, -1.0, float("inf"), float("nan")])])
    x = torch.cat([torch.logspace(-5, 5.3, 80), torch.tensor([0.0, -1.0, float("inf")])])
    _check(fn, a[:, None], x[None, :])
    big = torch.logspace(1, 5, 40)[:, None]
    _check(fn, big, big * torch.linspace(0.7, 1.3, 31)[None, :])  # Temme's regime, a ~ x


def test_incomplete_gamma_in_place_and_half():
    a, x = torch.rand(7, 5) * 10, torch.rand(7, 5) * 10
    d = a.to("spyre")
    d.igamma_(x.to("spyre"))
    torch.testing.assert_close(d.cpu(), torch.igamma(a, x), rtol=1e-4, atol=1e-5)
    got = torch.igammac(a.half().to("spyre"), x.half().to("spyre")).cpu()
    torch.testing.assert_close(got, torch.igammac(a.half(), x.half()), rtol=2e-2, atol=2e-3)


CHEBYSHEV = [f"{s}chebyshev_polynomial_{k}" for s in ("", "shifted_") for k in "tuvw"]
POLYNOMIALS = [*CHEBYSHEV, "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
               "legendre_polynomial_p"]  # fmt: skip


@pytest.mark.parametrize("name", POLYNOMIALS)
def test_polynomial(name):
    x = torch.cat([torch.linspace(-3, 3, 61), torch.tensor([-1.0, 1.0, 0.0, 1.0001, -1.0001, 9.0, float("inf")])])
    if name.startswith("shifted"):
        x = (x + 1) / 2
    n = torch.cat([torch.arange(-1, 40).float(), torch.tensor([3.7, -0.5, float("nan"), 1e19])])
    if name.startswith("hermite"):  # around CPU's limit of 128
        n = torch.cat([n, torch.tensor([127.0, 128.0, 129.0])])
    # (Chebyshev at |x| < 1 and degrees past about 50: CPU's cos(n acos x) in float32 is as far from
    # float64 as the device's, whose acos may differ from the C library's by an ulp.)
    _check(getattr(S, name), x[:, None], n[None, :])
    _check(getattr(S, name), x, 5)  # a number for n
    _check(getattr(S, name), 0.25, n.clamp(-1, 30))  # a number for x


@pytest.mark.parametrize("name", ["chebyshev_polynomial_t", "hermite_polynomial_h", "laguerre_polynomial_l"])
def test_polynomial_integer_noncontiguous_and_out(name):
    fn = getattr(S, name)
    x = torch.arange(-4, 5).repeat(3, 1).t()  # int64, non-contiguous
    n = torch.arange(3)
    _check(fn, x, n)
    xf = torch.linspace(-2, 2, 12).view(3, 4).t()
    out = torch.empty(0, device="spyre")
    fn(xf.to("spyre"), n[:3, None].float().to("spyre").expand(3, 4).t(), out=out)
    torch.testing.assert_close(out.cpu(), fn(xf, n[:3, None].float().expand(3, 4).t()), rtol=1e-4, atol=1e-5)
    assert fn(torch.empty(0, 3, device="spyre"), torch.ones(3, device="spyre")).shape == (0, 3)


def test_compiled_expression():
    def f(x):
        return S.bessel_j0(x) * 2 + S.airy_ai(x)

    x = torch.linspace(-5, 5, 64)
    got = torch.compile(f, backend="spyre")(x.to("spyre")).cpu()
    torch.testing.assert_close(got, f(x), rtol=1e-4, atol=1e-5)
