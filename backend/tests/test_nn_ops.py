"""Distances, grid sampling, embedding bags, CTC and margin losses and anti-aliased interpolation
on the device (torch_spyre/_nn_*.py) against CPU torch, forward and backward, with the CPU
fallback forbidden: every op these functions reach must run natively."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
import torch_spyre

S = "spyre"


@pytest.fixture(autouse=True)
def _native_only():
    torch_spyre.set_cpu_fallback("error")
    yield
    torch_spyre.set_cpu_fallback("warn")


def _on(x, device):
    if not isinstance(x, torch.Tensor):
        return x
    y = x.detach().to(device)
    return y.requires_grad_(x.requires_grad)


def _check(fn, *args, rtol=1e-4, atol=1e-5, grad=True, **kwargs):
    """fn on CPU and on spyre: results equal within tolerance, and the gradients of every input
    that requires one for a random weighting of the result."""
    cpu_args = [_on(a, "cpu") for a in args]
    dev_args = [_on(a, S) for a in args]
    want = fn(*cpu_args, **kwargs)
    got = fn(*dev_args, **kwargs)
    assert got.device.type == S
    torch.testing.assert_close(got.cpu(), want, rtol=rtol, atol=atol, equal_nan=True)
    leaves = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad]
    if not grad or not leaves:
        return
    weight = torch.randn(want.shape, generator=torch.Generator().manual_seed(3))
    want_g = torch.autograd.grad(want, [cpu_args[i] for i in leaves], weight)
    got_g = torch.autograd.grad(got, [dev_args[i] for i in leaves], weight.to(S))
    for a, b in zip(got_g, want_g, strict=True):
        torch.testing.assert_close(a.cpu(), b, rtol=rtol, atol=atol, equal_nan=True)


def _randn(*shape, grad=True, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).requires_grad_(grad)


# ---- cdist and pdist ----------------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, math.inf])
@pytest.mark.parametrize(
    "mode", ["use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist"]
)
def test_cdist_broadcast_batches(p, mode):
    # 30 rows on one side: the "if necessary" mode takes the matrix-product form for p = 2.
    _check(torch.cdist, _randn(2, 1, 5, 3), _randn(3, 30, 3, seed=1), p, mode)


def test_cdist_edges():
    _check(torch.cdist, _randn(4, 3).transpose(0, 1), _randn(5, 4, seed=1), 1.0)  # non-contiguous
    _check(torch.cdist, _randn(0, 3), _randn(4, 3, seed=1), 2.0)
    _check(torch.cdist, _randn(1, 1), _randn(5, 1, seed=1), math.inf)
    # ties of the inf-norm and zero distances: CPU's gradient conventions
    a = torch.tensor([[0.0, 1.0], [2.0, 2.0]], requires_grad=True)
    b = torch.tensor([[1.0, 0.0], [2.0, 2.0]], requires_grad=True)
    for p in (math.inf, 2.0, 0.5, 3.0):
        _check(torch.cdist, a, b, p, "donot_use_mm_for_euclid_dist")


def test_cdist_errors():
    with pytest.raises(RuntimeError, match="same number of columns"):
        torch.cdist(torch.zeros(2, 3, device=S), torch.zeros(2, 4, device=S))
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.cdist(torch.zeros(2, 3, device=S), torch.zeros(2, 3, device=S), -1.0)


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 2.0, 10.0, math.inf])
def test_pdist(p):
    _check(F.pdist, _randn(6, 4), p)


def test_pdist_edges():
    _check(F.pdist, _randn(1, 4))
    _check(F.pdist, _randn(5, 1))
    _check(F.pdist, torch.tensor([[1.0, 2.0], [1.0, 2.0], [0.0, 3.0]], requires_grad=True))  # a zero distance


# ---- grid sampling ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_2d(mode, padding, align):
    grid = (torch.rand(2, 4, 6, 2, generator=torch.Generator().manual_seed(1)) * 2.6 - 1.3).requires_grad_()
    _check(F.grid_sample, _randn(2, 3, 5, 7), grid, mode=mode, padding_mode=padding, align_corners=align)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_3d(mode, padding):
    grid = (torch.rand(2, 3, 4, 2, 3, generator=torch.Generator().manual_seed(1)) * 2.6 - 1.3).requires_grad_()
    for align in (False, True):
        _check(F.grid_sample, _randn(2, 3, 4, 5, 6), grid, mode=mode, padding_mode=padding, align_corners=align)


def test_grid_sample_edges():
    grid = torch.rand(1, 3, 3, 2, generator=torch.Generator().manual_seed(1)) * 2 - 1
    x = _randn(1, 2, 5, 5).transpose(2, 3)  # non-contiguous input
    _check(F.grid_sample, x, grid.requires_grad_(), align_corners=False)
    # A 1-wide input with reflection and align_corners: every position reflects to 0.
    _check(F.grid_sample, _randn(1, 1, 1, 4), grid.detach(), padding_mode="reflection", align_corners=True)
    # only the grid requires a gradient (the backward's output mask)
    _check(F.grid_sample, _randn(1, 2, 4, 4, grad=False), grid.detach().requires_grad_(), align_corners=True)


# ---- embedding_bag ------------------------------------------------------------------------------

INDICES = torch.tensor([5, 1, 6, 5, 6, 2, 0, 3])
OFFSETS = torch.tensor([0, 3, 3, 6])


def _bag(weight, indices=INDICES, offsets=OFFSETS, **kwargs):
    return F.embedding_bag(indices.to(weight.device), weight, offsets.to(weight.device), **kwargs)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 5])
def test_embedding_bag(mode, padding_idx):
    # bag 1 is empty; padding index 5 empties bag ... none, but thins bag 0
    _check(_bag, _randn(10, 4), mode=mode, padding_idx=padding_idx)
    last = torch.tensor([0, 3, 3, 8])
    _check(_bag, _randn(10, 4), offsets=last, mode=mode, padding_idx=padding_idx, include_last_offset=True)


def test_embedding_bag_variants():
    psw = torch.rand(8, generator=torch.Generator().manual_seed(2)).requires_grad_()
    _check(lambda w, p: _bag(w, per_sample_weights=p, mode="sum"), _randn(10, 4), psw)
    _check(lambda w, p: _bag(w, per_sample_weights=p, mode="sum", padding_idx=6), _randn(10, 4), psw)
    _check(_bag, _randn(10, 4), mode="mean", scale_grad_by_freq=True)
    two_d = torch.tensor([[2, 1, 1], [0, 2, 4], [2, 0, 0]])
    for mode in ("sum", "mean", "max"):
        _check(lambda w, m=mode: F.embedding_bag(two_d.to(w.device), w, mode=m, padding_idx=2), _randn(5, 3))
    # max: a tie goes to the first index, as on CPU
    tied = torch.tensor([[1.0, 2.0], [1.0, 2.0], [0.0, 5.0]], requires_grad=True)
    _check(lambda w: _bag(w, torch.tensor([0, 1, 2, 1]), torch.tensor([0, 2]), mode="max"), tied)
    _check(_bag, _randn(10, 4).transpose(0, 1).contiguous().transpose(0, 1), mode="sum")  # non-contiguous weight


def test_embedding_bag_errors():
    w = torch.zeros(10, 4, device=S)
    with pytest.raises(RuntimeError, match="offsets\\[0\\] has to be 0"):
        F.embedding_bag(torch.tensor([1, 2], device=S), w, torch.tensor([1], device=S))
    with pytest.raises(RuntimeError, match="can not be greater than input's length"):
        F.embedding_bag(torch.tensor([1, 2], device=S), w, torch.tensor([0, 3], device=S))
    with pytest.raises(RuntimeError, match="out of bounds"):
        F.embedding_bag(torch.tensor([1, 10], device=S), w, torch.tensor([0], device=S))


# ---- CTC loss -----------------------------------------------------------------------------------


def _log_probs(t=12, b=3, c=5, seed=0):
    return _randn(t, b, c, grad=False, seed=seed).log_softmax(2).requires_grad_()


TARGETS = torch.tensor([[1, 2, 3, 1], [2, 2, 4, 3], [3, 4, 2, 1]])


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss(reduction, zero_infinity):
    # batch 2 cannot align 3 labels in 2 steps (an infinite loss); batch 1 repeats a label
    def loss(lp, tensors):
        lengths = ([12, 10, 2], [4, 3, 3])
        if tensors:
            lengths = tuple(torch.tensor(v, device=lp.device) for v in lengths)
        return F.ctc_loss(lp, TARGETS.to(lp.device), *lengths, reduction=reduction, zero_infinity=zero_infinity)

    _check(loss, _log_probs(), False)
    _check(loss, _log_probs(), True)


def test_ctc_loss_edges():
    flat = torch.tensor([1, 2, 3, 1, 2, 2, 4])

    def concatenated(lp):  # 1-d targets; an input of length 0 with an empty target (loss 0)
        return F.ctc_loss(lp, flat.to(lp.device), [12, 9, 0], [4, 3, 0], reduction="none")

    _check(concatenated, _log_probs())
    _check(lambda lp: F.ctc_loss(lp, TARGETS.to(lp.device), [12, 12, 12], [0, 1, 4], blank=4), _log_probs())
    _check(lambda lp: F.ctc_loss(lp, TARGETS[0, :2].to(lp.device), [12], [2]), _log_probs(b=1)[:, 0])  # unbatched
    with pytest.raises(RuntimeError, match="input_lengths to have value at most 12"):
        F.ctc_loss(_on(_log_probs(), S), TARGETS.to(S), [13, 12, 12], [4, 4, 4])


# ---- margin losses ------------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss(reduction):
    # -1 ends a sample's targets; a repeated target counts twice, as on CPU
    target = torch.tensor([[3, 0, -1, 1], [0, 1, 2, 3], [1, 1, -1, 2]])
    _check(lambda x: F.multilabel_margin_loss(x, target.to(x.device), reduction=reduction), _randn(3, 4))
    _check(lambda x: F.multilabel_margin_loss(x, torch.tensor([1, 1, 0, 1, 4], device=x.device)), _randn(5))
    # One sample unreduced is 0-dim on CPU (module_db's nn.MultiLabelMarginLoss found [1])
    _check(lambda x: F.multilabel_margin_loss(x, torch.tensor([1, 2, -1, 0], device=x.device), reduction=reduction),
           _randn(4))  # fmt: skip
    _check(lambda x: F.multilabel_margin_loss(x, torch.tensor(0, device=x.device)), _randn(()))


def test_margin_loss_out_overloads():
    x, target = _randn(3, 4, grad=False), torch.tensor([[3, 0, -1, 1], [0, 1, 2, 3], [1, 1, -1, 2]])
    want = torch.ops.aten.multilabel_margin_loss_forward(x, target, 1)
    out, is_target = torch.empty(0, device=S), torch.empty(0, device=S)
    got = torch.ops.aten.multilabel_margin_loss_forward.output(x.to(S), target.to(S), 1, output=out,
                                                               is_target=is_target)  # fmt: skip
    assert got[0] is out and got[1] is is_target
    torch.testing.assert_close((out.cpu(), is_target.cpu()), tuple(want))
    grad_input = torch.empty(0, device=S)
    one = torch.tensor(1.0)
    torch.ops.aten.multi_margin_loss_backward.grad_input(one.to(S), x.to(S), target[:, 0].to(S), 2, 0.5, None, 1,
                                                         grad_input=grad_input)  # fmt: skip
    want = torch.ops.aten.multi_margin_loss_backward(one, x, target[:, 0], 2, 0.5, None, 1)
    torch.testing.assert_close(grad_input.cpu(), want)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("p", [1, 2])
def test_multi_margin_loss(reduction, p):
    target = torch.tensor([3, 0, 1, 3])
    weight = torch.rand(4, generator=torch.Generator().manual_seed(4))

    def loss(x):
        return F.multi_margin_loss(x, target.to(x.device), p=p, margin=0.7, weight=weight.to(x.device),
                                   reduction=reduction)  # fmt: skip

    _check(loss, _randn(4, 4))
    _check(lambda x: F.multi_margin_loss(x, torch.tensor(1, device=x.device), p=p), _randn(5))


# ---- anti-aliased bilinear interpolation --------------------------------------------------------


@pytest.mark.parametrize(("size", "align"), [((3, 3), False), ((5, 12), True), ((14, 30), False), ((1, 1), False)])
def test_bilinear_antialias(size, align):
    _check(lambda x: F.interpolate(x, size=size, mode="bilinear", antialias=True, align_corners=align),
           _randn(2, 3, 10, 20))  # fmt: skip


def test_bilinear_antialias_scales():
    _check(lambda x: torch.ops.aten._upsample_bilinear2d_aa(x, [3, 3], True, 1.7, 0.9), _randn(2, 3, 10, 20))
    _check(lambda x: F.interpolate(x, scale_factor=(0.6, 1.3), mode="bilinear", antialias=True), _randn(1, 2, 9, 7))
    out = torch.empty(0, device=S)
    x = _randn(1, 2, 9, 7, grad=False)
    torch.ops.aten._upsample_bilinear2d_aa.out(x.to(S), [4, 3], False, out=out)
    torch.testing.assert_close(out.cpu(), torch.ops.aten._upsample_bilinear2d_aa(x, [4, 3], False))
