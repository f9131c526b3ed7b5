"""Defects of values, dtypes and checks found by random programs and PyTorch's own tests, each
against CPU torch: silent wrong results (precision, integer ranges, type promotion, rounding) and
missing checks where CPU raises. One test per defect, named after the behaviour it pins down."""

from __future__ import annotations

import random
import re
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F
import torch_spyre

S = "spyre"


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32])
def test_linspace_and_logspace_of_integers_truncate_as_cpu(dtype):
    """Found by the conformance sweep in int dtypes: the float32 decomposition put points of
    linspace(-9.5, 4.2, 50) on the other side of an integer from CPU's double arithmetic."""
    for start, end, steps in [(-9.5, 4.2, 50), (0, 7, 50), (-3, 10, 50)]:
        want = torch.linspace(start, end, steps, dtype=dtype)
        torch.testing.assert_close(torch.linspace(start, end, steps, dtype=dtype, device=S).cpu(), want)  # ints: exact
        out = torch.empty(0, dtype=dtype, device=S)
        torch.linspace(start, end, steps, out=out)
        torch.testing.assert_close(out.cpu(), want)
        got = torch.logspace(0, 2, 7, dtype=dtype, device=S).cpu()
        torch.testing.assert_close(got, torch.logspace(0, 2, 7, dtype=dtype))


