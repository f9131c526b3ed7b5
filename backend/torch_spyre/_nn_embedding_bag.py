"""embedding_bag on the device, forward and backward, composed of native ops.

The bags' rows are summed, averaged or maximised in fp32 and rounded once, as CPU does, with CPU's
workspace results (max keeps the first of tied maxima, and its backward gives that row the
gradient). The kernels are registered through ``_nn_ops.KERNELS``.
"""

from __future__ import annotations

import torch

from ._composite import computable, meta

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)  # computed in fp32, rounded once, as CPU does
_NEG_INF = float("-inf")


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
