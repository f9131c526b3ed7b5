"""Every native op against CPU PyTorch, over PyTorch's own OpInfo sample inputs and our own cases.

Each case runs under TORCH_SPYRE_CPU_FALLBACK=error, so a sample that does not run natively fails
with the operator's name. The default run takes the first samples of each op and dtype; with
``--slow`` (see conftest.py) it takes all of them.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch
import torch_spyre
from conftest import run_python
from torch.testing._internal.common_methods_invocations import op_db
from torch_spyre import _decomposed

# OpInfo names (and variant names) that run natively on spyre.
NATIVE = {
    # unary
    "abs", "neg", "nn.functional.relu", "sign", "floor", "ceil", "trunc", "square",
    "exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt", "reciprocal", "tanh",
    "sigmoid", "erf", "sin", "cos", "nn.functional.silu", "nn.functional.gelu", "logical_not",
    "isnan", "bitwise_not", "round", "sgn",
    # binary
    "add", "sub", "rsub", "mul", "div.no_rounding_mode", "div.trunc_rounding", "div.floor_rounding",
    "true_divide", "maximum", "minimum", "pow", "remainder", "fmod", "floor_divide", "atan2",
    "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
    "bitwise_and", "bitwise_or", "bitwise_xor",
    # select, clamp, fill
    "where", "masked_fill", "clamp", "clamp_min", "clamp_max", "fill", "zero_",
    # reductions
    "sum", "prod", "mean", "amax", "amin", "max.reduction_with_dim", "max.reduction_no_dim",
    "min.reduction_with_dim", "min.reduction_no_dim", "argmax", "argmin", "var", "std",
    "softmax", "log_softmax",
    # matmul family (float types: integer matmuls take the CPU fallback, docs/user-guide.md)
    "mm", "bmm", "addmm", "addmm.decomposed", "baddbmm", "mv", "dot", "matmul", "nn.functional.linear",
    "einsum", "inner",
    # expressions (one fused pass each)
    "addcmul", "addcdiv", "lerp", "isinf", "isposinf", "isneginf", "isfinite",
    # normalisation
    "nn.functional.layer_norm", "nn.functional.rms_norm",
    # losses, data movement, logical reductions
    "nn.functional.nll_loss", "nn.functional.cross_entropy", "cat", "tril", "triu", "all", "any",
    "cumsum", "cumprod", "isin", "flip", "topk", "sort", "argsort", "msort", "masked_select", "nonzero",
    # indexing
    "index_select", "gather", "scatter", "scatter_add", "index_add", "nn.functional.embedding", "take", "put",
    "scatter_reduce.sum", "scatter_reduce.prod", "scatter_reduce.mean", "scatter_reduce.amax", "scatter_reduce.amin",
    "index_reduce.prod", "index_reduce.mean", "index_reduce.amax", "index_reduce.amin",
    # derived math (expressions of the SFP's functions)
    "tan", "sinh", "cosh", "log10", "sinc", "frac", "nan_to_num", "xlogy", "special.xlog1py", "special.entr",
    "logit", "heaviside", "angle", "fmax", "fmin", "logaddexp", "logaddexp2", "hypot",
    # activations
    "nn.functional.leaky_relu", "nn.functional.hardtanh", "nn.functional.relu6", "nn.functional.elu",
    "nn.functional.celu", "nn.functional.selu", "nn.functional.hardsigmoid", "nn.functional.hardswish",
    "nn.functional.threshold", "nn.functional.softshrink", "nn.functional.hardshrink", "nn.functional.mish",
    # more matmuls, movement and reductions
    "addmv", "addbmm", "roll", "trace", "count_nonzero", "nansum", "nanmean",
    # torch's decompositions and ours, into native ops (torch_spyre/_decomposed.py): norms, pooling,
    # interpolation, losses
    "nn.functional.batch_norm", "_batch_norm_with_update", "nn.functional.instance_norm",
    "nn.functional.group_norm", "native_group_norm", "nn.functional.local_response_norm",
    "nn.functional.max_pool1d", "nn.functional.max_pool2d", "max_pool2d_with_indices_backward",
    "nn.functional.avg_pool1d", "nn.functional.avg_pool2d", "nn.functional.avg_pool3d",
    "nn.functional.adaptive_avg_pool1d", "nn.functional.adaptive_avg_pool2d",
    "nn.functional.interpolate.area", "nn.functional.interpolate.bicubic", "nn.functional.interpolate.bilinear",
    "nn.functional.interpolate.nearest", "nn.functional.interpolate.nearest-exact",
    "nn.functional.interpolate.trilinear", "nn.functional.upsample_bilinear", "nn.functional.upsample_nearest",
    "nn.functional.unfold", "nn.functional.channel_shuffle", "nn.functional.glu", "nn.functional.logsigmoid",
    "nn.functional.prelu", "nn.functional.mse_loss", "nn.functional.smooth_l1_loss", "nn.functional.huber_loss",
    "nn.functional.binary_cross_entropy", "nn.functional.binary_cross_entropy_with_logits",
    "nn.functional.multilabel_soft_margin_loss", "nn.functional.triplet_margin_loss",
    "nn.functional.triplet_margin_with_distance_loss", "nn.functional.pairwise_distance",
    "nn.functional.cosine_similarity", "nn.functional.normalize",
    "norm", "norm.fro", "norm.inf", "linalg.norm", "linalg.vector_norm", "dist", "vdot", "linalg.vecdot",
    "cross", "linalg.cross", "aminmax", "std_mean", "var_mean", "cov", "corrcoef", "equal",
    "kthvalue", "median", "nanmedian", "index_copy", "narrow_copy", "round.decimals_0", "round.decimals_3",
    "round.decimals_neg_3",
    # special functions (expressions of the SFP's functions)
    "atan", "asin", "acos", "asinh", "acosh", "atanh", "erfc", "special.erfcx", "erfinv", "lgamma", "digamma",
    "polygamma.polygamma_n_0", "polygamma.polygamma_n_1", "polygamma.polygamma_n_2", "polygamma.polygamma_n_3",
    "polygamma.polygamma_n_4", "mvlgamma.mvlgamma_p_1", "mvlgamma.mvlgamma_p_3", "i0", "special.i0e",
    "special.i1", "special.i1e", "special.log_ndtr", "signbit", "copysign",
    # more special functions (backend/compiler/src/ops/special.cpp; Laguerre and Legendre in _special.py)
    *(SPECIAL_FUNCTIONS := (
        "special.bessel_j0", "special.bessel_j1", "special.bessel_y0", "special.bessel_y1",
        "special.modified_bessel_i0", "special.modified_bessel_i1", "special.modified_bessel_k0",
        "special.modified_bessel_k1", "special.scaled_modified_bessel_k0", "special.scaled_modified_bessel_k1",
        "special.spherical_bessel_j0", "special.airy_ai", "special.ndtri", "special.zeta", "igamma", "igammac",
        "special.chebyshev_polynomial_t", "special.chebyshev_polynomial_u", "special.chebyshev_polynomial_v",
        "special.chebyshev_polynomial_w", "special.shifted_chebyshev_polynomial_t",
        "special.shifted_chebyshev_polynomial_u", "special.shifted_chebyshev_polynomial_v",
        "special.shifted_chebyshev_polynomial_w", "special.hermite_polynomial_h", "special.hermite_polynomial_he",
        "special.laguerre_polynomial_l", "special.legendre_polynomial_p",
    )),
}  # fmt: skip
FLOAT_ONLY = {"mm", "bmm", "addmm", "baddbmm", "mv", "dot", "matmul", "nn.functional.linear", "einsum", "inner",
              "addmv", "addbmm", "vdot", "linalg.vecdot"}  # fmt: skip
# Ops the device computes as a truncated series in fp32 (CPU's kernel works in double): fp32 is
# held to the summation tolerance.
SERIES = {"polygamma", "mvlgamma", *SPECIAL_FUNCTIONS}
# Ops whose fp16 and bf16 CPU kernels round intermediate products (cross) or compute weights in
# the narrow type (interpolation, norms): the device rounds once, so it is held to being at
# least as close as CPU to the float64 answer, not to CPU's rounding.
NARROW_INTERMEDIATES = {"cross", "linalg.cross", "nn.functional.instance_norm", "nn.functional.batch_norm",
                        "_batch_norm_with_update", "nn.functional.group_norm", "native_group_norm",
                        "nn.functional.interpolate.bicubic", "nn.functional.interpolate.trilinear",
                        "nn.functional.interpolate.bilinear", "nn.functional.upsample_bilinear",
                        "nn.functional.local_response_norm"}  # fmt: skip

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int8, torch.int64, torch.bool]
DEFAULT_SAMPLES = 6


def _full_name(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


OPS = [op for op in op_db if _full_name(op) in NATIVE or (op.name in NATIVE and not op.variant_test_name)]
CASES = [
    pytest.param(op, dtype, id=f"{_full_name(op)}-{str(dtype).removeprefix('torch.')}")
    for op in OPS
    for dtype in DTYPES
    if dtype in op.supported_dtypes("cpu") and (dtype.is_floating_point or op.name not in FLOAT_ONLY)
]


def test_every_listed_op_has_an_opinfo():
    assert {_full_name(op) for op in OPS} | {op.name for op in OPS} >= NATIVE


def _to(x, device):
    return x.to(device) if isinstance(x, torch.Tensor) else x


def _compare(actual, expected, dtype, sums=False):
    """`sums`: the op adds up many products (the matmul family), whose fp32 order differs from
    CPU's blocked kernels, so fp32 gets a summation tolerance."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), type(actual)
        assert actual.device.type == "spyre"
        # fp16 and bf16: the device computes in fp32 and rounds once; CPU kernels round some
        # intermediates (a bf16 log-sum near 1 is off by up to one ulp, 2**-7).
        tol = {torch.float16: {"rtol": 2e-2, "atol": 2e-3}, torch.bfloat16: {"rtol": 2e-2, "atol": 1e-2}}
        if sums:
            tol[torch.float32] = {"rtol": 1e-4, "atol": 1e-4}
        tol = tol.get(expected.dtype, {})
        torch.testing.assert_close(actual.cpu(), expected, equal_nan=True, **tol)
    elif isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            _compare(a, e, dtype, sums)
    else:
        assert actual == expected


