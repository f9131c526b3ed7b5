"""In-place ops, out= arguments and views give CPU's results, natively and through the CPU fallback.

Every case runs the same code on a CPU tensor and a spyre tensor and compares the whole base
tensor afterwards, so a write that lands in the wrong elements (or outside the view) fails.
"""

from __future__ import annotations

import pytest
import torch
import torch_spyre

# (name, function of a base tensor that mutates a view of it). The first group has native kernels;
# the second runs through the CPU fallback (ops the device has no kernel for), so both paths that
# write into a strided view are covered.
NATIVE_CASES = [
    ("strided add_", lambda b: b[::2].add_(1)),
    ("column fill_", lambda b: b.t()[0].fill_(5)),
    ("offset mul_", lambda b: b.view(-1)[3:9].mul_(3)),
    ("neg out= strided", lambda b: torch.neg(b[:, 1].clone(), out=b[:, 0])),
    ("add out= transposed", lambda b: torch.add(b.t().clone(), 2, out=b.t())),
    ("zero_ on a column block", lambda b: b[:, 1:3].zero_()),
]
# Through the CPU fallback: float64 has no arithmetic on the card, so these ops always take it.
FALLBACK_CASES = [
    ("strided add_", lambda b: b[::2].add_(torch.ones_like(b[::2]))),
    ("column mul_", lambda b: b.t()[1].mul_(torch.full_like(b.t()[1], 3.0))),
    ("offset atan2_", lambda b: b.view(-1)[5:11].atan2_(b.view(-1)[0:6].clone())),
    ("exp out= strided", lambda b: torch.exp(b[:, 1].clone(), out=b[:, 2])),
    ("exp out= transposed", lambda b: torch.exp(b.t().clone(), out=b.t())),
]


def _base() -> torch.Tensor:
    return torch.arange(1.0, 25.0).reshape(6, 4) / 7


def _check(fn, dtype=torch.float32) -> None:
    cpu = _base().to(dtype)
    dev = _base().to(dtype).to("spyre")
    fn(cpu)
    fn(dev)
    torch.testing.assert_close(dev.cpu(), cpu, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,fn", NATIVE_CASES, ids=[c[0] for c in NATIVE_CASES])
def test_native_writes_into_views(name, fn):
    torch_spyre.set_cpu_fallback("error")
    _check(fn)


@pytest.mark.parametrize("name,fn", FALLBACK_CASES, ids=[c[0] for c in FALLBACK_CASES])
def test_fallback_writes_into_views(name, fn):
    torch_spyre.set_cpu_fallback("allow")
    before = sum(torch_spyre.fallback_counts().values())
    _check(fn, torch.float64)
    assert sum(torch_spyre.fallback_counts().values()) > before, "it ran natively: this test is about the fallback"


def test_issue_examples():
    """The three cases from the bug report, spelled as a user would."""
    b = torch.zeros(6, device="spyre")
    b[::2].add_(1)
    assert b.cpu().tolist() == [1, 0, 1, 0, 1, 0]

    m = torch.zeros(3, 3, device="spyre")
    m.t()[0].fill_(5)
    assert m.cpu().tolist() == [[5, 0, 0], [5, 0, 0], [5, 0, 0]]

    torch_spyre.set_cpu_fallback("allow")
    x = torch.tensor([1.0, 2.0, 3.0])
    c = torch.zeros(6, device="spyre")
    torch.special.bessel_j0(x.to("spyre"), out=c[::2])
    torch.testing.assert_close(c.cpu()[::2], torch.special.bessel_j0(x))
    assert c.cpu()[1::2].tolist() == [0, 0, 0]


def test_resize_to_same_size_keeps_strides():
    b = torch.zeros(4, 4, device="spyre")
    v = b.t()
    v.resize_(4, 4)
    assert v.stride() == (1, 4)


def test_resize_to_new_size_is_contiguous_and_keeps_data():
    t = torch.arange(6.0).to("spyre")
    t.resize_(2, 5)
    assert t.stride() == (5, 1)
    assert t.cpu().view(-1)[:6].tolist() == [0, 1, 2, 3, 4, 5]


def test_failed_resize_leaves_tensor_unchanged():
    t = torch.arange(4.0).to("spyre")
    with pytest.raises(RuntimeError, match="negative size"):
        t.resize_(-1)
    with pytest.raises(torch.OutOfMemoryError):
        t.resize_(1 << 40, 1 << 5)
    assert t.shape == (4,)
    assert t.cpu().tolist() == [0, 1, 2, 3]


def test_out_argument_of_wrong_size_is_resized():
    torch_spyre.set_cpu_fallback("allow")
    out = torch.empty(0, device="spyre")
    x = torch.arange(1.0, 5.0)
    torch.special.bessel_j0(x.to("spyre"), out=out)
    torch.testing.assert_close(out.cpu(), torch.special.bessel_j0(x))