def _fused_linspace(start, end, steps):
    """CPU's integer linspace where its kernel is built with FMA (AVX2 and later, arm64), written
    from its definition with exact fractions: the ends truncated, the step (end - start) / (steps -
    1) in float64, each point start + step * k (the first half) or end - step * (steps - 1 - k)
    rounded once to float64, then truncated."""
    s, e = int(start), int(end)
    if steps < 2:
        return [s] * steps
    step = Fraction((float(e) - float(s)) / (steps - 1))
    return [int(float(s + step * k if k < steps // 2 else e - step * (steps - 1 - k))) for k in range(steps)]


@pytest.mark.parametrize("front_door", ["eager", "compile"])
def test_integer_linspace_is_cpus_float64_points_on_the_card(front_door):
    """Found by --slow conformance: linspace into int64 fell back to the CPU, and compiled it took
    the float32 reference (linspace(-64, 74, 11)[5] was 5, CPU's is 4: 74 - 13.8 * 5 fused in
    float64 is 4.9999999999999964). Now both front doors give CPU's points with the fallback
    forbidden."""
    rng = random.Random(5)
    cases = [(-64, 74, 11), (92, -237, 22), (-9.5, 4.2, 50), (0, 1, 50), (3, 3, 5), (0, 7, 1), (0, 7, 0)]
    cases += [(1.9, -1.9, 4), (-(2**40), 2**40 + 7, 33)]
    cases += [(rng.randint(-300, 300), rng.randint(-300, 300), rng.randint(2, 120)) for _ in range(150)]
    fused_cpu = torch.backends.cpu.get_cpu_capability() != "DEFAULT"
    make = lambda a, b, n, dtype: torch.linspace(a, b, n, dtype=dtype, device=S)  # noqa: E731
    if front_door == "compile":
        make = torch.compile(make, backend="spyre", dynamic=False)
    torch_spyre.set_cpu_fallback("error")
    for a, b, n in cases[: 12 if front_door == "compile" else None]:
        want = _fused_linspace(a, b, n)
        for dtype in (torch.int64, torch.int32) if abs(a) < 2**31 else (torch.int64,):
            torch._dynamo.reset()  # each call compiles (numbers specialize; past the limit it would run eagerly)
            assert make(a, b, n, dtype).cpu().tolist() == want, (a, b, n, dtype)
            if fused_cpu:
                assert torch.linspace(a, b, n, dtype=dtype).tolist() == want, (a, b, n, dtype)
    out = torch.empty(0, dtype=torch.int16, device=S)
    assert torch.linspace(-64, 74, 11, out=out) is out
    assert out.cpu().tolist() == _fused_linspace(-64, 74, 11)


def test_integer_linspace_refuses_as_cpu():
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.linspace(0, 7, -1, dtype=torch.int64, device=S)
    with pytest.raises(RuntimeError, match="overflow"):
        torch.linspace(0, 2**40, 5, dtype=torch.int32, device=S)
    with pytest.raises(RuntimeError, match="Bool"):
        torch.linspace(0, 1, 3, dtype=torch.bool, device=S)
    assert torch.linspace(-3, 5, 4, dtype=torch.uint8, device=S).cpu().tolist() == [253, 170, 87, 5]  # as CPU


@pytest.mark.parametrize(
    "op",
    [
        lambda t: torch.kthvalue(t, 1),
        lambda t: t.median(),
        lambda t: t.median(0),
        lambda t: t.nanmedian(),
        lambda t: t.nanmedian(0),
        lambda t: torch.bucketize(t, t),
    ],
)
def test_selections_of_bool_raise_as_cpu(op):
    """Found by the fuzzer's kthvalue: CPU has no bool kernel for these, the decompositions ran."""
    x = torch.tensor([True, False, True])
    with pytest.raises(NotImplementedError, match="not implemented for 'Bool'"):
        op(x)
    with pytest.raises(NotImplementedError, match="not implemented for 'Bool'"):
        op(x.to(S))


@pytest.mark.parametrize("largest", [False, True])
def test_topk_of_int64_takes_the_k_best_over_the_whole_range(largest):
    x = torch.tensor([5, -3, 7, -3, 0, 9, -8, 2, 2**63 - 1, -(2**63)], dtype=torch.int64)
    got = torch.topk(x.to(S), 4, largest=largest)
    want = torch.topk(x, 4, largest=largest)
    assert torch.equal(got.values.cpu(), want.values)
    assert torch.equal(x[got.indices.cpu()], want.values)  # ties may come in another order


def test_a_zero_dim_host_tensor_promotes_as_a_tensor_not_a_number():
    cases = [
        (torch.tensor(1, dtype=torch.int32), torch.tensor(2**40), torch.add),
        (torch.tensor(1.0, dtype=torch.bfloat16), torch.tensor(0.001), torch.add),
        (torch.tensor(-2, dtype=torch.int32), torch.tensor(0), lambda x, lo: torch.clamp(x, min=lo)),
        (torch.tensor([1, -2], dtype=torch.int32), torch.tensor(0), lambda x, lo: torch.clamp(x, min=lo)),
    ]
    for x, host, op in cases:
        want, got = op(x, host), op(x.to(S), host)
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want), (x, host)


@pytest.mark.parametrize("m", [1e4, 1e5, 1e7, 1e30])
def test_log_softmax_and_cross_entropy_keep_their_precision_for_large_logits(m):
    x = torch.tensor([[m, m, 0.0, 0.0]])
    torch.testing.assert_close(torch.log_softmax(x.to(S), -1).cpu(), torch.log_softmax(x, -1), rtol=1e-6, atol=0)
    target = torch.tensor([1])
    got = F.cross_entropy(x.to(S), target.to(S)).cpu()
    torch.testing.assert_close(got, F.cross_entropy(x, target), rtol=1e-6, atol=0)


def test_int64_arg_reductions_are_exact_above_2_to_the_53():
    x = torch.tensor([[2**60, 2**60 + 1, 2**60 - 1], [-(2**62), -(2**62) - 1, 5]])
    d = x.to(S)
    assert torch.equal(d.argmax(1).cpu(), x.argmax(1)) and torch.equal(d.argmin(1).cpu(), x.argmin(1))
    assert d.argmax().item() == x.argmax().item() and d.argmin().item() == x.argmin().item()
    for got, want in zip(d.max(1), x.max(1), strict=True):
        assert torch.equal(got.cpu(), want)


def _raises_like_cpu(fn):
    with pytest.raises(Exception) as cpu:
        fn("cpu")
    with pytest.raises(type(cpu.value)):
        fn(S)


@pytest.mark.parametrize(
    "name",
    ["amax", "amin", "all", "argmax", "softmax", "log_softmax", "tril", "neg", "var", "mean", "add", "index_put"],
)
def test_an_out_of_the_wrong_dtype_raises_where_cpu_raises(name):
    def call(d):
        x = torch.ones(2, 3, device=d)
        i = torch.ones(2, 3, dtype=torch.int64, device=d)
        out = {"dtype": torch.int64, "device": d}
        calls = {
            "amax": lambda: torch.amax(i, 1, out=torch.empty(0, device=d)),
            "amin": lambda: torch.amin(x, 1, out=torch.empty(0, dtype=torch.int32, device=d)),
            "all": lambda: torch.all(x, 1, out=torch.empty(0, device=d)),
            "argmax": lambda: torch.argmax(x, 1, out=torch.empty(0, dtype=torch.int32, device=d)),
            "softmax": lambda: torch.softmax(x, 1, out=torch.empty(0, dtype=torch.float16, device=d)),
            "log_softmax": lambda: torch.log_softmax(x, 1, out=torch.empty(0, **out)),
            "tril": lambda: torch.tril(x, out=torch.empty(0, **out)),
            "neg": lambda: torch.neg(i, out=torch.empty(0, device=d)),
            "var": lambda: torch.var(x, 1, out=torch.empty(0, **out)),
            "mean": lambda: torch.mean(x, 1, out=torch.empty(0, **out)),
            "add": lambda: torch.add(x, x, out=torch.empty(0, **out)),
            "index_put": lambda: i.index_put_((torch.tensor([1], device=d),), torch.tensor([2.7], device=d)),
        }
        calls[name]()

    _raises_like_cpu(call)


def test_cat_into_an_out_it_cannot_cast_to_raises_and_writes_nothing():
    out = torch.full((2,), 7, dtype=torch.int64, device=S)
    with pytest.raises(Exception, match="can't be cast"):
        torch.cat([torch.ones(2, device=S)], out=out)
    assert torch.equal(out.cpu(), torch.full((2,), 7))


def test_a_host_out_or_index_for_a_spyre_op_raises_as_on_cpu_and_cuda():
    x = torch.ones(3, device=S)
    with pytest.raises(RuntimeError, match="same device"):
        torch.add(x, x, out=torch.empty(3))
    with pytest.raises(RuntimeError, match="same device"):
        x.index_select(0, torch.tensor([0]))
    with pytest.raises(RuntimeError, match="same device"):
        x.gather(0, torch.tensor([0]))


def test_cross_entropy_gradient_is_zero_where_every_target_is_ignored():
    x = torch.randn(2, 3)
    for d in ("cpu", S):
        leaf = x.to(d).detach().requires_grad_()
        loss = F.cross_entropy(leaf, torch.tensor([1, 1], device=d), ignore_index=1)
        loss.backward()
        assert loss.isnan().item() and torch.equal(leaf.grad.cpu(), torch.zeros(2, 3))


def test_histc_bins_as_cpu_at_the_edges():
    """An element just below max whose quotient rounds up to the bin count counts in the last bin,
    and the range's ends are rounded to the input's type first (as CPU's bin edges are)."""
    just_below = torch.tensor([0.99999994, 1.0, -1.0, 0.59999996, 0.6, float("nan"), 1.0000001])
    # 0.702 is 0.703125 in bfloat16, so that element is in range.
    for t, lo, hi in ((just_below, -1, 1), (torch.tensor([0.1, 0.703125]).bfloat16(), 0, 0.702)):
        got = torch.histc(t.to("spyre"), 5, lo, hi)
        assert torch.equal(got.cpu(), torch.histc(t, 5, lo, hi)), (got, torch.histc(t, 5, lo, hi))
    # CPU has no integer histogram; spyre counts integers as CUDA does (transformers' MoE path
    # calls histc on int32 expert ids off the CPU): as CPU counts them in float.
    ids = torch.tensor([0, 3, 3, 1, 7, -1, 2], dtype=torch.int32)
    got = torch.histc(ids.to("spyre"), 4, 0, 3)
    assert got.dtype == torch.int32 and torch.equal(got.cpu(), torch.histc(ids.float(), 4, 0, 3).int())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bins, lo, hi", [(100, 0, 0), (10, -10, 10), (3, 0, 0), (257, -2, 2)])
def test_half_precision_histc_bins_as_cpu(dtype, bins, lo, hi):
    """CPU's histc computes an fp16 or bf16 element's bin in that type, each step rounded (257
    bins are 256 in bf16); spyre computed it in fp32, and counted a few elements a bin over
    (a scan of op_db's every sample in bf16; eager and compiled alike). Fewer than 256 elements
    a bin: CPU adds the ones in bf16 too, so its counts stall there (per thread), where spyre
    counts exactly in int64 and rounds once."""
    x = (torch.randn(300, generator=torch.Generator().manual_seed(0)) * 4).to(dtype)
    want = torch.histc(x, bins, lo, hi)
    for got in (torch.histc(x.to(S), bins, lo, hi), torch.compile(torch.histc, backend="spyre")(x.to(S), bins, lo, hi)):
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want), (got.cpu() - want).abs().max()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["native", "fallback"])
@pytest.mark.parametrize("op", ["det", "slogdet", "logdet"])
def test_determinant_gradients_of_a_non_contiguous_matrix_are_not_transposed(op, dtype):
    """linalg.det, slogdet and logdet backward of a transposed (non-contiguous) input gave the
    transposed gradient through the CPU fallback; float64 still takes the fallback."""
    f = {"det": torch.linalg.det, "slogdet": lambda x: torch.linalg.slogdet(x)[1], "logdet": torch.logdet}[op]
    a = torch.randn(3, 4, 4, dtype=dtype, generator=torch.Generator().manual_seed(3))
    a = a @ a.mT + 4 * torch.eye(4, dtype=dtype)  # positive definite: every log is defined
    grads = []
    for dev in ("cpu", S):
        x = a.to(dev).mT.detach().requires_grad_()
        assert not x.is_contiguous()
        grads.append(torch.autograd.grad(f(x).sum(), [x])[0].cpu())
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-5)


