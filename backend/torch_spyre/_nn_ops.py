"""Distances, grid sampling, bags and losses of torch.nn.functional on the device, composed of native ops.

Each kernel has its ATen overload's signature and runs on spyre tensors: every torch op it calls
dispatches again to the device's own kernels. Only constants that depend on sizes alone (pair index
tables, interpolation matrices read off CPU's op applied to a basis) are built on the host; a few
small control values (lengths, index bounds) are read back for CPU's argument checks. A dtype the
device has no arithmetic for (float64) returns ``NotImplemented`` and takes the CPU fallback under
the user's policy, as do the few corners noted at each kernel.

Backward kernels follow CPU's formula in closed form where its conventions or its rounding matter
(which tied maximum gets the gradient, a hinge at exactly zero, CTC's gradient with respect to the
logits, the 3-d grid sampler's heavily cancelling sum), else they differentiate the forward
composition on the device (2-d grid sampling), so that one lowering serves both directions.
``KERNELS`` maps ATen overload names to kernels (merged into ``_decomposed.OWN``).
"""

from __future__ import annotations

import contextlib
import itertools
import math

import torch

from ._composite import computable, meta, same_scalar_type, structured, with_out

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)  # computed in fp32, rounded once, as CPU does
_NEG_INF = float("-inf")


@contextlib.contextmanager
def _autograd_inside_kernel():
    """Autograd recording inside a device kernel: the dispatcher excludes the autograd keys below
    them, so a backward kernel that differentiates its forward composition turns them back on."""
    keys = torch._C.DispatchKey
    exclude = torch._C._dispatch_tls_local_exclude_set()
    for key in (keys.ADInplaceOrView, keys.AutogradFunctionality, keys.AutogradOther, keys.AutogradNestedTensor):
        exclude = exclude.remove(key)
    with torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), exclude), torch.enable_grad():
        yield


# ---------------------------------------------------------------------------------------------------
# cdist and pdist
# ---------------------------------------------------------------------------------------------------


def _distance(diff, p: float):
    """The p-norm distance over the last dim of `diff` (fp32): CPU's special cases for 0, 1, 2, inf."""
    if diff.shape[-1] == 0:
        return diff.new_zeros(diff.shape[:-1])
    if p == 0:
        return (diff != 0).sum(-1).to(diff.dtype)
    if p == 1:
        return diff.abs().sum(-1)
    if p == 2:
        return diff.square().sum(-1).sqrt()
    if math.isinf(p):
        return diff.abs().amax(-1)
    return diff.abs().pow(p).sum(-1).pow(1.0 / p)


def _distance_grad(diff, dist, grad, p: float):
    """d dist / d diff times the incoming gradient, per element of `diff` [..., M] with dist and grad
    [...]: CPU's formulas, including its conventions (0 where the distance is 0, every tied
    coordinate of the inf-norm gets the whole gradient)."""
    dist, grad = dist.unsqueeze(-1), grad.unsqueeze(-1)
    if p == 0:
        return torch.zeros_like(diff)
    if p == 1:
        return grad * diff.sign()
    if math.isinf(p):
        return grad * diff.sign() * (diff.abs() == dist).to(diff.dtype)
    zero = dist == 0
    if p == 2:
        return torch.where(zero, 0.0, grad * diff / dist)
    if p < 2:  # |diff|^(p-1) is infinite at 0 when p < 1: CPU gives those coordinates 0
        g = diff.sign() * diff.abs().pow(p - 1) * grad / dist.pow(p - 1)
        return torch.where(zero | ((diff == 0) & (p < 1)), 0.0, g)
    return torch.where(zero, 0.0, diff * diff.abs().pow(p - 2) * grad / dist.pow(p - 1))


def _cdist_uses_mm(p: float, mode, r1: int, r2: int) -> bool:
    """CPU's choice of the matrix-product form |x|^2 - 2 x.y + |y|^2 for the euclidean distance."""
    mode = 0 if mode is None else mode
    return p == 2 and (mode == 1 or (mode == 0 and (r1 > 25 or r2 > 25)))


def _cdist_expanded(x1, x2):
    """x1 and x2 with their batch dims broadcast to each other's."""
    batch = torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    return x1.expand(*batch, *x1.shape[-2:]), x2.expand(*batch, *x2.shape[-2:])


def _cdist_forward(x1, x2, p, compute_mode=None):
    """cdist's distances [*, P, R] between the rows of x1 [*, P, M] and x2 [*, R, M]."""
    shape = torch.ops.aten._cdist_forward.default(meta(x1), meta(x2), p, compute_mode).shape
    if not computable(x1, x2):
        return NotImplemented
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    if compute_mode is not None and compute_mode not in (0, 1, 2):
        raise RuntimeError(f"possible modes: 0, 1, 2, but was: {compute_mode}")
    if 0 in shape:
        return x1.new_empty(shape)
    a, b = _cdist_expanded(x1, x2)
    if _cdist_uses_mm(p, compute_mode, x1.shape[-2], x2.shape[-2]):
        return torch.ops.aten._euclidean_dist(a, b).reshape(shape)
    return _distance(a.unsqueeze(-2) - b.unsqueeze(-3), p).reshape(shape)