def _same_selection(actual, expected, sample):
    """topk: the values must match; among equal values any index is right, so the indices are
    checked by what they select, not compared with CPU's."""
    values, indices = actual
    _compare(values, expected[0], None)
    dim = sample.args[1] if len(sample.args) > 1 else sample.kwargs.get("dim", -1)
    source = sample.input if sample.input.dim() else sample.input.view(1)
    picked = torch.gather(source, dim, indices.cpu().view(expected[1].shape) if source.dim() else indices.cpu().view(1))
    _compare(picked.to("spyre").view(expected[0].shape), expected[0], None)


def _sort_args(sample) -> tuple[int, bool]:
    """(dim, descending) of a sort or argsort sample, given positionally or by name."""
    args, kwargs = sample.args, sample.kwargs
    return (args[0] if args else kwargs.get("dim", -1)), (args[1] if len(args) > 1 else kwargs.get("descending", False))


def _same_order(actual, expected, sample):
    """sort: the values must match. The device's sort is stable; CPU's default one need not be,
    so among equal values the indices are checked by what they select, and must equal CPU's
    stable sort's exactly."""
    values, indices = actual
    _compare(values, expected[0], None)
    _same_argsort(indices, expected[1], sample)


def _same_argsort(indices, expected, sample):
    source = sample.input if sample.input.dim() else sample.input.view(1)
    dim, descending = _sort_args(sample)
    picked = torch.gather(source, dim, indices.cpu().view(source.shape))
    want = torch.sort(source, dim=dim, descending=descending, stable=True)
    torch.testing.assert_close(picked, want.values, equal_nan=True)
    assert torch.equal(indices.cpu().view(source.shape), want.indices)


