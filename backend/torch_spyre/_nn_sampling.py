"""Grid sampling (2-d and 3-d, every mode and padding) and anti-aliased bilinear interpolation on
the device, forward and backward, composed of native ops.

The 3-d trilinear backward follows CPU's closed form (its sum cancels heavily, so its rounding
matters); the other grid sampler backwards differentiate the forward composition on the device,
with autograd turned back on inside the kernel (``_autograd_inside_kernel``). Anti-aliased
interpolation contracts the input with matrices read off CPU's op applied to a basis (a function
of the sizes alone). The kernels are registered through ``_nn_ops.KERNELS``.
"""

from __future__ import annotations

import contextlib
import itertools
import math

import torch

from ._composite import computable, meta


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
    """grid_sampler_3d's bilinear gradients, in CPU's arithmetic order. The input's gradient
    adds each position's corners in turn, depth outermost, width fastest (the device's index_add
    of floats keeps index order). Its grid gradient
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
    taps, tap_weights = [], []  # per corner: the input row it adds to, and its weight
    terms = []
    for corner in itertools.product((0, 1), repeat=3):  # depth outermost, width fastest: CPU's order
        index, valid = _tap_rows([lo + side for lo, side in zip(low, corner, strict=True)], sizes, padding)
        wz, wy, wx = (weights[k][corner[k]] for k in range(3))
        if valid is not None:
            wx = wx * valid  # an outside corner adds 0 to both gradients
        taps.append(index)
        tap_weights.append((wx * wy) * wz)
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
    gx = None
    if want_x:  # one index_add of every position's 8 corners, position by position: CPU's order
        added = (g_rows.unsqueeze(1) * torch.stack(tap_weights, -1).reshape(-1, 8, 1)).reshape(-1, c)
        gx = torch.zeros_like(rows).index_add_(0, torch.stack(taps, 1).reshape(-1), added)
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