def _cdist_backward(grad, x1, x2, p, cdist):
    """The gradient of cdist with respect to x1, of x1's batch-broadcast shape (autograd sums it)."""
    torch.ops.aten._cdist_backward.default(meta(grad), meta(x1), meta(x2), p, meta(cdist))
    if not computable(grad, x1, x2, cdist):
        return NotImplemented
    a, b = _cdist_expanded(x1, x2)
    if p == 0 or 0 in a.shape or 0 in b.shape:
        return torch.zeros(a.shape, dtype=x1.dtype, device=x1.device)
    g = _distance_grad(a.unsqueeze(-2) - b.unsqueeze(-3), cdist, grad, p)  # [*, P, R, M]
    return g.sum(-2)


def _pairs(n: int, device):
    """The (i, j) row pairs i < j of pdist, in its order, as two index tensors on the device."""
    i, j = torch.triu_indices(n, n, 1)
    return i.to(device), j.to(device)


def _pdist_forward(x, p=2.0):
    """pdist: the distances between every pair of rows i < j of x [N, M], row-major."""
    shape = torch.ops.aten._pdist_forward.default(meta(x), p).shape
    if not computable(x):
        return NotImplemented
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")
    if 0 in shape:
        return x.new_empty(shape)
    i, j = _pairs(x.shape[0], x.device)
    return _distance(x[i] - x[j], p)


def _pdist_backward(grad, x, p, pdist):
    """pdist's gradient: each pair's term added into its first row and taken from its second."""
    torch.ops.aten._pdist_backward.default(meta(grad), meta(x), p, meta(pdist))
    if not computable(grad, x, pdist):
        return NotImplemented
    out = torch.zeros_like(x, memory_format=torch.contiguous_format)
    if pdist.numel() == 0 or p == 0:
        return out
    i, j = _pairs(x.shape[0], x.device)
    g = _distance_grad(x[i] - x[j], pdist, grad, p)
    return out.index_add_(0, i, g).index_add_(0, j, g, alpha=-1)


# ---------------------------------------------------------------------------------------------------
# grid sampling
# ---------------------------------------------------------------------------------------------------

_BILINEAR, _NEAREST, _BICUBIC = 0, 1, 2
_ZEROS, _BORDER, _REFLECTION = 0, 1, 2


def _clip(x, n: int):
    """x clipped to [0, n - 1]; its gradient is 1 strictly inside only (CPU counts the borders out)."""
    inside = (x > 0) & (x < n - 1)
    return torch.where(inside, x, x.detach().clamp(0, n - 1))


def _reflect(x, twice_low: int, twice_high: int):
    """x reflected into [low, high] about its ends (CPU's fold: |x - low| modulo the span, flipped
    on odd folds), with the gradient sign of each fold."""
    if twice_low == twice_high:
        return torch.zeros_like(x)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    x = x - low
    x = torch.where(x < 0, -x, x)
    extra = torch.fmod(x, span)
    flips = torch.floor(x.detach() / span)
    return torch.where(torch.remainder(flips, 2) == 0, extra + low, span - extra + low)


def _pad_coordinate(x, n: int, padding: int, align_corners: bool):
    """A source coordinate under the padding mode: clipped (border) or reflected then clipped."""
    if padding == _BORDER:
        return _clip(x, n)
    if padding == _REFLECTION:
        x = _reflect(x, 0, 2 * (n - 1)) if align_corners else _reflect(x, -1, 2 * n - 1)
        return _clip(x, n)
    return x


def _unnormalize(g, n: int, align_corners: bool):
    """A grid coordinate in [-1, 1] as a position in an axis of n elements (CPU's arithmetic order)."""
    if align_corners:
        return ((g + 1) / 2) * (n - 1)
    return ((g + 1) * n - 1) / 2


def _cubic_weights(t):
    """The four cubic convolution weights (A = -0.75) of taps -1, 0, 1, 2 at fraction t."""
    a = -0.75

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _channel_rows(x):
    """x [N, C, *in] as rows of channels [N * in, C]: a tap reads one row."""
    return x.reshape(x.shape[0], x.shape[1], -1).transpose(1, 2).reshape(-1, x.shape[1])


def _tap_rows(taps, sizes, padding: int):
    """The rows of _channel_rows [N * out] at integer positions `taps` ([N, *out] floats, one per
    spatial dim), and under zeros padding whether each lies inside the input (else None)."""
    flat = torch.zeros((), dtype=torch.int64, device=taps[0].device)
    valid = None
    for k, t in enumerate(taps):
        if padding == _ZEROS:
            ok = (t >= 0) & (t <= sizes[k] - 1)
            valid = ok if valid is None else valid & ok
        flat = flat * sizes[k] + t.clamp(0, sizes[k] - 1).to(torch.int64)
    n = taps[0].shape[0]
    first = torch.arange(n, device=flat.device).reshape(n, *[1] * (taps[0].dim() - 1)) * math.prod(sizes)
    return (flat + first).reshape(-1), valid