def _as_close_as_cpu(op, sample, actual, expected):
    """Each element of the device's result is within CPU's own error (against float64) plus one
    ulp of the narrow type, or matches CPU's within the usual tolerance."""
    wide = sample.transform(lambda t: t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t)
    exact = op(wide.input, *wide.args, **wide.kwargs)
    for a, e, x in zip(*(r if isinstance(r, (tuple, list)) else [r] for r in (actual, expected, exact)), strict=True):
        a = a.cpu()
        assert a.dtype == e.dtype and a.shape == e.shape
        if not e.is_floating_point():
            assert torch.equal(a, e)
            continue
        ulp = torch.finfo(e.dtype).eps * x.abs().clamp_min(1.0)
        bound = (e.double() - x).abs() + ulp
        assert ((a.double() - x).abs() <= bound).all(), f"{op.name}: farther from float64 than CPU"


def _same_kth(actual, expected, sample, first=1):
    """kthvalue, median: the values must match; among equal values CPU's index is its selection
    algorithm's, so the device's index is checked by what it selects. `first`: the position of
    `dim` among the sample's arguments."""
    if isinstance(expected, torch.Tensor):  # median() of the whole tensor: a value only
        return _compare(actual, expected, None)
    values, indices = actual
    _compare(values, expected[0], None)
    dim = sample.args[first] if len(sample.args) > first else sample.kwargs.get("dim", -1)
    keep = sample.args[first + 1] if len(sample.args) > first + 1 else sample.kwargs.get("keepdim", False)
    source = sample.input if sample.input.dim() else sample.input.view(1)
    idx = indices.cpu() if keep or not sample.input.dim() else indices.cpu().unsqueeze(dim)
    picked = torch.gather(source, dim if sample.input.dim() else 0, idx.view(-1) if not sample.input.dim() else idx)
    torch.testing.assert_close(picked.view(expected[0].shape), expected[0], equal_nan=True)


