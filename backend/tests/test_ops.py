"""Every native op against CPU PyTorch, over PyTorch's own OpInfo sample inputs (our own cases are
in test_ops_edge_cases.py).

Each case runs under TORCH_SPYRE_CPU_FALLBACK=error, so a sample that does not run natively fails
with the operator's name. The default run takes the first samples of each op and dtype; with
``--slow`` (see conftest.py) it takes all of them.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch
import torch_spyre
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