def _grid_sample(x, grid, mode: int, padding: int, align_corners: bool):
    """Samples x [N, C, *in] at grid [N, *out, d], channels last: [N, *out, C]. Every
    interpolation tap reads the input's channel rows at flat positions (an index_select; its
    backward an index_add of rows, which the device does far faster than a scatter of single
    elements), weighted and summed. A composition of differentiable ops, so its gradient is
    CPU's (a tap's weight carries all of the output's dependence on the grid)."""
    n, c = x.shape[:2]
    sizes = list(x.shape[2:])
    dims = len(sizes)
    out = list(grid.shape[1:-1])
    rows = _channel_rows(x)
    # Spatial dim k (depth, height, width order) takes grid coordinate dims-1-k (grid is x, y, z).
    coords = [_unnormalize(grid[..., dims - 1 - k], sizes[k], align_corners) for k in range(dims)]

    def sample(taps):
        """The input [N, *out, C] at integer positions `taps` (one per dim, as floats), 0 outside
        the input under zeros padding."""
        index, valid = _tap_rows(taps, sizes, padding)
        v = rows.index_select(0, index).reshape(n, *out, c)
        return v if valid is None else v * valid.unsqueeze(-1).to(v.dtype)

    if mode == _NEAREST:
        taps = [torch.round(_pad_coordinate(s, sizes[k], padding, align_corners)).detach()
                for k, s in enumerate(coords)]  # fmt: skip
        return sample(taps)
    if mode == _BILINEAR:
        # The 2^d corner values combined one dim at a time, width first, by linear interpolation
        # lo + t (hi - lo): the value of a weighted sum of corners, and a gradient with respect
        # to t made of differences of neighbours, as CPU's 2-d kernel computes it (a weighted
        # sum's gradient cancels heavily; 3-d takes _trilinear_backward for CPU's order).
        src = [_pad_coordinate(s, sizes[k], padding, align_corners) for k, s in enumerate(coords)]
        low = [torch.floor(s).detach() for s in src]
        corners = [sample([lo + hi for lo, hi in zip(low, choice, strict=True)])
                   for choice in itertools.product((0, 1), repeat=dims)]  # fmt: skip
        for k in reversed(range(dims)):
            t = (src[k] - low[k]).unsqueeze(-1)
            corners = [torch.lerp(corners[i], corners[i + 1], t) for i in range(0, len(corners), 2)]
        return corners[0]
    # Bicubic (2-d): four taps per dim around floor, each tap coordinate padded on its own;
    # rows first, then the column of row results.
    low = [torch.floor(s).detach() for s in coords]
    ty = [_pad_coordinate(low[0] - 1 + i, sizes[0], padding, align_corners).detach() for i in range(4)]
    tx = [_pad_coordinate(low[1] - 1 + j, sizes[1], padding, align_corners).detach() for j in range(4)]
    wy, wx = (_cubic_weights((s - lo).unsqueeze(-1)) for s, lo in zip(coords, low, strict=True))
    rows_i = [_cubic([sample([ty[i], tx[j]]) for j in range(4)], wx) for i in range(4)]
    return _cubic(rows_i, wy)


def _cubic(values, weights):
    """sum_i w_i v_i written as v_1 + sum_(i != 1) w_i (v_i - v_1) (the weights sum to 1): the same
    value, and a gradient with respect to the fraction made of differences of neighbours."""
    base = values[1]
    result = base
    for i in (0, 2, 3):
        result = result + weights[i] * (values[i] - base)
    return result


def _grid_sampler(dims: int):
    check = getattr(torch.ops.aten, f"grid_sampler_{dims}d").default

    def forward(x, grid, interpolation_mode, padding_mode, align_corners):
        shape = check(meta(x), meta(grid), interpolation_mode, padding_mode, align_corners).shape
        if not computable(x, grid):  # CPU computes fp16 and bf16 coordinates in their own precision
            return NotImplemented
        if 0 in shape:
            return x.new_zeros(shape)
        y = _grid_sample(x, grid, interpolation_mode, padding_mode, align_corners)
        return y.movedim(-1, 1).contiguous()

    return forward


def _trilinear_backward(grad, x, grid, padding: int, align_corners: bool, want_x: bool):
    """grid_sampler_3d's bilinear gradients, in CPU's arithmetic order. Its grid gradient
    sums, per output position, value * (the other two dims' weights) * gradient with the sign of
    the corner, channel by channel and corner by corner, then times the coordinate's derivative:
    a sum that cancels heavily, so only the same order gives CPU's rounding (the 2-d kernel sums
    differences of neighbours, which _grid_sample's composition reproduces)."""
    n, c = x.shape[:2]
    sizes = list(x.shape[2:])
    positions = grid.shape[1:-1].numel()
    src, slope = [], []
    for k in range(3):  # the padded coordinate and its derivative (the padding's and scale's)
        with _autograd_inside_kernel():
            g = grid[..., 2 - k].detach().reshape(n, positions).requires_grad_(True)
            s = _pad_coordinate(_unnormalize(g, sizes[k], align_corners), sizes[k], padding, align_corners)
            (d,) = torch.autograd.grad(s, g, torch.ones_like(s))
        src.append(s.detach())
        slope.append(d)
    low = [torch.floor(s) for s in src]
    weights = [((lo + 1) - s, s - lo) for s, lo in zip(src, low, strict=True)]  # low corner, high corner
    rows = _channel_rows(x)
    g_out = grad.reshape(n, c, positions).transpose(0, 1).contiguous()  # [C, N, L]
    g_rows = grad.reshape(n, c, positions).transpose(1, 2).reshape(-1, c) if want_x else None
    gx = torch.zeros_like(rows) if want_x else None
    terms = []
    for corner in itertools.product((0, 1), repeat=3):  # depth outermost, width fastest: CPU's order
        index, valid = _tap_rows([lo + side for lo, side in zip(low, corner, strict=True)], sizes, padding)
        wz, wy, wx = (weights[k][corner[k]] for k in range(3))
        if valid is not None:
            wx = wx * valid  # an outside corner adds 0 to both gradients
        if want_x:
            gx.index_add_(0, index, g_rows * ((wx * wy) * wz).reshape(-1, 1))
        value = rows.index_select(0, index).t().contiguous().view(c, n, positions)  # [C, N, L]
        sign = [1.0 if side else -1.0 for side in reversed(corner)]  # x, y, z
        tx = ((value * wy) * wz) * g_out * sign[0]
        ty = ((value * wx) * wz) * g_out * sign[1]
        tz = ((value * wx) * wy) * g_out * sign[2]
        if valid is not None:
            tx, ty = tx * valid, ty * valid
        terms.append(torch.stack([tx, ty, tz], 1))  # [C, 3, N, L]
    total = torch.zeros(3, n, positions, device=x.device)
    for channel in range(c):
        for t in terms:
            total = total + t[channel]
    gg = (torch.stack(slope[::-1]) * total).permute(1, 2, 0).reshape(grid.shape)
    if want_x:
        gx = gx.reshape(n, -1, c).transpose(1, 2).reshape(x.shape)
    return gx, gg