# Ops whose result may rightly differ from CPU's: how to check them instead.
SPECIAL_CHECKS = {
    "topk": _same_selection,
    "sort": _same_order,
    "argsort": _same_argsort,
    "kthvalue": _same_kth,
    "median": partial(_same_kth, first=0),
    "nanmedian": partial(_same_kth, first=0),
}


@pytest.mark.parametrize("op,dtype", CASES)
def test_op_matches_cpu(op, dtype, request):
    limit = None if request.config.getoption("--slow") else DEFAULT_SAMPLES
    torch_spyre.set_cpu_fallback("error")
    ran = 0
    for sample in op.sample_inputs("cpu", dtype):
        if limit is not None and ran >= limit:
            break
        try:
            expected = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001 - a sample CPU rejects says nothing about spyre
            continue
        moved = sample.transform(lambda t: _to(t, "spyre"))
        actual = op(moved.input, *moved.args, **moved.kwargs)
        if op.name in SPECIAL_CHECKS:
            SPECIAL_CHECKS[op.name](actual, expected, sample)
        elif _full_name(op) in NARROW_INTERMEDIATES and dtype in (torch.float16, torch.bfloat16):
            _as_close_as_cpu(op, sample, actual, expected)
        else:
            _compare(actual, expected, dtype, sums=op.name in FLOAT_ONLY or op.name in SERIES)
        ran += 1
    assert ran > 0, "no sample ran"


BACKWARD_CASES = [
    pytest.param(op, id=_full_name(op))
    for op in OPS
    if op.supports_autograd and torch.float32 in op.supported_dtypes("cpu")
]


def _float_tensors(tree) -> list[torch.Tensor]:
    flat = tree if isinstance(tree, (tuple, list)) else [tree]
    return [t for t in flat if isinstance(t, torch.Tensor) and t.is_floating_point()]


@pytest.mark.parametrize("op", BACKWARD_CASES)
def test_op_backward_matches_cpu(op, request):
    """Gradients of every differentiable native op, in float32, through native backward kernels."""
    limit = None if request.config.getoption("--slow") else 3
    torch_spyre.set_cpu_fallback("error")
    ran = 0
    for sample in op.sample_inputs("cpu", torch.float32, requires_grad=True):
        if limit is not None and ran >= limit:
            break
        cpu_inputs = [sample.input, *sample.args, *sample.kwargs.values()]
        leaves = [t for t in cpu_inputs if isinstance(t, torch.Tensor) and t.requires_grad]
        try:
            outs = _float_tensors(op(sample.input, *sample.args, **sample.kwargs))
        except Exception:  # noqa: BLE001 - a sample CPU rejects says nothing about spyre
            continue
        outs = [o for o in outs if o.requires_grad]
        if not leaves or not outs:
            continue
        grads_out = [torch.randn_like(o) for o in outs]
        want = torch.autograd.grad(outs, leaves, grads_out, allow_unused=True)

        moved = sample.transform(
            lambda t: t.detach().to("spyre").requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
        )
        dev_inputs = [moved.input, *moved.args, *moved.kwargs.values()]
        dev_leaves = [t for t in dev_inputs if isinstance(t, torch.Tensor) and t.requires_grad]
        dev_outs = [o for o in _float_tensors(op(moved.input, *moved.args, **moved.kwargs)) if o.requires_grad]
        got = torch.autograd.grad(dev_outs, dev_leaves, [g.to("spyre") for g in grads_out], allow_unused=True)
        for g, w in zip(got, want, strict=True):
            assert (g is None) == (w is None)
            if w is not None:
                torch.testing.assert_close(g.cpu(), w, rtol=1e-4, atol=1e-4, equal_nan=True)
        ran += 1
    if ran == 0:
        pytest.skip("no differentiable sample")


