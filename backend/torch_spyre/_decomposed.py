"""ATen ops that run on spyre as PyTorch's own decompositions into ops the device runs natively.

Batch and group norm, max pooling, adaptive pooling, interpolation, padding modes, and a set of
losses and small ops have no kernel of their own in the C++ layer: their eager spyre kernel is
the decomposition that ``torch.compile(backend="spyre")`` applies to them too
(``torch._decomp.decomposition_table``, the same table core ATen's decompositions come from), so
both front doors take one lowering. Every op the decomposition calls is dispatched again and
takes its own spyre kernel. A call the decomposition declines (it returns ``NotImplemented``,
as adaptive max pooling does for windows that do not divide the input) or an op that would
re-enter itself goes through the CPU fallback under its policy (``TORCH_SPYRE_CPU_FALLBACK``).

An op of ``OPS`` that the C++ layer registers a kernel for keeps that kernel. Which ops are here,
and why each is right, is a reviewed decision: ``backend/tests/conformance.py`` holds them to
CPU, forward and backward (docs/developer-guide.md, "Decomposed ops").
"""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F

from . import _C, _amp, _counting, _fft, _linalg, _nn_ops, _optim, _scans, _special, _spectral
from ._composite import meta, structured, with_out

# Overloads, grouped by what they are; each must be in torch._decomp.decomposition_table.
OPS = (
    # batch, instance (through batch norm) and group norm, forward and backward
    "native_batch_norm", "native_batch_norm.out", "native_batch_norm_backward", "native_batch_norm_backward.out",
    "_native_batch_norm_legit", "_native_batch_norm_legit.no_stats", "_native_batch_norm_legit_no_training",
    "_batch_norm_with_update", "_batch_norm_no_update", "batch_norm_backward",
    "native_group_norm", "native_group_norm_backward", "native_group_norm_backward.out",
    # pooling
    "max_pool2d_with_indices", "max_pool2d_with_indices.out",
    "max_pool2d_with_indices_backward", "max_pool2d_with_indices_backward.grad_input",
    "max_pool3d_with_indices", "max_pool3d_with_indices.out",
    "_adaptive_avg_pool2d", "_adaptive_avg_pool2d.out",
    # interpolation
    "upsample_nearest1d", "upsample_nearest1d.vec", "upsample_nearest1d.out",
    "upsample_nearest2d", "upsample_nearest2d.vec", "upsample_nearest2d.out",
    "upsample_nearest3d", "upsample_nearest3d.vec", "upsample_nearest3d.out",
    "_upsample_nearest_exact1d", "_upsample_nearest_exact1d.vec", "_upsample_nearest_exact1d.out",
    "_upsample_nearest_exact2d", "_upsample_nearest_exact2d.vec", "_upsample_nearest_exact2d.out",
    "_upsample_nearest_exact3d", "_upsample_nearest_exact3d.vec", "_upsample_nearest_exact3d.out",
    "upsample_linear1d", "upsample_linear1d.out",
    "upsample_bilinear2d", "upsample_bilinear2d.vec", "upsample_bilinear2d.out",
    "upsample_trilinear3d", "upsample_trilinear3d.vec", "upsample_trilinear3d.out",
    "upsample_bicubic2d", "upsample_bicubic2d.vec", "upsample_bicubic2d.out",
    "_upsample_bilinear2d_aa.vec",
    # padding modes
    "reflection_pad1d", "reflection_pad1d.out", "reflection_pad2d", "reflection_pad2d.out",
    "reflection_pad3d", "reflection_pad3d.out", "replication_pad1d", "replication_pad1d.out",
    "replication_pad2d", "replication_pad2d.out", "replication_pad3d", "replication_pad3d.out",
    "reflection_pad1d_backward", "reflection_pad1d_backward.grad_input",
    "reflection_pad2d_backward", "reflection_pad2d_backward.grad_input",
    "reflection_pad3d_backward", "reflection_pad3d_backward.grad_input",
    # activations and losses, and their backward
    "glu", "glu.out", "glu_backward", "glu_backward.grad_input",
    "log_sigmoid_forward", "log_sigmoid_forward.output", "log_sigmoid_backward", "log_sigmoid_backward.grad_input",
    "_prelu_kernel", "_prelu_kernel_backward",
    "mse_loss", "mse_loss.out", "mse_loss_backward", "mse_loss_backward.grad_input",
    "smooth_l1_loss", "smooth_l1_loss.out", "smooth_l1_loss_backward", "smooth_l1_loss_backward.grad_input",
    "huber_loss", "huber_loss.out", "huber_loss_backward", "huber_loss_backward.out",
    "binary_cross_entropy", "binary_cross_entropy.out",
    "binary_cross_entropy_backward", "binary_cross_entropy_backward.grad_input",
    "binary_cross_entropy_with_logits", "binary_cross_entropy_with_logits.out",
    "multi_margin_loss", "multi_margin_loss.out",
    # shapes, norms and small ops
    "im2col", "im2col.out", "col2im", "col2im.out", "channel_shuffle", "pixel_shuffle", "pixel_unshuffle",
    "narrow_copy", "narrow_copy.out", "unfold_copy", "unfold_copy.out", "unfold_backward", "unfold_backward.out",
    "index_fill.int_Tensor", "index_fill.int_Scalar",
    "aminmax", "aminmax.out", "linalg_cross", "linalg_cross.out", "linalg_vector_norm", "linalg_vector_norm.out",
    "dist", "renorm", "renorm.out", "std_mean.correction", "var_mean.correction",
    "tril_indices", "triu_indices",
    "bucketize.Tensor", "bucketize.Scalar",
    "norm.Scalar", "norm.ScalarOpt_dim", "norm.ScalarOpt_dim_dtype", "norm.ScalarOpt_dtype", "norm.out",
    "norm.dtype_out", "norm.Scalar_out", "norm.ScalarOpt_dtype_out",
    "vdot", "vdot.out", "round.decimals", "round.decimals_out", "mvlgamma.out",
)  # fmt: skip