def _grid_sampler_backward(dims: int):
    check = getattr(torch.ops.aten, f"grid_sampler_{dims}d_backward").default

    def backward(grad, x, grid, interpolation_mode, padding_mode, align_corners, output_mask):
        check(meta(grad), meta(x), meta(grid), interpolation_mode, padding_mode, align_corners, output_mask)
        if not computable(grad, x, grid):
            return NotImplemented
        want_x = bool(output_mask[0])
        if grad.numel() == 0 or x.numel() == 0:
            gx = torch.zeros_like(x, memory_format=torch.contiguous_format) if want_x else None
            return gx, torch.zeros_like(grid, memory_format=torch.contiguous_format)
        if dims == 3 and interpolation_mode == _BILINEAR:
            return _trilinear_backward(grad, x, grid, padding_mode, align_corners, want_x)
        with _autograd_inside_kernel():
            xf = x.detach().requires_grad_(want_x)
            gf = grid.detach().requires_grad_(True)
            y = _grid_sample(xf, gf, interpolation_mode, padding_mode, align_corners)
            leaves = [xf, gf] if want_x else [gf]
            # The gradient channels last as the composition's result: elementwise ops on the
            # device are much slower on transposed strides than one copy.
            g = grad.detach().movedim(1, -1).contiguous()
            grads = torch.autograd.grad(y, leaves, g, allow_unused=True)
        gg = grads[-1] if grads[-1] is not None else torch.zeros_like(gf)  # nearest: no dependence
        return (grads[0] if want_x else None), gg

    return backward


# ---------------------------------------------------------------------------------------------------
# embedding_bag
# ---------------------------------------------------------------------------------------------------

_SUM, _MEAN, _MAX = 0, 1, 2


def _offset2bag(offsets, bags: int, n: int):
    """The bag of each of the n indices: 1 at every bag's start, summed up (CPU's construction)."""
    starts = torch.zeros(n + 1, dtype=torch.int64, device=offsets.device)
    starts.index_add_(0, offsets[:bags].long(), torch.ones(bags, dtype=torch.int64, device=offsets.device))
    return (starts.cumsum(0) - 1)[:n].clamp_min(0)


def _embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                   per_sample_weights=None, include_last_offset=False, padding_idx=-1):  # fmt: skip
    """embedding_bag: the bags' rows of `weight` summed, averaged or maximised, with CPU's workspace
    results (offset2bag is always filled; bag_size counts a bag's indices for mean and max; the
    max mode's indices of the maxima, the first of a tie)."""
    shapes = torch.ops.aten._embedding_bag.default(
        meta(weight), meta(indices), meta(offsets), scale_grad_by_freq, mode, sparse,
        meta(per_sample_weights), include_last_offset, padding_idx)  # fmt: skip
    if not computable(weight, per_sample_weights, dtypes=_FLOATS) or indices.dim() != 1:
        return NotImplemented
    if per_sample_weights is not None and mode != _SUM:
        raise RuntimeError("embedding_bag: per_sample_weights only supported with mode='sum'")
    if include_last_offset and offsets.numel() < 1:
        raise RuntimeError("include_last_offset: number of offset should be at least 1")
    n, rows, width = indices.numel(), weight.shape[0], weight.shape[1]
    bags = shapes[0].shape[0]
    index_dtype = offsets.dtype if indices.dtype == offsets.dtype else torch.int64
    dev = weight.device
    if offsets.numel() and n:  # CPU's checks of the offsets and indices: one read of four numbers
        first, last, low, high = torch.stack([offsets[0], offsets[-1], indices.min(), indices.max()]).tolist()
    elif offsets.numel():
        first, last, low, high = *torch.stack([offsets[0], offsets[-1]]).tolist(), 0, 0
    else:
        first, last, low, high = 0, 0, 0, 0
    if first != 0:
        raise RuntimeError("offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start "
                           f"from position 0. However, got {first}")  # fmt: skip
    if last > n:
        raise RuntimeError(f"offsets[-1] can not be greater than input's length {n} but got offsets[-1] of {last}")
    if low < 0 or high >= rows:
        bad = low if low < 0 else high
        raise RuntimeError(f"embedding_bag: index {bad} is out of bounds for the weight's {rows} rows")
    bag = _offset2bag(offsets, bags, n)
    active = torch.ones(n, dtype=torch.bool, device=dev)
    # Indices past the last offset of include_last_offset: CPU's fast sum and mean (no padding
    # index, unit strides) leave them out, its other paths add them to the last bag. Left out,
    # they get the bag number `bags`, which the backward skips.
    fast = mode != _MAX and padding_idx < 0 and weight.stride(1) == 1
    fast = fast and (per_sample_weights is None or per_sample_weights.stride(0) == 1)
    if include_last_offset and fast and last < n:
        active = torch.arange(n, device=dev) < last
        bag = torch.where(active, bag, bags)
    if padding_idx >= 0:
        active = active & (indices != padding_idx)
    counts = torch.zeros(bags + 1, dtype=torch.int64, device=dev).index_add_(0, bag, active.long())[:bags]
    gathered = weight.index_select(0, indices).float()  # [n, width]
    if mode == _MAX:
        # Inactive rows go to a spare bag past the end, which is dropped.
        target = torch.where(active, bag, bags).unsqueeze(1).expand(n, width)
        best = torch.full((bags + 1, width), _NEG_INF, device=dev).scatter_reduce(0, target, gathered, "amax")
        position = torch.arange(n, device=dev).unsqueeze(1).expand(n, width)
        is_best = gathered == best.gather(0, target)
        first_best = torch.full((bags + 1, width), n, dtype=torch.int64, device=dev)
        first_best = first_best.scatter_reduce(0, target, torch.where(is_best, position, n), "amin")[:bags]
        empty = (counts == 0).unsqueeze(1)
        max_indices = torch.where(empty, 0, indices.long()[first_best.clamp(max=max(n - 1, 0))] if n else 0)
        out = torch.where(empty, 0.0, best[:bags])
        return (out.to(weight.dtype), bag.to(index_dtype), counts.to(index_dtype), max_indices.to(index_dtype))
    scale = active.float()
    if per_sample_weights is not None:
        scale = scale * per_sample_weights.float()
    out = torch.zeros(bags + 1, width, device=dev).index_add_(0, bag, gathered * scale.unsqueeze(1))[:bags]
    if mode == _MEAN:
        out = out / counts.clamp_min(1).unsqueeze(1)
    else:
        counts = torch.zeros_like(counts)  # CPU leaves the sum mode's bag sizes at 0
    return out.to(weight.dtype), bag.to(index_dtype), counts.to(index_dtype), counts.to(index_dtype)