# Our own cases: layouts and sizes that OpInfo samples rarely cover.
SHAPES = [(0,), (1,), (7,), (63,), (65,), (130, 3), (3, 130), (5, 6, 7), (2, 3, 4, 5), (300_001,)]


def _layouts(shape, dtype, gen):
    """(name, base, view): `view` applied to `base` on either device gives the same layout."""
    base = torch.randn(shape, generator=gen).to(dtype)
    yield "contiguous", base, lambda t: t
    if len(shape) >= 2:
        yield "transposed", base.transpose(0, 1).contiguous(), lambda t: t.transpose(0, 1)
    if shape and shape[-1] > 1:
        wide = torch.zeros(*shape[:-1], shape[-1] * 2, dtype=dtype)
        wide[..., ::2] = base
        yield "strided", wide, lambda t: t[..., ::2]
    flat = torch.zeros(base.numel() + 5, dtype=dtype)
    flat[5:] = base.reshape(-1)
    yield "offset", flat, lambda t: t[5:].view(shape)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_layouts_and_sizes(shape, dtype, cpu_gen):
    torch_spyre.set_cpu_fallback("error")
    for layout, base, view in _layouts(shape, dtype, cpu_gen):
        x, d = view(base), view(base.to("spyre"))
        assert d.stride() == x.stride() and d.storage_offset() == x.storage_offset(), layout
        pairs = [
            (torch.exp(d), torch.exp(x)),
            (d * 2 + d, x * 2 + x),
            (torch.where(d > 0, d, -d), torch.where(x > 0, x, -x)),
            (d.to(torch.float32), x.to(torch.float32)),
            (d.contiguous(), x.contiguous()),
        ]
        if x.dim() >= 1 and x.numel() > 0:
            pairs += [(d.sum(-1), x.sum(-1)), (d.amax(0), x.amax(0)), (d.argmax(-1), x.argmax(-1))]
        for got, want in pairs:
            _compare(got, want, dtype)