# Norms whose saved statistics CPU returns in the parameters' dtype (fp32 weights or running
# statistics of an fp16 input give fp32 statistics), else in the input's, and empty when a batch
# norm does not train (the decompositions return the running ones): op -> (positions of its
# weight, bias and running statistics, position of its `training` argument or None).
_STATS = {
    "native_batch_norm": ((1, 2, 3, 4), 5),
    "_native_batch_norm_legit": ((1, 2, 3, 4), 5),
    "_native_batch_norm_legit.no_stats": ((1, 2), 3),
    "_native_batch_norm_legit_no_training": ((1, 2, 3, 4), False),
    "_batch_norm_no_update": ((1, 2, 3, 4), False),
    "_batch_norm_with_update": ((1, 2, 3, 4), True),
    "native_group_norm": ((1, 2), True),
}


# Ops torch has no decomposition for, decomposed here the same way: into native ops of the device.
def _pool_geometry(x, kernel, stride, padding, ceil_mode, dims):
    """(kernel, stride, padding, output sizes, right-hand overhang) per spatial dim of an average pool."""
    k = list(kernel) * dims if len(kernel) == 1 else list(kernel)
    st = list(stride or k) * dims if len(stride or k) == 1 else list(stride or k)
    p = list(padding) * dims if len(padding) == 1 else list(padding)
    n = x.shape[-dims:]
    out = []
    for i in range(dims):
        o = (n[i] + 2 * p[i] - k[i] + (st[i] - 1 if ceil_mode else 0)) // st[i] + 1
        if ceil_mode and (o - 1) * st[i] >= n[i] + p[i]:
            o -= 1
        out.append(o)
    extra = [max(0, (out[i] - 1) * st[i] + k[i] - (n[i] + 2 * p[i])) for i in range(dims)]
    return k, st, p, out, extra


def _pads(p, extra):
    """F.pad's list (last dim first) for `p` on the left and `p` plus the overhang on the right."""
    pads = []
    for pp, e in zip(reversed(p), reversed(extra), strict=True):
        pads += [pp, pp + e]
    return pads


def _pool_divisors(x, k, st, p, out, extra, count_include_pad, divisor_override, dims):
    """Each output element's divisor, [1, 1, *out] in fp32 on x's device: torch's window sizes."""
    if divisor_override:
        return torch.full([1, 1, *out], float(divisor_override), device=x.device)
    n = list(x.shape[-dims:])
    if count_include_pad:  # the window clipped to the padded input
        ones = F.pad(torch.ones(1, 1, *[a + 2 * b for a, b in zip(n, p, strict=True)]), _pads([0] * dims, extra))
    else:  # the window's elements inside the input
        ones = F.pad(torch.ones(1, 1, *n), _pads(p, extra))
    conv = (F.conv1d, F.conv2d, F.conv3d)[dims - 1]
    counts = conv(ones, torch.ones(1, 1, *k), stride=st)[(..., *[slice(0, o) for o in out])]
    return counts.to(x.device)