def _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
                                  scale_grad_by_freq, mode, per_sample_weights, padding_idx=-1):  # fmt: skip
    """The weight's gradient of embedding_bag: each bag's gradient added into the rows it read
    (scaled by the sample weights, the bag's size for mean, the index's frequency if asked), or
    for max into the rows its maxima came from."""
    if not computable(grad, per_sample_weights, dtypes=_FLOATS):
        return NotImplemented
    dev, width = grad.device, grad.shape[1]
    out = torch.zeros(num_weights, width, device=dev)
    if mode == _MAX:
        if scale_grad_by_freq:
            return NotImplemented
        nonempty = (bag_size > 0).unsqueeze(1)
        src = torch.where(nonempty, grad.float(), 0.0)
        out.scatter_add_(0, torch.where(nonempty, maximum_indices.long(), 0), src)
        return out.to(grad.dtype)
    if indices.numel() == 0:
        return out.to(grad.dtype)
    bag = offset2bag.long()
    in_bag = bag < grad.shape[0]  # indices the forward left out of every bag
    bag = bag.clamp(max=max(grad.shape[0] - 1, 0))
    rows = grad.float().index_select(0, bag)
    scale = in_bag.float()
    if padding_idx >= 0:
        scale = scale * (indices != padding_idx).float()
    if per_sample_weights is not None:
        scale = scale * per_sample_weights.float()
    if mode == _MEAN:
        scale = scale / bag_size.index_select(0, bag).clamp_min(1).float()
    if scale_grad_by_freq:
        ones = torch.ones(indices.numel(), device=dev)
        freq = torch.zeros(num_weights, device=dev).index_add_(0, indices.long(), ones)
        scale = scale / freq.index_select(0, indices.long())
    return out.index_add_(0, indices.long(), rows * scale.unsqueeze(1)).to(grad.dtype)


def _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
                            scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx=-1):  # fmt: skip
    """embedding_bag's weight gradient: the dense one (a sparse gradient cannot live on the device)."""
    if sparse:
        return NotImplemented
    if indices.numel() and offset2bag.numel() == 0:  # CPU's sum mode may leave it empty
        offset2bag = _offset2bag(offsets, offsets.numel(), indices.numel())
    return torch.ops.aten._embedding_bag_dense_backward(
        grad, indices, offset2bag, bag_size, maximum_indices, num_weights, scale_grad_by_freq, mode,
        per_sample_weights, padding_idx)  # fmt: skip


def _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode, padding_idx=-1):
    """The sample weights' gradient: each index's row of `weight` dotted with its bag's gradient."""
    if not computable(grad, weight, dtypes=_FLOATS):
        return NotImplemented
    if mode != _SUM:
        raise RuntimeError("embedding_bag_backward: per_sample_weights only supported for mode='sum'")
    if indices.numel() and offset2bag.numel() == 0:
        offset2bag = _offset2bag(offsets, offsets.numel(), indices.numel())
    rows = weight.index_select(0, indices).float()
    bag = offset2bag.long()
    in_bag = bag < grad.shape[0]
    g = (grad.float().index_select(0, bag.clamp(max=max(grad.shape[0] - 1, 0))) * rows).sum(1)
    g = torch.where(in_bag, g, 0.0)
    if padding_idx >= 0:
        g = torch.where(indices == padding_idx, 0.0, g)
    return g.to(grad.dtype)


# ---------------------------------------------------------------------------------------------------
# CTC loss
# ---------------------------------------------------------------------------------------------------


