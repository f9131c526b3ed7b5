"""Defects of views, memory and writes found by random programs and PyTorch's own tests, each
against CPU torch: writes through views that must reach their base, overlapping windows written
in CPU's order or refused, zero-size and huge views, storages, and inputs that used to kill the
process. One test per defect, named after the behaviour it pins down."""

from __future__ import annotations

import pytest
import torch
import torch_spyre
from conftest import run_python

S = "spyre"


def test_unfold_is_a_view_whose_writes_reach_its_base():
    a = torch.zeros(6, device=S)
    u = a.unfold(0, 2, 2)
    u.fill_(1)
    assert u._base is a and u.stride() == (2, 1)
    assert torch.equal(a.cpu(), torch.ones(6))
    torch_spyre.set_cpu_fallback("error")  # repeat is made of unfold: it must not need the CPU
    x = torch.arange(6.0)
    assert torch.equal(x.to(S).repeat(2, 3).cpu(), x.repeat(2, 3))


def test_writes_through_real_and_imag_reach_a_complex_tensor():
    c = torch.zeros(3, dtype=torch.complex64, device=S)
    c.real.fill_(2)
    c.imag.fill_(-3)
    assert torch.equal(c.cpu(), torch.full((3,), 2 - 3j, dtype=torch.complex64))
    abs_, angle = torch.tensor([2.0, 3.0]), torch.tensor([0.5, 1.0])
    assert torch.equal(torch.polar(abs_.to(S), angle.to(S)).cpu(), torch.polar(abs_, angle))


def test_conjugate_views_copy_and_resolve_like_cpu():
    c = torch.tensor([1 + 2j, 3 - 1j, -2 + 0.5j], dtype=torch.complex64)
    d = c.to(S)
    assert torch.equal(d.conj().cpu(), c.conj().resolve_conj())
    assert torch.equal(d.conj().resolve_conj().cpu(), c.conj().resolve_conj())
    assert torch.equal(d.conj().imag.cpu(), c.conj().imag)  # a negative view of the imaginary parts


def test_deterministic_index_put_keeps_the_last_write_of_a_repeated_index():
    g = torch.Generator().manual_seed(0)
    idx, vals = torch.randint(0, 50, (5000,), generator=g), torch.randn(5000, 8, generator=g)
    torch.use_deterministic_algorithms(True)
    try:
        want = torch.zeros(50, 8).index_put_((idx,), vals)
        got = torch.zeros(50, 8, device=S).index_put_((idx.to(S),), vals.to(S))
    finally:
        torch.use_deterministic_algorithms(False)
    assert torch.equal(got.cpu(), want)


def test_set_grows_a_storage_too_small_for_the_view_as_cpu_does():
    for d in ("cpu", S):
        s = torch.arange(4.0, device=d).untyped_storage()
        t = torch.empty(0, device=d).set_(s, 0, (10,))
        assert t.shape == (10,) and s.nbytes() == 40
        assert torch.equal(t[:4].cpu(), torch.arange(4.0))


def test_module_to_spyre_keeps_its_parameters_and_a_lazy_module_stays_lazy():
    lin = torch.nn.Linear(3, 2)
    weight = lin.weight
    lin.to(S)
    assert lin.weight is weight and weight.device.type == S  # as on CUDA: the Parameter is kept
    torch_spyre.set_cpu_fallback("error")
    torch.manual_seed(0)
    lazy = torch.nn.LazyLinear(4).to(S)
    assert isinstance(lazy.weight, torch.nn.UninitializedParameter)
    x = torch.randn(2, 5)
    out = lazy(x.to(S))
    assert lazy.weight.shape == (4, 5) and lazy.weight.device.type == S
    assert torch.allclose(out.cpu(), x @ lazy.weight.detach().cpu().T + lazy.bias.detach().cpu(), atol=1e-5)


# Inputs that killed the process: each runs in a fresh interpreter, and the test compares what it
# prints with CPU's.
_CRASHES = {
    "index_put_ accumulating into a zero-size tensor": """
x = torch.zeros(1, 0, 0, 7, device=d)
r = x.index_put_((torch.tensor([0], device=d),), torch.zeros(1, 0, 0, 7, device=d), accumulate=True)""",
    "a bool mask over a zero-size tensor": """
r = torch.ones(3, 0, device=d)[torch.ones(3, 0, dtype=torch.bool, device=d)]""",
    "two empty index lists over a zero-size dim": "r = torch.empty(10, 0, device=d)[[], []]",
    "index_add into a zero-size row": """
r = torch.zeros(2, 3, 0, device=d).index_add(1, torch.tensor([0, 1], device=d), torch.ones(2, 2, 0, device=d))""",
    "the backward of indexing a zero-size tensor": """
x = torch.zeros(0, 3, device=d, requires_grad=True)
x[torch.tensor([], dtype=torch.long, device=d)].sum().backward()
r = x.grad""",
    "a bool mask over an offset, transposed view": """
x = torch.arange(24.0, device=d).view(2, 3, 4)
v = x[-1:, :, None].transpose(1, -3)
m = torch.ones(v.shape, dtype=torch.bool, device=d)
m[0, 0] = False
r = v[m]""",
}


