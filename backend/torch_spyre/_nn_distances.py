"""cdist and pdist on the device, forward and backward, composed of native ops.

The distances follow CPU's special cases for p = 0, 1, 2 and inf, and CPU's choice of the
matrix-product form for the euclidean distance; the backward kernels take CPU's conventions in
closed form (0 where a distance is 0, every tied coordinate of the inf-norm gets the whole
gradient). pdist's pair index table depends on the size alone. The kernels are registered through
``_nn_ops.KERNELS``.
"""

from __future__ import annotations

import math

import torch

from ._composite import computable, meta


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
