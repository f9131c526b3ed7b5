"""Discrete Fourier transforms, torch.complex, torch.polar and the physical conjugate on the device
(torch_spyre/_fft.py) against CPU torch: every torch.fft family over batches, several dims,
non-contiguous and conj() inputs, each normalization, long signals (the two-stage split), empty
batches, out= forms, stft/istft and backward, all with the CPU fallback forbidden."""

from __future__ import annotations

import functools

import pytest
import torch
import torch_spyre

S = "spyre"
TOL = {"rtol": 1e-4, "atol": 1e-5}


@pytest.fixture(autouse=True)
def _native():
    torch_spyre.set_cpu_fallback("error")


def _rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_complex:
        return torch.complex(torch.rand(shape, generator=g) * 18 - 9, torch.rand(shape, generator=g) * 18 - 9)
    return torch.rand(shape, generator=g, dtype=dtype) * 18 - 9  # OpInfo's range


def _same(got, want, strides: bool = True):
    assert got.device.type == S
    assert got.dtype == want.dtype and got.shape == want.shape
    if strides and want.numel() > 1:
        assert got.stride() == want.stride()
    got = got.cpu()
    if want.is_complex():
        got, want = torch.view_as_real(got.resolve_conj()), torch.view_as_real(want.resolve_conj())
    torch.testing.assert_close(got, want, **TOL)


# (function, kwargs, complex input)
CASES = [
    (torch.fft.fft, {"dim": 1}, False),
    (torch.fft.fft, {"n": 10, "dim": 0, "norm": "ortho"}, True),
    (torch.fft.ifft, {"dim": -1, "norm": "forward"}, True),
    (torch.fft.ifft, {"dim": 1}, False),
    (torch.fft.rfft, {"dim": 0}, False),
    (torch.fft.rfft, {"n": 7, "norm": "ortho"}, False),
    (torch.fft.irfft, {"dim": 1}, True),
    (torch.fft.irfft, {"n": 9, "dim": 0, "norm": "forward"}, True),
    (torch.fft.hfft, {"dim": 1}, True),
    (torch.fft.ihfft, {"dim": 2}, False),
    (torch.fft.fft2, {}, False),
    (torch.fft.fftn, {"dim": (0, 2), "norm": "ortho"}, True),
    (torch.fft.ifftn, {"s": (3, 10), "dim": (1, 2)}, True),
    (torch.fft.rfftn, {}, False),
    (torch.fft.rfft2, {"dim": (2, 0)}, False),
    (torch.fft.irfftn, {"dim": (0, 1)}, True),
    (torch.fft.irfft2, {"s": (4, 8), "norm": "ortho"}, True),
    (torch.fft.hfftn, {"dim": (0, -1)}, True),
    (torch.fft.ihfftn, {"s": (3, 10), "dim": (1, 2)}, False),
]


@pytest.mark.parametrize("fn, kwargs, cplx", CASES, ids=lambda v: getattr(v, "__name__", None))
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_transforms_match_cpu(fn, kwargs, cplx, layout):
    x = _rand(5, 6, 7, dtype=torch.complex64 if cplx else torch.float32)
    if layout == "transposed":  # a non-contiguous input: CPU's result strides follow it
        x = x.transpose(0, 2)
    _same(fn(x.to(S), **kwargs), fn(x, **kwargs))


def test_conj_input_is_read_conjugated():
    x = _rand(4, 9, dtype=torch.complex64)
    _same(torch.fft.fft(x.to(S).conj()), torch.fft.fft(x.conj()))
    _same(torch.fft.irfft(x.to(S).conj()), torch.fft.irfft(x.conj()))


@pytest.mark.parametrize("n", [1, 2, 31, 1500, 1031])
def test_signal_lengths(n):
    """One point, a prime, a signal split in two stages (1500 = 30 * 50) and a prime too long for
    one table of the split's size, transformed whole; values relative to the largest, as an FFT's
    error scales."""
    x = _rand(3, n, seed=n)
    for fn in (torch.fft.rfft, functools.partial(torch.fft.irfft, n=n), lambda t: torch.fft.ifft(t.cfloat())):
        want = fn(x)
        got = fn(x.to(S)).cpu()
        w, g = (torch.view_as_real(want), torch.view_as_real(got)) if want.is_complex() else (want, got)
        assert got.shape == want.shape
        assert (g - w).abs().max() <= 1e-6 * max(w.abs().max(), 1)


def test_empty_batch_and_one_point():
    """An empty batch gives an empty result (CPU's MKL refuses one: "Inconsistent configuration")."""
    got = torch.fft.rfft(torch.empty(0, 8, device=S))
    assert got.shape == (0, 5) and got.dtype == torch.complex64
    got = torch.fft.irfft(torch.empty(3, 0, 4, dtype=torch.complex64, device=S), dim=2)
    assert got.shape == (3, 0, 6) and got.dtype == torch.float32
    x = _rand(4, 1)
    _same(torch.fft.rfft(x.to(S)), torch.fft.rfft(x))


def test_out_forms():
    x = _rand(4, 10)
    out = torch.empty(0, dtype=torch.complex64, device=S)
    assert torch.fft.rfft(x.to(S), out=out) is out
    _same(out, torch.fft.rfft(x, out=torch.empty(0, dtype=torch.complex64)))
    c = _rand(4, 6, dtype=torch.complex64)
    out = torch.empty(0, device=S)
    torch.fft.irfft(c.to(S), out=out)
    _same(out, torch.fft.irfft(c), strides=False)
    out = torch.empty(0, dtype=torch.complex64, device=S)
    torch.fft.fftn(c.to(S), out=out)
    _same(out, torch.fft.fftn(c), strides=False)
    with pytest.raises(RuntimeError, match="complex output"):
        torch.fft.rfft(x.to(S), out=torch.empty(0, device=S))