def _ctc_setup(log_probs, targets, input_lengths, target_lengths, blank):
    """CPU's argument checks, and the lengths as device tensors, the extended label
    sequences [B, 2L+1] (blank, l1, blank, l2, ..., blank) and whether each position may be
    reached from two back (CPU's rule: its label unlike the one there, so never a blank)."""
    if isinstance(input_lengths, torch.Tensor):
        input_lengths = input_lengths.tolist()
    if isinstance(target_lengths, torch.Tensor):
        target_lengths = target_lengths.tolist()
    torch.ops.aten._ctc_loss.default(meta(log_probs), meta(targets), input_lengths, target_lengths, blank)
    steps, batch, labels = log_probs.shape
    if not 0 <= blank < labels:
        raise RuntimeError("blank must be in label range")
    if len(input_lengths) != batch:
        raise RuntimeError("input_lengths must be of size batch_size")
    if len(target_lengths) != batch:
        raise RuntimeError("target_lengths must be of size batch_size")
    where = "(while checking arguments for ctc_loss_allocate_outputs)"
    for name, lengths in (("input_lengths", input_lengths), ("target_lengths", target_lengths)):
        if min(lengths, default=0) < 0:
            raise RuntimeError(f"Expected {name} to have value at least 0, but got value {min(lengths)} {where}")
    if max(input_lengths, default=0) > steps:
        raise RuntimeError(f"Expected input_lengths to have value at most {steps}, but got value "
                           f"{max(input_lengths)} {where}")  # fmt: skip
    longest = max(target_lengths, default=0)
    dev = log_probs.device
    if targets.dim() == 1:
        total = sum(target_lengths)
        if targets.shape[0] < total:
            raise RuntimeError(f"Expected tensor to have size {total} at dimension 0, but got size "
                               f"{targets.shape[0]} for argument #2 'targets' {where}")  # fmt: skip
        starts = [sum(target_lengths[:b]) for b in range(batch)]
        position = torch.tensor(starts).unsqueeze(1) + torch.arange(longest)
        position = position.clamp(max=max(targets.shape[0] - 1, 0)).to(dev)
        empty = torch.zeros(batch, longest, dtype=torch.int64, device=dev)
        padded = targets.long()[position] if targets.numel() else empty
    else:
        if targets.shape[1] < longest:
            raise RuntimeError(f"Expected tensor to have size at least {longest} at dimension 1, but got size "
                               f"{targets.shape[1]} for argument #2 'targets' {where}")  # fmt: skip
        padded = targets[:, :longest].long()
    span = 2 * longest + 1
    extended = torch.full((batch, span), blank, dtype=torch.int64, device=dev)
    if longest:
        extended[:, 1::2] = padded.clamp(0, labels - 1)
    two_back = torch.cat([torch.full((batch, 2), -1, dtype=torch.int64, device=dev), extended[:, :-2]], 1)
    skip = extended != two_back
    return torch.tensor(input_lengths).to(dev), torch.tensor(target_lengths).to(dev), extended, skip


def _lse3(a, b, c):
    """log(e^a + e^b + e^c) elementwise, -inf where all three are (the device's logaddexp keeps
    -inf exactly; its exp of -inf is a tiny positive number, so log-sum-exp through exp is not)."""
    return torch.logaddexp(torch.logaddexp(a, b), c)


def _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    """CTC's negative log likelihood per batch element and log alpha [B, T, 2L+1]: the forward
    recursion over time in log space, all batch elements and label positions at once."""
    if not computable(log_probs):
        return NotImplemented
    in_t, tg_t, extended, skip = _ctc_setup(log_probs, targets, input_lengths, target_lengths, blank)
    steps, batch, _ = log_probs.shape
    span = extended.shape[1]
    dev = log_probs.device
    emit = log_probs.gather(2, extended.unsqueeze(0).expand(steps, batch, span))  # [T, B, S]
    # alphas[:, 0] is a virtual step before t = 0 (probability 1 at position 0), so one
    # recursion covers t = 0 and an input of length 0 reads its likelihood from there.
    alphas = torch.full((batch, steps + 1, span), _NEG_INF, device=dev)
    alphas[:, 0, 0] = 0.0
    edge = torch.full((batch, 2), _NEG_INF, device=dev)
    no_skip = torch.where(skip, 0.0, _NEG_INF)
    previous = alphas[:, 0]
    for t in range(steps):
        shifted = torch.cat([edge, previous], 1)
        previous = emit[t] + _lse3(previous, shifted[:, 1:-1], shifted[:, :-2] + no_skip)
        alphas[:, t + 1] = previous
    # The likelihood: the last step's alphas at the final label and the final blank.
    last = alphas.gather(1, in_t.view(batch, 1, 1).expand(batch, 1, span)).squeeze(1)  # [B, S]
    end = (2 * tg_t).unsqueeze(1)
    final = last.gather(1, end).squeeze(1)
    before = torch.where(tg_t > 0, last.gather(1, (end - 1).clamp_min(0)).squeeze(1), _NEG_INF)
    return -torch.logaddexp(final, before), alphas[:, 1:]