def test_broadcasting_and_type_promotion():
    torch_spyre.set_cpu_fallback("error")
    a = torch.randn(4, 1, 3)
    b = torch.randn(5, 1)
    i = torch.arange(15, dtype=torch.int32).reshape(5, 3)
    h = torch.randn(3).half()
    da, db, di, dh = (t.to("spyre") for t in (a, b, i, h))
    _compare(da + db, a + b, None)
    _compare(di * 0.5, i * 0.5, None)
    _compare(di / 4, i / 4, None)
    _compare(di // 4, i // 4, None)
    _compare(da * dh, a * h, None)
    _compare(di + dh, i + h, None)
    _compare(da + torch.tensor(2.5), a + torch.tensor(2.5), None)
    _compare(torch.add(da, db, alpha=3), torch.add(a, b, alpha=3), None)
    _compare(torch.sub(da, db, alpha=0.5), torch.sub(a, b, alpha=0.5), None)


def test_in_place_out_and_errors():
    torch_spyre.set_cpu_fallback("error")
    x = torch.arange(6, dtype=torch.int64)
    d = x.to("spyre")
    with pytest.raises(RuntimeError, match="can't be cast"):
        d.exp_()
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        d.add_(torch.ones(2, 6, dtype=torch.int64, device="spyre"))
    out = torch.empty(0, device="spyre")
    torch.exp(d, out=out)
    _compare(out, torch.exp(x), None)
    f = torch.zeros(6, device="spyre")
    torch.lt(d, 3, out=f)
    _compare(f, (x < 3).float(), None)


def test_indexing_edge_cases_match_cpu():
    """Negative and multi-dimensional indices, and the inputs CPU rejects, which must raise here
    instead of reaching memory outside the tensor or faulting the device queue."""
    torch_spyre.set_cpu_fallback("error")
    x = torch.arange(20.0).view(5, 4)
    d = x.to("spyre")
    neg = torch.tensor([[-1, 0], [2, -5]])
    _compare(d[neg.to("spyre")], x[neg], None)
    _compare(d[:, torch.tensor([-1, -4], device="spyre")], x[:, [-1, -4]], None)
    for accumulate in (False, True):
        want, got = x.clone(), d.clone()
        values = torch.tensor([[10.0], [20.0]])  # broadcasts against x[neg]'s shape [2, 2, 4]
        want.index_put_((neg,), values, accumulate=accumulate)
        got.index_put_((neg.to("spyre"),), values.to("spyre"), accumulate=accumulate)
        _compare(got, want, None)
    # masked_scatter_: nothing selected takes nothing from an empty source; a short source raises.
    none = torch.zeros(4, dtype=torch.bool, device="spyre")
    _compare(torch.ones(4, device="spyre").masked_scatter_(none, torch.empty(0, device="spyre")), torch.ones(4), None)
    with pytest.raises(RuntimeError, match="at least as many elements as ones in mask"):
        torch.ones(4, device="spyre").masked_scatter_(~none, torch.ones(3, device="spyre"))
    # gather/scatter: an index wider than self outside `dim` is an error, as on CPU.
    wide = torch.zeros(64, 3, dtype=torch.long, device="spyre")
    with pytest.raises(RuntimeError, match="Size does not match at dimension 0"):
        torch.zeros(2, 3, device="spyre").scatter_(1, wide, 1.0)
    with pytest.raises(RuntimeError, match="Size does not match at dimension 0"):
        torch.zeros(2, 3, device="spyre").gather(1, wide)
    with pytest.raises(RuntimeError, match="no larger than src"):
        torch.zeros(70, 3, device="spyre").scatter_(1, wide, torch.ones(2, 3, device="spyre"))
    # index_add_ into a transposed tensor (its rows are not contiguous) adds through a copy.
    want, got = torch.zeros(4, 6).t(), torch.zeros(4, 6, device="spyre").t()
    src, at = torch.randn(3, 4), torch.tensor([5, 0, 5])
    want.index_add_(0, at, src)
    got.index_add_(0, at.to("spyre"), src.to("spyre"))
    _compare(got, want, None)
    # Integer isposinf writes its out= tensor.
    o = torch.ones(3, dtype=torch.bool, device="spyre")
    torch.isposinf(torch.tensor([1, 2, 3], device="spyre"), out=o)
    _compare(o, torch.zeros(3, dtype=torch.bool), None)
    torch.spyre.synchronize()  # and nothing above faulted the queue


def _index_cases():
    m = torch.rand(4, 5, generator=torch.Generator().manual_seed(1)) > 0.5
    i, j = torch.tensor([0, -1, 2]), torch.tensor([[4], [1]])
    return {
        "two broadcast indices": (i, j),
        "indices after a slice": (slice(None), i, torch.tensor([5, 0, -3])),
        "a bool mask over two dims": (m,),
        "a bool mask after a slice": (slice(None), m[0]),
        "rows and per-row labels": (torch.arange(4), torch.tensor([1, 4, 0, 2])),
        "repeated index pairs": (torch.tensor([0, 0, 2]), torch.tensor([1, 1, -2])),
    }


@pytest.mark.parametrize("name", list(_index_cases()))
def test_advanced_indexing_matches_cpu(name):
    """x[...] and x[...] = v (plain and accumulating) with several index tensors or a bool mask."""
    torch_spyre.set_cpu_fallback("error")
    ix = _index_cases()[name]
    dix = tuple(_to(t, "spyre") for t in ix)
    x = torch.randn(4, 5, 6, generator=torch.Generator().manual_seed(2))
    _compare(x.to("spyre")[dix], x[ix], None)
    for accumulate in (False, True):
        want, got = x.clone(), x.to("spyre")
        v = torch.randn(want[ix].shape[-1:])  # broadcast along the indexed rows
        put = torch.ops.aten.index_put_
        put(want, [t if isinstance(t, torch.Tensor) else None for t in ix], v, accumulate)
        put(got, [t if isinstance(t, torch.Tensor) else None for t in dix], v.to("spyre"), accumulate)
        _compare(got, want, None)


@pytest.mark.parametrize(
    "x, k, largest",
    [
        (torch.tensor([-float("inf"), -float("inf"), 1.0]), 3, True),  # real values equal to a taken mark
        (torch.tensor([float("inf"), 2.0, float("inf")]), 3, False),
        (torch.tensor([1.0, float("nan"), 0.0, float("nan")]), 3, True),  # NaN is the largest
        (torch.tensor([1.0, float("nan"), 0.0]), 3, False),  # ... so the smallest puts it last
        (torch.tensor([-128, 5, -128], dtype=torch.int8), 3, True),
        (torch.randn(3, 300), 64, True),  # the most rounds, over several rows
        (torch.randint(-3, 3, (5, 50), dtype=torch.int32), 20, False),  # many ties
    ],
)
def test_topk_edge_cases_match_cpu(x, k, largest):
    """Values equal CPU's; the indices (ties may order differently) are distinct and point at them."""
    torch_spyre.set_cpu_fallback("error")
    values, indices = x.to("spyre").topk(k, largest=largest)
    _compare(values, x.topk(k, largest=largest).values, None)
    torch.testing.assert_close(x.gather(-1, indices.cpu()), values.cpu(), equal_nan=True)
    rows = indices.cpu().reshape(-1, k)
    assert all(len(set(r.tolist())) == k for r in rows)


def test_reductions_over_several_and_permuted_dims(cpu_gen):
    torch_spyre.set_cpu_fallback("error")
    x = torch.randn(4, 5, 6, 7, generator=cpu_gen)
    d = x.to("spyre")
    for dims in [(0,), (1, 2), (0, 2), (3, 1), (0, 1, 2, 3)]:
        _compare(d.sum(dims), x.sum(dims), None)
        _compare(d.amax(dims, keepdim=True), x.amax(dims, keepdim=True), None)
        _compare(d.var(dims), x.var(dims), None)
    _compare(d.permute(2, 0, 3, 1).sum(1), x.permute(2, 0, 3, 1).sum(1), None)
    _compare(d.permute(3, 1, 0, 2).argmax(), x.permute(3, 1, 0, 2).argmax(), None)
    _compare(torch.softmax(d, 1), torch.softmax(x, 1), None)


def test_large_tensors_span_many_tiles_and_cores(cpu_gen):
    torch_spyre.set_cpu_fallback("error")
    x = torch.randn(1000, 1500, generator=cpu_gen)
    d = x.to("spyre")
    _compare(torch.sigmoid(d) * d, torch.sigmoid(x) * x, None)
    _compare(d.t() + 1, x.t() + 1, None)
    _compare(d.sum(0), x.sum(0), None)
    _compare(torch.log_softmax(d, -1), torch.log_softmax(x, -1), None)


def test_small_scratchpad_and_fewer_cores(tmp_path):
    """Programs compiled for a 256 KiB scratchpad and 16 cores run and give CPU's results."""
    config = tmp_path / "small.json"
    config.write_text('{"chip": {"lx_bytes": 262144, "cores": 16, "fp16_format": "ieee"}}')
    code = """
import torch, torch_spyre
torch_spyre.set_cpu_fallback("error")
g = torch.Generator().manual_seed(0)
a, b = torch.randn(300, 700, generator=g), torch.randn(700, 130, generator=g)
x = torch.randn(64, 40_000, generator=g)
h = torch.randn(1024, 1024, generator=g).half()
da, db, dx, dh = a.to("spyre"), b.to("spyre"), x.to("spyre"), h.to("spyre")
assert torch_spyre.device_info()["lx_bytes"] == 262144 and torch_spyre.device_info()["cores"] == 16
checks = [
    ((da @ db).cpu(), a @ b),
    ((da.half() @ db.half()).float().cpu(), (a.half().float() @ b.half().float())),
    (torch.softmax(dx, -1).cpu(), torch.softmax(x, -1)),
    (dx.sum(0).cpu(), x.sum(0)),
    (dx.argmax(-1).cpu(), x.argmax(-1)),
    ((dx * 2 + dx.t().contiguous().t()).cpu(), x * 2 + x),
    (torch.addmm(db[0], da, db).cpu(), torch.addmm(b[0], a, b)),
    # large enough for the cores to share panels (LOAD_MULTICAST) on a 4 x 4 grid
    ((dh @ dh.t()).float().cpu(), (h.float() @ h.float().t()).half().float()),
]
for got, want in checks:
    torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)
import json, os
torch_spyre.write_reports()
events = json.load(open(os.environ["SPYRE_TRACE"]))["traceEvents"]
assert any(e.get("name") == "load multicast issue" for e in events), "the 1024-cube GEMM did not share panels"
print("ok")
"""
    proc = run_python(code, env={"SPYRE_CONFIG": str(config), "SPYRE_TRACE": str(tmp_path / "trace.json")})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_no_kernel_hides_an_autograd_decomposition():
    """A spyre kernel on a CompositeImplicitAutograd op would run without autograd (no gradient):
    such ops must reach the device through their decomposition."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    # Results with nothing to differentiate: a bool, and matrix_rank's int64 counts (whose composite
    # computes its cutoff in float64).
    no_gradient = {"aten::_has_compatible_shallow_copy_type"} | {"aten::" + n for n in _decomposed._OVER_COMPOSITE}
    # Backwards that CPU has kernels of its own for too, run only with grad mode off.
    no_gradient |= {"aten::silu_backward", "aten::mish_backward"}
    clash = [
        name
        for name in torch._C._dispatch_get_all_op_names()
        if has(name, "PrivateUse1") and has(name, "CompositeImplicitAutograd") and name not in no_gradient
    ]
    assert clash == []
    # The exempted ones really give no gradient: an integer result, and its input's gradient is None.
    a = torch.randn(3, 3, requires_grad=True)
    rank = torch.linalg.matrix_rank(a.to("spyre"))
    assert rank.dtype == torch.int64 and not rank.requires_grad
    assert rank.cpu() == torch.linalg.matrix_rank(a)


def test_sort_is_stable_puts_nan_last_and_topk_past_64_uses_it(cpu_gen):
    x = torch.randn(5, 300, generator=cpu_gen)
    x[:, :40] = 0.5  # ties
    x[1, 7] = x[3, 100] = float("nan")
    torch_spyre.set_cpu_fallback("error")
    for descending in (False, True):
        got = torch.sort(x.to("spyre"), dim=1, descending=descending)
        want = torch.sort(x, dim=1, descending=descending, stable=True)
        torch.testing.assert_close(got.values.cpu(), want.values, equal_nan=True)
        assert torch.equal(got.indices.cpu(), want.indices)
        assert torch.equal(torch.argsort(x.t().to("spyre"), dim=0, descending=descending).cpu(), want.indices.t())
    y = torch.randn(4, 1000, generator=cpu_gen)
    for largest in (True, False):
        got = torch.topk(y.to("spyre"), 200, dim=1, largest=largest)
        want = torch.topk(y, 200, dim=1, largest=largest)
        assert torch.equal(got.values.cpu(), want.values) and torch.equal(got.indices.cpu(), want.indices)


def test_a_row_longer_than_the_scratchpad_sorts_on_the_cpu(cpu_gen):
    x = torch.randn(2, 200_000, generator=cpu_gen)
    with pytest.warns(UserWarning, match="aten::sort"):
        got = torch.sort(x.to("spyre"), dim=1)
    assert torch.equal(got.values.cpu(), torch.sort(x, dim=1).values)


def test_int64_sort_keeps_values_past_2_to_53_apart():
    x = torch.tensor([2**53 + 1, 2**53, -(2**62), 2**62 + 3, 2**62 + 1])
    torch_spyre.set_cpu_fallback("error")
    for descending in (False, True):
        got = torch.sort(x.to("spyre"), descending=descending)
        want = torch.sort(x, descending=descending, stable=True)
        assert torch.equal(got.values.cpu(), want.values) and torch.equal(got.indices.cpu(), want.indices)


@pytest.mark.parametrize(
    "shape,perm",
    [((4, 128, 8, 32), (0, 2, 1, 3)), ((300, 70), (1, 0)), ((5, 6, 7), (2, 0, 1)), ((64, 4096), (1, 0)),
     ((3, 1000, 3), (2, 1, 0)), ((2, 3, 130, 3), (0, 3, 2, 1))],
)  # fmt: skip
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool])
def test_permuted_inputs_copy_and_compute_like_cpu(shape, perm, dtype, cpu_gen):
    """Transposed inputs move in blocks along their contiguous dim (transposed in the scratchpad),
    and tiles take the longest outer dim as rows: the results must not change."""
    x = (torch.randn(shape, generator=cpu_gen) * 5).to(dtype)
    d = x.to("spyre")
    torch_spyre.set_cpu_fallback("error")
    assert torch.equal(d.permute(*perm).contiguous().cpu(), x.permute(*perm).contiguous())
    torch.testing.assert_close((d.permute(*perm).float() * 2 + 1).cpu(), x.permute(*perm).float() * 2 + 1)