@pytest.mark.parametrize("name", sorted(_CRASHES))
def test_an_input_that_killed_the_process_gives_cpus_answer(name):
    code = "import torch, torch_spyre\nfor d in ('cpu', 'spyre'):\n"
    code += "".join(f"    {line}\n" for line in _CRASHES[name].strip().splitlines())
    code += "    print(d, tuple(r.shape), r.cpu().flatten().tolist())\n"
    p = run_python(code, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    cpu, spyre = (line.split(" ", 1)[1] for line in p.stdout.strip().splitlines())
    assert cpu == spyre


@pytest.mark.parametrize(
    "write",
    [
        lambda v: v.unfold(0, 2, 1).copy_(torch.tensor([10.0, 20.0], device=v.device)),
        lambda v: v.unfold(0, 4, 2).copy_(torch.arange(20.0, device=v.device).reshape(5, 4).t().contiguous().t()),
        lambda v: v.unfold(0, 4, 2).copy_(v[:4]),  # the source is part of the windows
        lambda v: v.unfold(0, 4, 2).copy_(v[1:5].view(torch.int32)),  # ... and read as another type
        lambda v: v.unfold(0, 3, 1).copy_(torch.arange(3.0).half()),  # from the host, converted
    ],
)
def test_a_copy_into_overlapping_windows_writes_in_cpus_order(write):
    """CPU's copy_ into an unfold whose windows overlap writes each shared element more than once,
    the last write in its loop order winning; the device's copy had the tiles' order instead."""
    cpu = torch.arange(12.0)
    spyre = cpu.to("spyre")
    write(cpu)
    write(spyre)
    assert torch.equal(spyre.cpu(), cpu)


def test_an_in_place_op_on_a_huge_overlapping_view_raises_without_listing_its_elements():
    """2.8e10 windows over 3.5e5 elements must share some: refused at once, where listing their
    offsets asked the host for 221 GB (fuzz seed 903 program 24022)."""
    v = torch.arange(1, 1048579, 3, device="spyre")
    with pytest.raises(RuntimeError, match="refers to a single memory location"):
        v.unfold(0, 121286, 1).abs_()
    assert torch.equal(v.cpu(), torch.arange(1, 1048579, 3))  # nothing was written


def test_an_in_place_input_overlapping_the_output_where_cpu_cannot_see_it_raises():
    """CPU's overlap check gives up on non-contiguous views and then reads elements it has already
    written, in its loop order; the device reads tile by tile, so no answer would agree: spyre
    refuses the op with CPU's own overlap error (fuzz seed 500)."""
    for dev in ("cpu", "spyre"):
        v = torch.arange(12.0, device=dev).view(3, 4).t()
        if dev == "cpu":
            v.add_(v[0])  # CPU computes it: the rows after the first read the updated first row
            continue
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            v.add_(v[0])
        assert torch.equal(v.cpu(), torch.arange(12.0).view(3, 4).t())  # and nothing was written


def test_an_in_place_op_on_an_output_overlapping_itself_raises():
    """exp_ of an unfolded tensor whose windows share elements: CPU's overlap check cannot see the
    sharing and exponentiates the shared elements twice, in its loop order (fuzz seed 701); spyre
    refuses it with torch's error for the overlap it sees. A fill that reads nothing still works."""
    cpu = torch.arange(10.0)
    cpu.unfold(0, 3, 2).exp_()
    assert cpu[2] == torch.exp(torch.exp(torch.tensor(2.0)))  # CPU's answer depends on its loop order
    v = torch.arange(10.0, device=S)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        v.unfold(0, 3, 2).exp_()
    assert torch.equal(v.cpu(), torch.arange(10.0))
    v.unfold(0, 3, 2).masked_fill_(v.unfold(0, 3, 2) > 4, 0)
    assert v.cpu().tolist() == [0, 1, 2, 3, 4, 0, 0, 0, 0, 9]


def test_indexing_a_row_of_a_huge_permuted_view_moves_only_that_row():
    """x[i] of a permuted unfold (43,271 x 153,128 elements, 53 GB were it packed): the gather
    packed the whole view first and ran out of host memory (fuzz seed 701); the selected row's
    elements are gathered where they lie."""
    v = torch.arange(1, 1048579, 3)
    view = v.unfold(0, 43271, 2).permute(1, 0)
    got = v.to(S).unfold(0, 43271, 2).permute(1, 0)[torch.tensor([-31487], device=S)]
    assert torch.equal(got.cpu(), view[torch.tensor([-31487])])