def test_exp_below_minus_104_is_zero_as_cpu():
    """The SFP's vectorised exp floored at a denormal (2.9e-39) below about -104, -inf included, so
    exp(-inf) and masked softmax rows were not exactly 0 (found by the logcumsumexp kernel)."""
    x = torch.tensor([-float("inf"), -1e4, -200.0, -104.5, -103.0, -90.0, -87.5, 0.0, 88.0])
    for f in (torch.exp, torch.sigmoid, F.silu, lambda t: torch.logaddexp(t, torch.zeros_like(t))):
        got, want = f(x.to(S)).cpu(), f(x)
        assert torch.equal(got[want == 0], want[want == 0])  # exactly 0 (and the sign of silu's -0)
        assert torch.equal(got[want == 0].signbit(), want[want == 0].signbit())
        # Elsewhere within an ulp or two: CPU's own exp differs by host (AVX2 and AVX-512 builds
        # of it round exp(88) 2 ulps apart), and the device has one answer on every host.
        torch.testing.assert_close(got, want, rtol=3e-7, atol=0, equal_nan=True)
    assert torch.softmax(torch.tensor([0.0, -float("inf")], device=S), 0).cpu().tolist() == [1.0, 0.0]


def test_int64_division_of_the_smallest_value_by_minus_one_wraps_as_cpu():
    """floor_divide(INT64_MIN, -1) wraps to INT64_MIN on CPU; the device gave 0."""
    a = torch.tensor([-(2**63), 7, -(2**63)])
    b = torch.tensor([-1, -1, 3])
    assert torch.equal(torch.floor_divide(a.to(S), b.to(S)).cpu(), torch.floor_divide(a, b))
    assert torch.equal((a.to(S) // -1).cpu(), a // -1)


def test_arange_into_a_bool_out_raises_as_cpu():
    """The sweep of every OpInfo sample found arange writing 0, 1, 1, ... into a bool out= that CPU
    refuses (it has no bool arange)."""
    with pytest.raises(NotImplementedError, match="not implemented for 'Bool'"):
        torch.arange(3, out=torch.empty(3, dtype=torch.bool))
    out = torch.empty(3, dtype=torch.bool, device=S)
    with pytest.raises(NotImplementedError, match="not implemented for 'Bool'"):
        torch.arange(3, out=out)


@pytest.mark.parametrize("op", ["silu_backward", "mish_backward"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_silu_and_mish_backward_round_once_as_cpu(op, dtype):
    """Seed 801 program 47102: torch composes these backwards of ops for devices other than CPU,
    each rounding to fp16, so a gradient came out an ulp off and a cancellation blew it up."""
    fn = getattr(torch.ops.aten, op)
    x = torch.tensor([2.00390625, -3.0, 0.5, 7.0, -0.001], dtype=dtype)
    g = torch.full((5,), 0.5, dtype=dtype)
    assert torch.equal(fn(g.to(S), x.to(S)).cpu(), fn(g, x))


@pytest.mark.parametrize("columns", [1, 5, 300])
def test_a_float_scatter_add_into_repeated_rows_sums_in_index_order_as_cpu(columns):
    """Found by the slow conformance sweep in grid_sampler_3d's backward (one element 3e-5 off):
    with more indices than one tile holds, the cores split the index tiles, so a row named by
    several tiles summed in an order that depended on the cores' timing. CPU adds in index
    order, and so must we: bit for bit, with every row named thousands of times."""
    g = torch.Generator().manual_seed(7)
    n = 20_000
    index = torch.randint(0, 3, (n,), generator=g)
    source = torch.randn(n, columns, generator=g) * 1000
    base = torch.randn(3, columns, generator=g)
    want = base.index_add(0, index, source)
    got = base.to(S).index_add(0, index.to(S), source.to(S)).cpu()
    assert torch.equal(got, want)
    want = base.scatter_add(0, index[:, None].expand(n, columns), source)
    got = base.to(S).scatter_add(0, index[:, None].expand(n, columns).to(S), source.to(S)).cpu()
    assert torch.equal(got, want)
    # A plain scatter keeps the last row in index order (CPU's serial kernel does; its parallel one,
    # here, does not promise it, so the reference is the rows themselves).
    last = torch.stack([source[(index == r).nonzero()[-1, 0]] for r in range(3)])
    assert torch.equal(base.to(S).index_copy(0, index.to(S), source.to(S)).cpu(), last)


def test_grid_sampler_3d_input_gradient_at_a_clamped_corner_matches_cpu():
    """The conformance sample that found it: border padding clamps many positions to one corner."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 4, 5, 6, 7, generator=g, requires_grad=True)
    grid = (torch.rand(2, 9, 10, 11, 3, generator=g) * 6 - 3).requires_grad_(True)
    out = F.grid_sample(x, grid, padding_mode="border", align_corners=False)
    grad = torch.randn(out.shape, generator=g)
    want = torch.autograd.grad(out, (x, grid), grad)
    xs, gs = x.detach().to(S).requires_grad_(True), grid.detach().to(S).requires_grad_(True)
    got = torch.autograd.grad(F.grid_sample(xs, gs, padding_mode="border", align_corners=False), (xs, gs), grad.to(S))
    torch.testing.assert_close(got[0].cpu(), want[0], rtol=0, atol=0)
    torch.testing.assert_close(got[1].cpu(), want[1])


@pytest.mark.parametrize("shape", [(0, 3), (2, 0, 3), (0,)])
def test_max_and_min_of_an_empty_tensor_run_on_the_card_or_raise_as_cpu(shape):
    """amax, amin, max, min, argmax and argmin of any empty tensor took the CPU fallback for CPU's
    error, also along a non-empty dim, where CPU returns an empty result. Now the card gives that
    result, and raises CPU's error (type and message) along an empty dim or with no dim."""
    calls = [
        lambda x: x.amax(), lambda x: x.amin(-1), lambda x: x.amax(0, keepdim=True), lambda x: x.max(),
        lambda x: x.max(-1), lambda x: x.min(0), lambda x: x.argmax(), lambda x: x.argmin(-1),
        lambda x: x.argmax(0, keepdim=True),
    ]  # fmt: skip
    x = torch.randn(shape)
    torch_spyre.set_cpu_fallback("error")
    for call in calls:
        try:
            want = call(x)
        except (IndexError, RuntimeError) as e:
            with pytest.raises(type(e), match=re.escape(str(e))):
                call(x.to(S))
            continue
        got = call(x.to(S))
        for g, w in zip(*(t if isinstance(t, tuple) else (t,) for t in (got, want)), strict=True):
            assert g.shape == w.shape and g.dtype == w.dtype and g.device.type == S


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_addcmul_and_lerp_round_once_as_cpu(dtype):
    """Found while checking linspace's arithmetic: CPU's compiled loops make addcmul's product and
    sum, and lerp's, one fused multiply-add (lerp choosing its formula by |weight| < 0.5); the
    card rounded twice, 1 ulp off in about a fifth of fp32 elements (Adam's moments go through
    lerp), and took the other formula for weights below -0.5. Bit for bit now, where CPU fuses."""
    if torch.backends.cpu.get_cpu_capability() == "DEFAULT":
        pytest.skip("CPU's kernels are built without FMA here, so CPU rounds twice")
    g = torch.Generator().manual_seed(1)
    a, b, c = (torch.randn(20_000, generator=g).to(dtype) for _ in range(3))
    w = (torch.rand(20_000, generator=g) * 3 - 1).to(dtype)  # weights in [-1, 2)
    calls = [
        lambda a, b, c, w: torch.addcmul(a, b, c), lambda a, b, c, w: torch.addcmul(a, b, c, value=0.3),
        lambda a, b, c, w: a.clone().addcmul_(b, c, value=2), lambda a, b, c, w: torch.lerp(a, b, w),
        lambda a, b, c, w: torch.lerp(a, b, 0.3), lambda a, b, c, w: torch.lerp(a, b, -0.7),
        lambda a, b, c, w: a.clone().lerp_(b, 0.9),
    ]  # fmt: skip
    for call in calls:
        want = call(a, b, c, w)
        got = call(*(t.to(S) for t in (a, b, c, w))).cpu()
        torch.testing.assert_close(got, want, rtol=0, atol=0)