def test_declines_what_it_cannot_run():
    """float64 has no arithmetic on the card; a prime signal longer than 2048 points would need a
    table past its bound: both take the CPU fallback (refused here)."""
    with pytest.raises(NotImplementedError, match="_fft_r2c"):
        torch.fft.rfft(torch.ones(8, dtype=torch.float64, device=S))
    with pytest.raises(NotImplementedError, match="_fft_r2c"):
        torch.fft.rfft(torch.ones(2053, device=S))


def test_stft_istft():
    x = _rand(2, 100)
    window = torch.hann_window(16)
    kwargs = {"n_fft": 16, "hop_length": 4, "return_complex": True}
    spec = torch.stft(x, window=window, center=False, **kwargs)
    got = torch.stft(x.to(S), window=window.to(S), center=False, **kwargs)
    _same(got, spec, strides=False)
    ones = torch.ones(10)
    spec = torch.stft(x, n_fft=10, window=ones, center=False, return_complex=True)
    back = torch.istft(spec, n_fft=10, window=ones, center=False)
    _same(torch.istft(spec.to(S), n_fft=10, window=ones.to(S), center=False), back)


def test_complex_and_polar():
    a, b = _rand(10, 1, 5), _rand(1, 10, 5, seed=1)
    _same(torch.complex(a.to(S), b.to(S)), torch.complex(a, b))
    _same(torch.polar(a.to(S), b.to(S)), torch.polar(a, b))
    t = a.transpose(0, 2)
    _same(torch.complex(t.to(S), t.to(S)), torch.complex(t, t), strides=False)
    out = torch.empty(0, dtype=torch.complex64, device=S)
    assert torch.polar(a.to(S), b.to(S), out=out) is out
    _same(out, torch.polar(a, b))
    _same(torch.complex(torch.empty(0, 3, device=S), torch.empty(0, 3, device=S)),
          torch.complex(torch.empty(0, 3), torch.empty(0, 3)))  # fmt: skip
    for args, out in [((a, b.double()), None), ((a.int(), b.int()), None),
                      ((a, b), torch.empty(0, dtype=torch.complex128))]:  # fmt: skip
        kw = {} if out is None else {"out": out}
        with pytest.raises(RuntimeError) as cpu:
            torch.complex(*args, **kw)
        kw = {} if out is None else {"out": out.to(S)}
        with pytest.raises(RuntimeError) as dev:
            torch.complex(*[t.to(S) for t in args], **kw)
        assert str(dev.value) == str(cpu.value)


def test_conj_physical():
    x = _rand(4, 5, dtype=torch.complex64)
    _same(torch.conj_physical(x.to(S)), torch.conj_physical(x))
    _same(torch.conj_physical(x.to(S).conj()), torch.conj_physical(x.conj()))
    y = x.to(S).t()
    y.conj_physical_()
    _same(y, x.t().conj_physical())
    out = torch.empty(0, dtype=torch.complex64, device=S)
    torch.conj_physical(x.to(S), out=out)
    _same(out, torch.conj_physical(x))
    with pytest.raises(RuntimeError, match="Found dtype Float but expected ComplexFloat"):
        torch.conj_physical(x.to(S), out=torch.empty(0, device=S))
    _same(x.to(S).conj().resolve_conj(), x.conj().resolve_conj())
    r = _rand(3)
    _same(torch.conj_physical(r.to(S)), r)


def _grads(fn, x, device):
    leaf = x.detach().to(device).requires_grad_()
    y = fn(leaf)
    y = torch.view_as_real(y) if y.is_complex() else y
    w = torch.randn(y.shape, generator=torch.Generator().manual_seed(7))
    (g,) = torch.autograd.grad(y, leaf, w.to(device))
    return g


@pytest.mark.parametrize(
    "fn, cplx",
    [(lambda x: torch.fft.rfft(x, dim=0), False), (lambda x: torch.fft.fftn(x, norm="ortho"), True),
     (lambda x: torch.fft.rfft2(x), False), (lambda x: torch.complex(x, 2 * x), False)],
)  # fmt: skip
def test_backward(fn, cplx):
    x = _rand(6, 5, dtype=torch.complex64 if cplx else torch.float32)
    _same(_grads(fn, x, S), _grads(fn, x, "cpu"), strides=False)


def test_backward_of_c2r():
    """irfft's backward doubles half the spectrum with a complex mul_: complex products run on the
    card as products of their float halves."""
    x = _rand(5, 6)
    _same(_grads(lambda t: torch.fft.irfft(t, dim=0), x, S), _grads(lambda t: torch.fft.irfft(t, dim=0), x, "cpu"),
          strides=False)  # fmt: skip


def test_complex_products_run_on_the_card():
    """mul of complex64 by complex, real and number operands (istft's window, the c2r backward's
    doubling): the float halves' products, CPU's (ac - bd, ad + bc)."""
    z, w, r = _rand(4, 5, dtype=torch.complex64), _rand(4, 5, dtype=torch.complex64, seed=1), _rand(5, seed=2)
    _same(z.to(S) * w.to(S), z * w)
    _same(z.to(S) * r.to(S), z * r)
    _same(r.to(S) * z.to(S).conj(), r * z.conj())
    _same(z.to(S) * (2 - 0.5j), z * (2 - 0.5j))
    got, want = z.to(S).clone(), z.clone()
    got.mul_(3)
    want.mul_(3)
    _same(got, want)
    out = torch.empty(0, dtype=torch.complex64, device=S)
    torch.mul(z.to(S), w.to(S), out=out)
    _same(out, z * w)
