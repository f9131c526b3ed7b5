"""Searching, counting and uniqueness on the device (torch_spyre/_counting*.py) give CPU torch's answers.

Every case runs natively (the CPU fallback raises) and is compared exactly with CPU torch: the
positions of searchsorted with NaN in the sequence or the values, the bin of a value on an edge,
the index mode picks among equal values (CPU's std::sort decides it for rows longer than 16),
the sorted distinct values with their inverse and counts.
"""

from __future__ import annotations

import pytest
import torch
import torch_spyre

NAN = float("nan")


@pytest.fixture(autouse=True)
def _native_only():
    torch_spyre.set_cpu_fallback("error")
    yield
    torch_spyre.set_cpu_fallback("warn")


def _dev(x):
    if isinstance(x, torch.Tensor):
        return x.to("spyre")
    if isinstance(x, list):
        return [_dev(y) for y in x]
    return x


def _leaves(r):
    return [z for y in r for z in _leaves(y)] if isinstance(r, (tuple, list)) else [r]


def _same(got, want, close: bool = False) -> None:
    """got (spyre) equals want (CPU): dtype, shape and values, NaN where CPU has NaN."""
    for g, w in zip(_leaves(got), _leaves(want), strict=True):
        g = g.cpu()
        assert (g.dtype, g.shape) == (w.dtype, w.shape)
        if close:
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6, equal_nan=True)
        else:
            assert torch.equal(g, w) or torch.equal(g.isnan(), w.isnan()) and torch.equal(g[~g.isnan()], w[~w.isnan()])


def _check(fn, *args, close: bool = False, **kwargs) -> None:
    """fn on the spyre copies of the arguments gives what it gives on the CPU ones."""
    want = fn(*args, **kwargs)
    got = fn(*_dev(list(args)), **{k: _dev(v) for k, v in kwargs.items()})
    _same(got, want, close)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------------------------- searching
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32, torch.int8])
@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_with_duplicates(dtype, right):
    g = _gen()
    for m in (1, 7, 33):
        seq = torch.sort(torch.randint(-4, 5, (m,), generator=g))[0].to(dtype)
        values = torch.randint(-6, 7, (3, 5), generator=g).to(dtype)
        _check(torch.searchsorted, seq, values, right=right)
        _check(torch.searchsorted, seq, values, right=right, out_int32=True)


def test_searchsorted_nan_in_sequence_and_values():
    values = torch.tensor([NAN, 0.0, 1.0, 2.5, 5.0, -1.0, NAN])
    for seq in (torch.tensor([1.0, 2.0, NAN, NAN]), torch.tensor([1.0, NAN, 2.0, NAN, 3.0, 0.0, NAN])):
        for side in ("left", "right"):
            _check(torch.searchsorted, seq, values, side=side)


@pytest.mark.filterwarnings("ignore:torch.searchsorted")  # CPU's note on copying non-contiguous inputs
def test_searchsorted_batched_sorter_scalar_and_empty():
    g = _gen(1)
    seq = torch.randn(3, 4, 9, generator=g)
    values = torch.randn(3, 4, 5, generator=g)
    _check(torch.searchsorted, seq, values, sorter=torch.argsort(seq, -1), side="right")
    _check(torch.searchsorted, torch.sort(seq)[0].transpose(0, 1), values.transpose(0, 1))  # non-contiguous
    _check(torch.searchsorted, torch.tensor([0.1, 0.2, 0.3]), 0.2, right=True)  # Scalar
    _check(torch.searchsorted, torch.tensor([1, 2, 3]), torch.tensor([1.5, 2.0]))  # promoted to float
    _check(torch.searchsorted, torch.empty(0), torch.randn(4, generator=g))
    _check(torch.searchsorted, torch.empty(2, 0, 3), torch.empty(2, 0, 5))


def test_searchsorted_out_and_errors():
    seq, values = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([[2.0, 0.5], [3.5, 2.0]])
    out = torch.empty(0, dtype=torch.int32, device="spyre")
    result = torch.searchsorted(_dev(seq), _dev(values), out_int32=True, out=out)
    assert result is out
    _same(out, torch.searchsorted(seq, values, out_int32=True))
    with pytest.raises(RuntimeError, match="output tensor's dtype is wrong"):
        torch.searchsorted(_dev(seq), _dev(values), out=torch.empty(0, device="spyre"))
    with pytest.raises(RuntimeError, match="sorter index out of range"):
        torch.searchsorted(_dev(seq), _dev(values), sorter=torch.tensor([0, 1, 3], device="spyre"))
    with pytest.raises(RuntimeError, match="side and right can't be set to opposites"):
        torch.searchsorted(_dev(seq), _dev(values), side="left", right=True)
    bounds = torch.tensor([-1.0, 0.0, 1.0])
    _check(lambda v, b: torch.bucketize(v, b, right=True, out=torch.empty(0, dtype=torch.int64, device=v.device)),
           torch.tensor([[-1.0, 0.5], [1.0, 0.0]]), bounds)  # fmt: skip