def _avg_pool(dims):
    check = (torch.ops.aten.avg_pool2d, torch.ops.aten.avg_pool3d)[dims - 2].default
    conv = (F.conv2d, F.conv3d)[dims - 2]

    def avg_pool(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
        padding = [padding] if isinstance(padding, int) else padding
        shape = check(meta(x), kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override).shape
        k, st, p, out, extra = _pool_geometry(x, kernel_size, stride, padding, ceil_mode, dims)
        rows = x.reshape(-1, 1, *x.shape[-dims:]).float()
        summed = conv(F.pad(rows, _pads(p, extra)), torch.ones(1, 1, *k, device=x.device), stride=st)
        summed = summed[(..., *[slice(0, o) for o in out])]
        div = _pool_divisors(x, k, st, p, out, extra, count_include_pad, divisor_override, dims)
        return (summed / div).to(x.dtype).reshape(shape)

    return avg_pool


def _avg_pool_backward(dims):
    check = (torch.ops.aten.avg_pool2d_backward, torch.ops.aten.avg_pool3d_backward)[dims - 2].default
    conv_t = (F.conv_transpose2d, F.conv_transpose3d)[dims - 2]

    def backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
        check(meta(grad), meta(x), kernel_size, stride, padding, ceil_mode, count_include_pad,
             divisor_override)  # fmt: skip
        k, st, p, out, extra = _pool_geometry(x, kernel_size, stride, padding, ceil_mode, dims)
        div = _pool_divisors(x, k, st, p, out, extra, count_include_pad, divisor_override, dims)
        g = grad.reshape(-1, 1, *out).float() / div
        full = conv_t(g, torch.ones(1, 1, *k, device=x.device), stride=st)  # over the padded input
        n = x.shape[-dims:]
        short = [n[i] + 2 * p[i] + extra[i] - full.shape[2 + i] for i in range(dims)]
        full = F.pad(full, [v for s in reversed(short) for v in (0, s)])
        inside = full[(..., *[slice(p[i], p[i] + n[i]) for i in range(dims)])]
        return inside.to(grad.dtype).reshape(x.shape)

    return backward


def _adaptive_spans(n: int, o: int) -> list[tuple[int, int]]:
    """[start, end) of each of the o adaptive windows over n positions (torch's rule)."""
    return [((i * n) // o, -(-((i + 1) * n) // o)) for i in range(o)]


def _adaptive_windows(n: int, o: int, device) -> torch.Tensor:
    """[n, o]: 1/len where input position h is in adaptive window i."""
    m = torch.zeros(n, o)
    for i, (start, end) in enumerate(_adaptive_spans(n, o)):
        m[start:end, i] = 1.0 / (end - start)
    return m.to(device)


def _adaptive_windows_index(n: int, o: int) -> torch.Tensor:
    """[o, longest window]: the input positions of each adaptive window, the last repeated to
    fill the row (a repeat changes neither a maximum nor the first position holding it)."""
    spans = _adaptive_spans(n, o)
    longest = max(end - start for start, end in spans)
    return torch.tensor([[min(start + j, end - 1) for j in range(longest)] for start, end in spans])


def _adaptive_avg_pool(dims: int, backward: bool):
    """The adaptive average pool over `dims` spatial dims (or its backward): each dim's windows
    are an [n, o] matrix of 1/len, contracted with the input (or with the output's gradient)."""
    check = getattr(torch.ops.aten, f"_adaptive_avg_pool{dims}d" + ("_backward" if backward else "")).default

    def pool(*args):
        if backward:
            grad, x = args
            check(meta(grad), meta(x))
            src, shape, out = grad, x.shape, grad.shape[-dims:]
        else:
            x, size = args
            src = x
            shape = check(meta(x), size).shape
            out = shape[-dims:]
        mats = [_adaptive_windows(n, o, x.device) for n, o in zip(x.shape[-dims:], out, strict=True)]
        ins, outs = "xyz"[:dims], "abc"[:dims]
        frm, to = (outs, ins) if backward else (ins, outs)
        equation = f"...{frm}," + ",".join(ins[d] + outs[d] for d in range(dims)) + f"->...{to}"
        return torch.einsum(equation, src.float(), *mats).to(src.dtype).reshape(shape)

    return pool


def _adaptive_max_pool(dims: int):
    """Adaptive max pooling over `dims` spatial dims: each window's elements gathered into a row
    (torch's scanning order), its maximum and the flat input position of the first one."""
    check = getattr(torch.ops.aten, f"adaptive_max_pool{dims}d").default

    def pool(x, output_size):
        shape = check(meta(x), output_size)[0].shape
        n, out = list(x.shape[-dims:]), list(shape[-dims:])
        if x.numel() == 0 or 0 in out:
            return x.new_empty(shape), torch.empty(shape, dtype=torch.int64, device=x.device)
        rows = [_adaptive_windows_index(a, o) for a, o in zip(n, out, strict=True)]
        # Index tensors broadcast to [o0, l0, o1, l1, ...]; the flat position of each element.
        grids, flat = [], torch.zeros((), dtype=torch.int64)
        for d, r in enumerate(rows):
            g = r.reshape([1] * (2 * d) + list(r.shape) + [1] * (2 * (dims - d - 1)))
            grids.append(g.to(x.device))
            flat = flat * n[d] + g
        windows = x[(..., *grids)]  # [..., o0, l0, o1, l1, ...]
        lead = windows.dim() - 2 * dims
        order = [*range(lead), *[lead + 2 * d for d in range(dims)], *[lead + 2 * d + 1 for d in range(dims)]]
        windows = windows.permute(order).reshape(*windows.shape[:lead], *out, -1)
        positions = flat.permute([2 * d for d in range(dims)] + [2 * d + 1 for d in range(dims)])
        positions = positions.reshape(*out, -1).to(x.device)
        values, which = windows.max(dim=-1)
        indices = positions.expand(*windows.shape[:lead], *positions.shape).gather(-1, which.unsqueeze(-1))
        return values.reshape(shape), indices.squeeze(-1).reshape(shape)

    return pool


def _replication_pad_backward(dims: int):
    """The backward of replication padding: each padded position's gradient added into the edge
    element it copies, one spatial dim at a time (index_add of torch's clamp of positions)."""

    def backward(grad, x, padding):
        getattr(torch.ops.aten, f"replication_pad{dims}d_backward").default(meta(grad), meta(x), padding)
        g = grad.float()
        for d in range(dims):
            axis = g.dim() - dims + d
            left = padding[2 * (dims - 1 - d)]  # F.pad's order: the last dim first
            n = x.shape[axis]
            source = (torch.arange(g.shape[axis]) - left).clamp(0, n - 1).to(g.device)
            g = torch.zeros(*g.shape[:axis], n, *g.shape[axis + 1 :], device=g.device).index_add_(axis, source, g)
        return g.to(grad.dtype)

    return backward


def _interpolation_matrices(forward, input_size, output_size, align_corners: tuple, scales, device) -> list:
    """The [in, out] matrix of a separable interpolation along each spatial dim: CPU's `forward`
    applied to a basis (a function of the sizes alone), moved to `device`. The other dims are 2
    wide, mapped to 2 (the identity): CPU's anti-aliased kernel mishandles a 1-wide one."""
    dims = len(output_size)
    mats = []
    for d in range(dims):
        n, o = input_size[2 + d], output_size[d]
        basis = torch.eye(n).reshape(n, 1, *[n if e == d else 1 for e in range(dims)])
        basis = basis.expand(n, 1, *[n if e == d else 2 for e in range(dims)]).contiguous()
        size = [o if e == d else 2 for e in range(dims)]
        scale = [scales[d] if e == d else None for e in range(dims)]
        y = forward(basis, size, *align_corners, *scale)
        mats.append(y[(slice(None), 0, *[slice(None) if e == d else 0 for e in range(dims)])].reshape(n, o).to(device))
    return mats


def _upsample_backward(name: str, dims: int, align: bool):
    """The backward of a separable interpolation: along each spatial dim the forward is a fixed
    [out, in] matrix, read off CPU's forward of a basis (a function of the sizes alone), so the
    input's gradient is the output's gradient contracted with each matrix on the device."""

    forward = getattr(torch.ops.aten, name).default

    def backward(grad, output_size, input_size, *rest):
        align_corners = (rest[0],) if align else ()
        scales = [*(rest[1:] if align else rest), *[None] * dims][:dims]
        mats = _interpolation_matrices(forward, input_size, output_size, align_corners, scales, grad.device)
        outs, ins = "abc"[:dims], "xyz"[:dims]
        equation = f"...{outs}," + ",".join(ins[d] + outs[d] for d in range(dims)) + f"->...{ins}"
        return torch.einsum(equation, grad.float(), *mats).to(grad.dtype).reshape(input_size)

    return backward


def _max_pool_backward(dims: int):
    """The backward of a max pool with indices (flat positions in each input plane): the output's
    gradient added into the positions its maxima came from."""

    def backward(grad, x, *rest):
        indices = rest[-1]
        planes = grad.reshape(-1, grad.shape[-dims:].numel()).float()
        into = torch.zeros(planes.shape[0], x.shape[-dims:].numel(), device=grad.device)
        into.scatter_add_(1, indices.reshape(planes.shape), planes)
        return into.to(grad.dtype).reshape(x.shape)

    return backward


def _max_unpool(dims: int):
    """torch's max_unpool decomposition (a scatter), after CPU's check that every index lies in
    the output plane: a scatter out of it would write another plane, or past the tensor."""
    op = getattr(torch.ops.aten, f"max_unpool{dims}d").default

    def unpool(x, indices, output_size, *rest):
        from torch._decomp import decomposition_table

        op(meta(x), meta(indices), output_size, *rest)
        plane = 1
        for s in output_size:
            plane *= s
        if indices.numel():
            bad = indices[(indices < 0) | (indices >= plane)]
            if bad.numel():
                sizes = "x".join(str(s) for s in output_size)
                raise RuntimeError(f"Found an invalid max index: {bad[0].item()} (output volumes are of size {sizes})")
        return decomposition_table[op](x, indices, output_size, *rest)

    return unpool


def _eye(n, m=None, *, dtype=None, layout=None, device=None, pin_memory=None, out=None):
    """zeros, then ones written through the diagonal view (torch's decomposition builds an arange in
    the accumulation type, float64 for float32)."""
    for size in (n, m):
        if size is not None and size < 0:
            raise RuntimeError(f"n must be greater or equal to 0, got {size}" if size is n else
                               f"m must be greater or equal to 0, got {size}")  # fmt: skip
    shape = (n, n if m is None else m)
    if out is None:
        out = torch.zeros(shape, dtype=dtype, layout=layout, device=device, pin_memory=pin_memory)
    else:
        out.resize_(shape).zero_()
    out.diagonal().fill_(1)
    return out


def _nonempty_dim(name: str, x, dim: int) -> None:
    """CPU's check that a selection along dim has something to select."""
    if x.dim() > 0 and x.shape[dim] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {dim % x.dim()} to have non-zero size.")


def _selection(v, i, shape, x, values, indices, wrong_values: str, wrong_indices: str):
    """A selection's (values, indices) of `shape`, or written into the out= tensors after CPU's
    dtype checks (their messages given)."""
    v, i = v.reshape(shape), i.reshape(shape)
    if values is None:
        return v, i
    if values.dtype != x.dtype:
        raise RuntimeError(wrong_values)
    if indices.dtype != torch.int64:
        raise RuntimeError(wrong_indices)
    return values.resize_(shape).copy_(v), indices.resize_(shape).copy_(i)


def _kthvalue(x, k, dim=-1, keepdim=False, *, values=None, indices=None):
    """The k-th smallest along dim from the device's stable sort (NaN sorts last, as CPU's)."""
    _nonempty_dim("kthvalue", x, dim)
    shape = torch.ops.aten.kthvalue.default(meta(x), k, dim, keepdim)[0].shape
    if x.dim() == 0:
        v, i = x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    else:
        ordered, order = torch.sort(x, dim=dim, stable=True)
        v, i = ordered.narrow(dim, k - 1, 1).clone(), order.narrow(dim, k - 1, 1).clone()
    return _selection(v, i, shape, x, values, indices, "output values must be of same type as input",
                      "output indices must be of scalar type Long")  # fmt: skip


def _median(ignore_nan: bool, reduce_all: bool):
    """median and nanmedian from the device's stable sort (NaN last): the lower median; median of
    a row with a NaN is its first NaN, nanmedian the lower median of the row's numbers."""
    name = "nanmedian" if ignore_nan else "median"

    def pick(x, dim, keepdim):
        if x.dim() == 0:
            return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
        n = x.shape[dim]
        ordered, order = torch.sort(x, dim=dim, stable=True)
        nans = torch.isnan(x).sum(dim, keepdim=True)
        if ignore_nan:
            m = n - nans
            k = torch.where(m > 0, torch.div(m - 1, 2, rounding_mode="floor"), (n - 1) // 2)
        else:
            k = torch.where(nans > 0, n - nans, (n - 1) // 2)
        v, i = ordered.gather(dim, k), order.gather(dim, k)
        return (v, i) if keepdim else (v.squeeze(dim), i.squeeze(dim))

    if reduce_all:
        check = getattr(torch.ops.aten, name).default

        def whole(x, *, out=None):
            check(meta(x))
            if x.numel() == 0:
                v = torch.full((), float("nan"), dtype=x.dtype, device=x.device)
            else:
                v = pick(x.reshape(-1), 0, False)[0]
            return v if out is None else out.resize_(()).copy_(v)

        return whole
    check = getattr(torch.ops.aten, name).dim

    def along(x, dim, keepdim=False, *, values=None, indices=None):
        shape = check(meta(x), dim, keepdim)[0].shape
        _nonempty_dim(name, x, dim)
        v, i = pick(x, dim if dim >= 0 else dim + max(x.dim(), 1), keepdim)
        wrong = f"{name}(): the out tensors must have the input's dtype and int64 indices"
        return _selection(v, i, shape, x, values, indices, wrong, wrong)

    return along


def _rounded(x, dtype: torch.dtype):
    """Number x in `dtype`: a Python number as a Python number (also while a compile traces:
    outside its modes), a 0-dim tensor (logspace's Tensor overloads) as a float32 one; a symbolic
    number as it is."""
    if isinstance(x, torch.Tensor):
        return x.to(dtype).float()
    if not isinstance(x, (int, float)):
        return x
    with torch.utils._python_dispatch._disable_current_modes():
        return torch.tensor(x, dtype=dtype).item()


def _logspace(start, end, steps, base=10.0, *, dtype=None, device=None, out=None, **_):
    """CPU's logspace: the ends in the result's type (one step: the start as given), the step
    their difference in that type over steps - 1, the first half of the exponents counted from
    the start and the rest back from the end; here in float32 on the device."""
    dtype = out.dtype if out is not None else dtype or torch.get_default_dtype()
    device = out.device if out is not None else device
    s, e = (_rounded(start, dtype), _rounded(end, dtype)) if steps > 1 else (start, start)
    step = _rounded(e - s, dtype) / (steps - 1) if steps > 1 else 0.0
    i = torch.arange(steps, dtype=torch.float32, device=device)
    exponents = torch.where(i < steps // 2, s + step * i, e - step * (steps - 1 - i))
    result = torch.pow(float(base), exponents).to(dtype)
    return result if out is None else out.resize_(result.shape).copy_(result)


def _linspace_of_integers(start, end, steps, *, dtype=None, device=None, out=None, **_):
    """CPU's linspace into an integer type: the ends truncated to it, the step their difference in
    float64 over steps - 1, the first half of the points counted from the start and the rest back
    from the end, each point one fused multiply-add in float64 (CPU's kernel is compiled with FMA
    wherever the host has it: every x86 host since AVX2, every arm64 one), then truncated.

    The card has no float64, and float32 puts points such as linspace(-9.5, 4.2, 50)'s on the other
    side of an integer, so the host computes them from the call's numbers alone (they depend on no
    tensor's data) and they are copied to the card, as a tensor built from Python numbers is. A
    point whose float64 value lies next to an integer is computed again exactly (one rounding of the
    exact product and sum), since there the fused and the unfused arithmetic can truncate apart."""
    dtype = out.dtype if out is not None else dtype
    device = out.device if out is not None else device
    with torch.utils._python_dispatch._disable_current_modes():  # while a compile traces: constants
        points = _integer_points(start, end, steps, dtype).to(dtype)
    result = torch.ops.aten.lift_fresh_copy.default(points).to(device)
    return result if out is None else out.resize_(result.shape).copy_(result)


def _integer_points(start, end, steps, dtype):
    """_linspace_of_integers's points, on the host, in int64."""
    torch._check(steps >= 0, lambda: "linspace(): number of steps must be non-negative")
    # The ends as CPU takes them: converted to the result's type, refused if they do not fit.
    s, e = (int(torch.full((), x.item() if isinstance(x, torch.Tensor) else x, dtype=dtype)) for x in (start, end))
    if steps <= 1:
        points = torch.tensor([s] * steps, dtype=torch.int64)
    else:
        torch._check(dtype != torch.bool, lambda: "\"linspace_cpu\" not implemented for 'Bool'")  # CPU's words
        step = (float(e) - float(s)) / (steps - 1)
        k = torch.arange(steps, dtype=torch.float64)
        first = k < steps // 2
        base = torch.where(first, torch.tensor(float(s), dtype=k.dtype), float(e))
        times = torch.where(first, k, k - (steps - 1))  # the end minus step * (steps - 1 - k)
        product = times * step
        value = base + product
        slack = 4 * torch.finfo(torch.float64).eps * torch.maximum(base.abs(), product.abs())
        points = value.trunc().to(torch.int64)
        num, den = step.as_integer_ratio()
        near = torch.nonzero((value - value.round()).abs() <= slack).flatten()
        exact = zip(times[near].long().tolist(), base[near].long().tolist(), strict=True)
        # Python's integer division rounds once: the fused multiply-add's value.
        points[near] = torch.tensor([int((num * t + b * den) / den) for t, b in exact], dtype=torch.int64)
    return points


def _factory(name: str, floats=None, integers=None):
    """A float factory computed on the card: `floats` for the card's float types (logspace: torch's
    reference computes in float64, which the card lacks, and takes the ends as given: 10 ** 4.3 in
    bf16 was 19968, CPU's is 20480), else torch's decomposition. An integer result takes
    `integers`, or declines to the fallback without it: the decomposition computes in float32 and
    truncates points that CPU's double arithmetic puts on the other side of an integer."""
    packet, _, overload = name.partition(".")
    op = getattr(getattr(torch.ops.aten, packet), overload or "default")

    def run(*args, **kwargs):
        from torch._decomp import decomposition_table

        out = kwargs.get("out")
        dtype = out.dtype if out is not None else kwargs.get("dtype") or torch.get_default_dtype()
        if not dtype.is_floating_point:
            return NotImplemented if integers is None or dtype.is_complex else integers(*args, **kwargs)
        if floats is not None and dtype in (torch.float32, torch.bfloat16, torch.float16):
            return floats(*args, **kwargs)
        return decomposition_table[op](*args, **kwargs)

    return run


def _equal(a, b):
    return a.shape == b.shape and bool((a == b).all())


# The interpolations (forward op, spatial dims, whether it takes align_corners) whose backward
# _upsample_backward gives.
_INTERPOLATIONS = (
    ("upsample_nearest1d", 1, False), ("upsample_nearest2d", 2, False), ("upsample_nearest3d", 3, False),
    ("_upsample_nearest_exact1d", 1, False), ("_upsample_nearest_exact2d", 2, False),
    ("_upsample_nearest_exact3d", 3, False), ("upsample_linear1d", 1, True), ("upsample_bilinear2d", 2, True),
    ("upsample_trilinear3d", 3, True), ("upsample_bicubic2d", 2, True),
)  # fmt: skip


def _index_copy(name: str):
    """index_copy, its out= form and index_copy_ as torch's decompositions: an index_put of the
    rows, in place for index_copy_ (it copies nothing else: a KV cache's update writes its new rows
    only). CPU refuses a negative index, which index_put would count from the end: it becomes one
    past the end, which the device's scatter refuses as it does any index out of range."""
    packet, _, overload = name.partition(".")
    op = getattr(getattr(torch.ops.aten, packet), overload or "default")

    def run(x, dim, index, source, **kwargs):
        from torch._decomp import decomposition_table

        if isinstance(index, torch.Tensor) and index.numel() > 0 and -max(x.dim(), 1) <= dim < max(x.dim(), 1):
            index = torch.where(index < 0, x.shape[dim] if x.dim() > 0 else 1, index)
        return decomposition_table[op](x, dim, index, source, **kwargs)

    return run


OWN = {
    "avg_pool2d": _avg_pool(2),
    "avg_pool3d": _avg_pool(3),
    "avg_pool2d.out": with_out(_avg_pool(2), ("out",), structured),
    "avg_pool3d.out": with_out(_avg_pool(3), ("out",), structured),
    "avg_pool2d_backward": _avg_pool_backward(2),
    "avg_pool3d_backward": _avg_pool_backward(3),
    "_adaptive_avg_pool2d_backward": _adaptive_avg_pool(2, backward=True),
    "_adaptive_avg_pool3d": _adaptive_avg_pool(3, backward=False),
    "_adaptive_avg_pool3d_backward": _adaptive_avg_pool(3, backward=True),
    "max_unpool2d": _max_unpool(2),
    "max_unpool3d": _max_unpool(3),
    "adaptive_max_pool2d": _adaptive_max_pool(2),
    "adaptive_max_pool3d": _adaptive_max_pool(3),
    "replication_pad1d_backward": _replication_pad_backward(1),
    "replication_pad2d_backward": _replication_pad_backward(2),
    "replication_pad3d_backward": _replication_pad_backward(3),
    "max_pool3d_with_indices_backward": _max_pool_backward(3),
    "adaptive_max_pool2d_backward": _max_pool_backward(2),
    "adaptive_max_pool3d_backward": _max_pool_backward(3),
    **{
        # CPU's backward kernels are structured: grad_input takes the result's dtype alone.
        f"{name}_backward{overload}": (with_out(fn, ("grad_input",), structured) if overload else fn)
        for name, dims, align in _INTERPOLATIONS
        for fn in [_upsample_backward(name, dims, align)]
        for overload in ("", ".grad_input")
    },
    "equal": _equal,
    **{name: _factory(name, integers=_linspace_of_integers) for name in ("linspace", "linspace.out")},
    **{name: _factory(name, floats=_logspace) for name in ("logspace", "logspace.out")},
    **{name: _index_copy(name) for name in ("index_copy", "index_copy.out", "index_copy_")},
    "eye": _eye,
    "eye.m": _eye,
    "eye.out": _eye,
    "eye.m_out": _eye,
    "kthvalue": _kthvalue,
    "median": _median(False, True),
    "median.out": _median(False, True),
    "median.dim": _median(False, False),
    "median.dim_values": _median(False, False),
    "nanmedian": _median(True, True),
    "nanmedian.out": _median(True, True),
    "nanmedian.dim": _median(True, False),
    "nanmedian.dim_values": _median(True, False),
    "kthvalue.values": _kthvalue,
    **_linalg.KERNELS,
    **_spectral.KERNELS,
    **_fft.KERNELS,
    **_counting.KERNELS,
    **_scans.KERNELS,
    **_nn_ops.KERNELS,
    **_special.KERNELS,
    **_optim.KERNELS,
    **_amp.KERNELS,
}

# Ops that CPU has no bool kernel for: a bool input goes to CPU, which raises its own error.
_NO_BOOL = frozenset(
    name for name in (*OPS, *OWN) if name.partition(".")[0] in ("kthvalue", "median", "nanmedian", "bucketize")
)

# Composite ops with an integer result whose composite would compute in float64.
_OVER_COMPOSITE = frozenset(
    f"linalg_matrix_rank.atol_rtol_{kind}{out}" for kind in ("tensor", "float") for out in ("", "_out")
)

_lib: torch.library.Library | None = None
_active = threading.local()  # the decomposed ops running on this thread


def _kernel(name: str):
    qualified = "aten::" + name
    packet, _, overload = name.partition(".")
    op = getattr(getattr(torch.ops.aten, packet), overload or "default")
    decomposition = None

    def run(*args, **kwargs):
        nonlocal decomposition
        running = _active.__dict__.setdefault("ops", set())
        if decomposition is None:
            from torch._decomp import decomposition_table

            decomposition = OWN[name] if name in OWN else decomposition_table[op]
        if name in _NO_BOOL and any(isinstance(a, torch.Tensor) and a.dtype == torch.bool for a in args):
            return _C._run_on_cpu(qualified, *args, **kwargs)
        if name not in running:
            running.add(name)
            try:
                result = decomposition(*args, **kwargs)
            finally:
                running.discard(name)
            if result is not NotImplemented:
                return _as_cpu_returns(name, args, result)
        return _C._run_on_cpu(qualified, *args, **kwargs)

    return run


def _as_cpu_returns(name: str, args: tuple, result):
    if name not in _STATS:
        return result
    params, training = _STATS[name]
    dtype = next((args[i].dtype for i in params if isinstance(args[i], torch.Tensor)), args[0].dtype)
    if not isinstance(training, bool):
        training = args[training]
    out, mean, rstd, *rest = result
    if not training:
        mean, rstd = mean.new_empty(0), rstd.new_empty(0)
    return (out, mean.to(dtype), rstd.to(dtype), *rest)


def install() -> None:
    """Registers the decompositions as spyre kernels (idempotent; touches no device)."""
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("aten", "IMPL")
    for name in (*OPS, *OWN):
        qualified = "aten::" + name
        # A composite op keeps its own definition, where its autograd formula lives, unless it has
        # no gradient and computes in a type the card lacks (matrix_rank's float64 cutoff).
        keys = ("PrivateUse1",) if name in _OVER_COMPOSITE else ("PrivateUse1", "CompositeImplicitAutograd")
        if not any(torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key) for key in keys):
            _lib.impl(name, _kernel(name), "PrivateUse1")