def _ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha,
                       blank, zero_infinity=False):  # fmt: skip
    """CTC's gradient with respect to log_probs as CPU gives it (the gradient through a log-softmax
    of them: exp(log_probs) minus the label posteriors): the backward recursion (beta) in log
    space, alpha + beta gathered per label by a scatter-add of their exponentials."""
    if not computable(grad, log_probs, neg_log_likelihood, log_alpha):
        return NotImplemented
    in_t, tg_t, extended, skip = _ctc_setup(log_probs, targets, input_lengths, target_lengths, blank)
    steps, batch, labels = log_probs.shape
    span = extended.shape[1]
    dev = log_probs.device
    emit = log_probs.gather(2, extended.unsqueeze(0).expand(steps, batch, span))
    # Positions that may skip forward: the one two ahead allows it (its label unlike this one's).
    ahead_skip = torch.cat([skip[:, 2:], torch.zeros(batch, 2, dtype=torch.bool, device=dev)], 1)
    no_skip = torch.where(ahead_skip, 0.0, _NEG_INF)
    positions = torch.arange(span, device=dev).unsqueeze(0)
    end = (2 * tg_t).unsqueeze(1)
    start = torch.where((positions == end) | ((positions == end - 1) & (tg_t.unsqueeze(1) > 0)), 0.0, _NEG_INF)
    edge = torch.full((batch, 2), _NEG_INF, device=dev)
    last_step = (in_t - 1).unsqueeze(1)
    betas = torch.full((steps, batch, span), _NEG_INF, device=dev)
    following = torch.full((batch, span), _NEG_INF, device=dev)
    for t in range(steps - 1, -1, -1):
        shifted = torch.cat([following, edge], 1)
        rec = _lse3(following, shifted[:, 1:-1], shifted[:, 2:] + no_skip)
        # A batch element's recursion starts at its last step; before that it has no mass.
        following = emit[t] + torch.where(last_step == t, start, torch.where(last_step > t, rec, _NEG_INF))
        betas[t] = following
    nll = neg_log_likelihood
    posterior = torch.exp(log_alpha.permute(1, 0, 2) + betas + nll.view(1, batch, 1) - emit)  # [T, B, S]
    mass = torch.zeros(steps, batch, labels, device=dev)
    mass.scatter_add_(2, extended.unsqueeze(0).expand(steps, batch, span), posterior)
    g = (log_probs.exp() - mass) * grad.view(1, batch, 1)
    live = torch.arange(steps, device=dev).view(steps, 1, 1) < in_t.view(1, batch, 1)
    impossible = torch.isinf(nll).view(1, batch, 1)  # no alignment: CPU's exp(-inf + inf) is NaN
    if zero_infinity:
        live = live & ~impossible
    else:
        g = torch.where(impossible, float("nan"), g)
    return torch.where(live, g, 0.0)


# ---------------------------------------------------------------------------------------------------
# margin losses
# ---------------------------------------------------------------------------------------------------

_NONE, _REDUCE_MEAN, _REDUCE_SUM = 0, 1, 2


def _as_rows(x, target, multilabel: bool):
    """x as [N, C] rows and target as [N, C] (multilabel) or [N] (multi-class)."""
    rows = x.reshape(-1, x.shape[-1]) if x.dim() else x.reshape(1, 1)
    return rows, target.reshape(rows.shape[0], -1).long() if multilabel else target.reshape(-1).long()


def _multilabel_terms(x, target):
    """Per sample the hinge terms 1 - x[y_j] + x[i] [N, J, C] and the pairs that count: j a target
    before the first -1, i not a target; and is_target [N, C]."""
    rows, t = _as_rows(x, target, True)
    rows = rows.float()
    c = rows.shape[1]
    valid = (t < 0).long().cumsum(1) == 0
    index = t.clamp(0, c - 1)  # CPU reads out-of-range targets unchecked; here they are clamped
    is_target = torch.zeros_like(rows).scatter_add_(1, index, valid.float()) > 0
    hinge = (1 - rows.gather(1, index)).unsqueeze(2) + rows.unsqueeze(1)
    counts = valid.unsqueeze(2) & ~is_target.unsqueeze(1)
    return hinge, counts, is_target, c


def _multilabel_margin_loss_forward(x, target, reduction):
    """multilabel_margin_loss: per sample the positive hinges over (target, non-target) pairs / C."""
    shapes = torch.ops.aten.multilabel_margin_loss_forward.default(meta(x), meta(target), reduction)
    if not computable(x) or x.numel() == 0:
        return NotImplemented
    hinge, counts, is_target, c = _multilabel_terms(x, target)
    per_sample = torch.where(counts & (hinge > 0), hinge, 0.0).sum((1, 2)) / c
    loss = {_NONE: per_sample, _REDUCE_MEAN: per_sample.mean(), _REDUCE_SUM: per_sample.sum()}[reduction]
    # CPU's loss of one sample without reduction is 0-dim; the meta function says [1].
    loss_shape = x.shape[:-1] if reduction == _NONE else ()
    return loss.reshape(loss_shape).to(x.dtype), is_target.to(x.dtype).reshape(shapes[1].shape)


def _multilabel_margin_loss_backward(grad, x, target, reduction, is_target):
    """Its gradient: each positive hinge adds 1/C to the non-target and takes it from the target."""
    if not computable(grad, x) or x.numel() == 0 or target.shape != x.shape:
        return NotImplemented  # CPU raises its own shape errors
    hinge, counts, _, c = _multilabel_terms(x, target)
    rows, t = _as_rows(x, target, True)
    n = rows.shape[0]
    scale = 1.0 / (c * n) if reduction == _REDUCE_MEAN else 1.0 / c
    positive = (counts & (hinge > 0)).float() * scale  # [N, J, C]
    g = positive.sum(1)
    g = g.scatter_add(1, t.clamp(0, c - 1), -positive.sum(2))
    g = g * (grad.float().reshape(n, 1) if reduction == _NONE else grad.float())
    return g.reshape(x.shape).to(x.dtype)