# -------------------------------------------------------------------------------------------- histograms
def test_histogram_values_on_edges():
    # Edges 0, 1, 2, 3, 4: a value on an inner edge counts in the bin to its right, the last edge in
    # the last bin, NaN and values outside nowhere.
    x = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 4.0, NAN, -1.0, 5.0, 2.5])
    _check(torch.histogram, x, 4, range=(0.0, 4.0))
    _check(torch.histogram, x, torch.tensor([0.0, 1.0, 2.0, 4.0]))
    _check(torch.histogram, torch.ones(3), 3)  # one point: the range widened by 1/2 either side
    _check(torch.histogram, torch.empty(0), 3)


@pytest.mark.parametrize("density", [False, True])
def test_histogram_weighted(density):
    g = _gen(2)
    x, w = torch.randn(5, 7, generator=g), torch.randn(5, 7, generator=g)
    _check(torch.histogram, x, 6, weight=w, density=density, close=True)
    _check(torch.histogram, x.t(), torch.sort(torch.randn(5, generator=g))[0], weight=w.t(), density=density,
           close=True)  # fmt: skip


def test_histogramdd_counts_and_unsorted_edges():
    g = _gen(3)
    x = torch.randn(6, 5, 3, generator=g)
    w = torch.randn(6, 5, generator=g)
    _check(torch.histogramdd, x, [2, 3, 2], weight=w, density=True, close=True)
    _check(torch.histogramdd, x, [3, 1, 2], range=[-1.0, 1.0, 0.0, 2.0, -2.0, 0.5])
    # Unsorted edges: CPU's binary search decides the bins, and so does ours.
    _check(torch.histogramdd, x, [torch.randn(4, generator=g) for _ in range(3)], weight=w)
    _check(torch.histogramdd, torch.empty(0, 2), [2, 2])


def test_bincount():
    g = _gen(4)
    for dtype in (torch.int64, torch.int32, torch.int8):
        x = torch.randint(0, 10, (20,), generator=g).to(dtype)
        _check(torch.bincount, x)
        _check(torch.bincount, x, minlength=15)
        _check(torch.bincount, x, weights=torch.randn(20, generator=g), close=True)
        _check(torch.bincount, x, weights=torch.randint(-9, 9, (20,), generator=g).to(dtype))  # float64 result
    _check(torch.bincount, torch.empty(0, dtype=torch.int64), minlength=3)
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.bincount(torch.tensor([1, -1], device="spyre"))


# ---------------------------------------------------------------------------------------------- unique
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.float16])
def test_unique_flat_and_consecutive(dtype):
    g = _gen(5)
    for shape in ((), (7,), (4, 5), (3, 0, 2)):
        x = torch.randint(0, 3, shape, generator=g).to(dtype)
        _check(torch.unique, x, return_inverse=True, return_counts=True)
        _check(torch.unique, x, sorted=False)
        _check(torch.unique_consecutive, x, return_inverse=True, return_counts=True)
    # Every NaN is a value of its own, after the numbers.
    _check(torch.unique, torch.tensor([3.0, NAN, 1.0, 3.0, NAN]), return_inverse=True, return_counts=True)
    _check(torch.unique_consecutive, torch.tensor([1.0, NAN, NAN, 2.0, 2.0]), return_counts=True)


def test_unique_along_a_dim():
    g = _gen(6)
    x = torch.randint(0, 2, (6, 3, 4), generator=g)
    for dim in (0, 1, -1):
        _check(torch.unique, x, dim=dim, return_inverse=True, return_counts=True)
        _check(torch.unique_consecutive, x, dim=dim, return_inverse=True, return_counts=True)
    _check(torch.unique, torch.randn(5, 3, generator=g).repeat(2, 1), dim=0, return_counts=True)
    _check(torch.unique, torch.empty(3, 0), dim=1, return_inverse=True)
    with pytest.raises(RuntimeError, match="0 sized dimensions"):
        torch.unique(torch.empty(3, 0, device="spyre"), dim=0)