def _multi_margin_loss_backward(grad, x, target, p, margin, weight=None, reduction=_REDUCE_MEAN):
    """multi_margin_loss's gradient: each positive margin term margin - x[y] + x[i] (i != y)
    adds its derivative (1, or 2 z for p = 2, times weight[y], over C) to x[i] and takes it from x[y]."""
    if not computable(grad, x, weight):
        return NotImplemented
    if p not in (1, 2):
        raise RuntimeError("only p == 1 and p == 2 supported")
    if x.numel() == 0:
        return NotImplemented
    rows, t = _as_rows(x, target, False)
    rows = rows.float()
    n, c = rows.shape
    if t.numel() != n or (weight is not None and weight.numel() != c):
        return NotImplemented  # CPU raises its own shape errors
    if bool(((t < 0) | (t >= c)).any()):
        raise RuntimeError("target out of range")
    z = margin - rows.gather(1, t.unsqueeze(1)) + rows
    other = torch.arange(c, device=x.device).unsqueeze(0) != t.unsqueeze(1)
    scale = 1.0 / (c * n) if reduction == _REDUCE_MEAN else 1.0 / c
    h = (scale if p == 1 else 2 * scale * z) * torch.ones_like(z)
    if weight is not None:
        h = h * weight.float()[t].unsqueeze(1)
    h = torch.where(other & (z > 0), h, 0.0)
    g = h.scatter_add(1, t.unsqueeze(1), -h.sum(1, keepdim=True))
    g = g * (grad.float().reshape(n, 1) if reduction == _NONE else grad.float())
    return g.reshape(x.shape).to(x.dtype)


# ---------------------------------------------------------------------------------------------------
# anti-aliased bilinear interpolation
# ---------------------------------------------------------------------------------------------------


def _upsample_bilinear2d_aa(x, output_size, align_corners, scales_h=None, scales_w=None):
    """Anti-aliased bilinear interpolation: separable, so along each spatial dim a fixed [in, out]
    matrix (read off CPU's op applied to a basis: a function of the sizes alone) contracted
    with the input on the device."""
    from ._decomposed import _interpolation_matrices

    op = torch.ops.aten._upsample_bilinear2d_aa.default
    shape = op(meta(x), output_size, align_corners, scales_h, scales_w).shape
    if not computable(x):
        return NotImplemented
    if x.numel() == 0 or 0 in shape:
        return x.new_zeros(shape)
    h, w = _interpolation_matrices(op, x.shape, output_size, (align_corners,), [scales_h, scales_w], x.device)
    return torch.einsum("...xy,xa,yb->...ab", x.float(), h, w).to(x.dtype).reshape(shape)


def _upsample_bilinear2d_aa_backward(grad, output_size, input_size, align_corners, scales_h=None, scales_w=None):
    """Its backward: the output's gradient contracted with the same matrices the other way."""
    from ._decomposed import _upsample_backward

    if not computable(grad):
        return NotImplemented
    return _upsample_backward("_upsample_bilinear2d_aa", 2, True)(
        grad, output_size, input_size, align_corners, scales_h, scales_w
    )


KERNELS = {
    "_cdist_forward": _cdist_forward,
    "_cdist_backward": _cdist_backward,
    "_pdist_forward": _pdist_forward,
    "_pdist_backward": _pdist_backward,
    "grid_sampler_2d": _grid_sampler(2),
    "grid_sampler_3d": _grid_sampler(3),
    "grid_sampler_2d_backward": _grid_sampler_backward(2),
    "grid_sampler_3d_backward": _grid_sampler_backward(3),
    "_embedding_bag": _embedding_bag,
    "_embedding_bag_forward_only": _embedding_bag,
    "_embedding_bag_backward": _embedding_bag_backward,
    "_embedding_bag_dense_backward": _embedding_bag_dense_backward,
    "_embedding_bag_per_sample_weights_backward": _embedding_bag_per_sample_weights_backward,
    "_ctc_loss": _ctc_loss,
    "_ctc_loss.Tensor": _ctc_loss,
    "_ctc_loss_backward": _ctc_loss_backward,
    "_ctc_loss_backward.Tensor": _ctc_loss_backward,
    "multilabel_margin_loss_forward": _multilabel_margin_loss_forward,
    "multilabel_margin_loss_forward.output": with_out(
        _multilabel_margin_loss_forward, ("output", "is_target"), same_scalar_type
    ),
    "multilabel_margin_loss_backward": _multilabel_margin_loss_backward,
    "multilabel_margin_loss_backward.grad_input": with_out(
        _multilabel_margin_loss_backward, ("grad_input",), same_scalar_type
    ),
    "multi_margin_loss_backward": _multi_margin_loss_backward,
    "multi_margin_loss_backward.grad_input": with_out(_multi_margin_loss_backward, ("grad_input",), same_scalar_type),
    "_upsample_bilinear2d_aa": _upsample_bilinear2d_aa,
    "_upsample_bilinear2d_aa.out": with_out(_upsample_bilinear2d_aa, ("out",), structured),
    "_upsample_bilinear2d_aa_backward": _upsample_bilinear2d_aa_backward,
    "_upsample_bilinear2d_aa_backward.grad_input": with_out(
        _upsample_bilinear2d_aa_backward, ("grad_input",), structured
    ),
}