def test_index_fill_backward_uses_unique():
    x = torch.randn(4, 5, requires_grad=True)
    value = torch.tensor(2.0, requires_grad=True)
    index = torch.tensor([1, 3, 1])
    want = torch.autograd.grad(x.index_fill(1, index, value).sum(), (x, value))
    xd, vd = x.detach().to("spyre").requires_grad_(), value.detach().to("spyre").requires_grad_()
    got = torch.autograd.grad(xd.index_fill(1, index.to("spyre"), vd).sum(), (xd, vd))
    _same(got, want)


# ------------------------------------------------------------------------------------------------ mode
@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.bool])
def test_mode_ties_pick_cpus_index(dtype):
    g = _gen(7)
    # Rows of up to 16 (the last occurrence wins) and longer rows, where CPU's introsort decides.
    for shape, dim in (((5, 5, 5), 1), ((7, 40), 1), ((40, 3), 0), ((2, 3000), 1)):
        _check(torch.mode, torch.randint(0, 3, shape, generator=g).to(dtype), dim)
    _check(torch.mode, torch.randint(-9, 10, (4, 5), generator=g).to(dtype), keepdim=True)
    _check(torch.mode, torch.tensor(3).to(dtype))


def test_mode_equally_frequent_and_signed_zero():
    _check(torch.mode, torch.tensor([3.0, 1.0, 3.0, 1.0, 2.0]))  # the smaller of two
    _check(torch.mode, torch.tensor([0.0, -0.0, 0.0, -0.0] * 6))
    _check(torch.mode, torch.sort(torch.randint(0, 5, (3, 50), generator=_gen(8)))[0], 1)  # sorted rows
    _check(torch.mode, torch.randn(3000, generator=_gen(9)))  # all distinct: the smallest


def test_mode_backward():
    x = torch.randint(0, 3, (4, 20), generator=_gen(10)).float().requires_grad_()
    want = torch.autograd.grad(torch.mode(x, 1).values.sum(), x)
    xd = x.detach().to("spyre").requires_grad_()
    _same(torch.autograd.grad(torch.mode(xd, 1).values.sum(), xd), want)


# ------------------------------------------------------------------------------------- index helpers
def test_nonzero_static_and_out_forms():
    g = _gen(11)
    x = torch.randint(0, 2, (4, 3), generator=g).float()
    for size in (0, 2, 12, 20):
        _check(torch.nonzero_static, x, size=size)
        _check(torch.nonzero_static, x, size=size, fill_value=7)
    _check(torch.nonzero_static, torch.tensor(1.0), size=2)
    _check(lambda t: torch.nonzero(t, out=torch.empty(0, dtype=torch.int64, device=t.device)), x)
    mask = torch.randint(0, 2, (4, 3), generator=g).bool()
    _check(lambda t, m: torch.masked_select(t, m, out=torch.empty(0, device=t.device)), x, mask)
    with pytest.raises(RuntimeError, match="same scalar type"):
        torch.masked_select(_dev(x), _dev(mask), out=torch.empty(0, dtype=torch.int64, device="spyre"))
    with pytest.raises(RuntimeError, match="scalar type Long"):
        torch.nonzero(_dev(x), out=torch.empty(0, dtype=torch.int32, device="spyre"))


def test_repeat_interleave_tensor():
    for repeats in ([1, 2, 0, 3], [0, 0], [0, 2, 0], [], [4]):
        for dtype in (torch.int64, torch.int32):
            _check(torch.repeat_interleave, torch.tensor(repeats, dtype=dtype))
    _check(torch.repeat_interleave, torch.tensor([1, 2]), output_size=3)
    x = torch.randn(2, 3, 4, requires_grad=True)
    want = torch.autograd.grad(x.repeat_interleave(torch.arange(3), dim=1).sum(), x)
    xd = x.detach().to("spyre").requires_grad_()
    _same(torch.autograd.grad(xd.repeat_interleave(torch.arange(3, device="spyre"), dim=1).sum(), xd), want)


@pytest.mark.parametrize("fn", [torch.tril_indices, torch.triu_indices])
def test_triangle_indices(fn):
    for args in ((3, 3), (4, 3, 1), (3, 4, -1), (0, 3), (5, 7, 10), (5, 7, -10)):
        for dtype in (torch.int64, torch.int32):
            _same(fn(*args, dtype=dtype, device="spyre"), fn(*args, dtype=dtype))
