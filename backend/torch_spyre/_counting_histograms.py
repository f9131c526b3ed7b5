"""Histograms on the device (histogram, histogramdd, bincount), composed of native ops: a value's
bin is the upper bound of the edges (the rightmost bin closed), as on CPU; a histogram's range is
read back where CPU reads it too. Listed in _counting.KERNELS.
"""

from __future__ import annotations

import math

import torch

from ._composite import cpp_name, scalar_name
from ._counting_search import _bisect


def _c_float(v: float) -> str:
    """A double as C++'s ostream prints it (3, 0.5, nan, inf): for CPU's messages."""
    return f"{v:g}"


# ---------------------------------------------------------------------------------------- histograms
def _hist_checks(x, weight):
    """CPU's checks of histogramdd's input [..., D] and weight."""
    if x.dtype not in (torch.float32, torch.float64):
        raise NotImplementedError(f"\"histogramdd\" not implemented for '{scalar_name(x.dtype)}'")
    if weight is None:
        return
    if weight.shape != x.shape[:-1]:
        raise RuntimeError(
            "torch.histogramdd: if weight tensor is provided it should have the same shape as the input tensor "
            f"excluding its innermost dimension, but got input with shape {list(x.shape)} and weight with shape "
            f"{list(weight.shape)}"
        )
    if weight.dtype != x.dtype:
        raise RuntimeError(
            "torch.histogramdd: if weight tensor is provided, input tensor and weight tensor should have the same "
            f"dtype, but got input({cpp_name(x.dtype)}), and weight({cpp_name(weight.dtype)})"
        )


def _hist_edges(x2, bins, hist_range, name: str):
    """The bin edges of each of x2's columns for `bins` equal bins, as CPU makes them: over `hist_range`
    (flat [lo0, hi0, lo1, ...]) or the data's own range (a read-back, as CPU's), [0, 1] for no data,
    widened by 1/2 either side when a single point. The edges are CPU's linspace of the two ends,
    built on the host from those two numbers (CPU's rounding of its vectorised linspace is what decides
    an edge's last bit), then moved to the device."""
    dims = x2.shape[1]
    for d, b in enumerate(bins):
        if b <= 0:
            raise RuntimeError(f"{name}: bins must be > 0, but got {b} for dimension {d}")
    if hist_range is not None:
        if len(hist_range) != 2 * dims:
            raise RuntimeError(f"torch.histogramdd: for a {dims}-dimensional histogram range should have "
                               f"{2 * dims} elements, but got {len(hist_range)}")  # fmt: skip
        ends = [(float(hist_range[2 * d]), float(hist_range[2 * d + 1])) for d in range(dims)]
    elif x2.numel():
        low, high = torch.aminmax(x2, dim=0)
        ends = [tuple(p) for p in torch.stack([low, high], 1).tolist()]
    else:
        ends = [(0.0, 1.0)] * dims
    edges = []
    for d, (lo, hi) in enumerate(ends):
        if not (math.isfinite(lo) and math.isfinite(hi)):
            ends_text = f"[{_c_float(lo)}, {_c_float(hi)}]"
            raise RuntimeError(f"torch.histogramdd: dimension {d}'s range {ends_text} is not finite")
        if lo > hi:
            raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min {_c_float(lo)} max "
                               f"{_c_float(hi)} for dimension {d}")  # fmt: skip
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
        edges.append(torch.linspace(lo, hi, bins[d] + 1, dtype=x2.dtype).to(x2.device))
    return edges


def _hist_counts(x2, edges, weight, density: bool):
    """The histogram of the rows of x2 [N, D] over the bins between `edges` (one 1-D tensor per column):
    a point is counted when every coordinate lies within its outer edges (NaN never), in the bin whose
    left edge is the last one not above it (the upper bound of the edges, found by CPU's binary search,
    so that even unsorted edges give CPU's bins), the rightmost bin closed on its right."""
    n, dims = x2.shape
    sizes = [e.numel() - 1 for e in edges]
    hist = torch.zeros(math.prod(sizes), dtype=x2.dtype, device=x2.device)
    if n and hist.numel():
        flat = torch.zeros(n, dtype=torch.int64, device=x2.device)
        inside = torch.ones(n, dtype=torch.bool, device=x2.device)
        for d in range(dims):
            e, v = edges[d], x2[:, d].contiguous()
            inside = inside & (v >= e[0]) & (v <= e[-1])
            pos = _bisect(e.reshape(1, -1), v.reshape(1, n), right=True).reshape(n) - 1
            # Within the outer edges the search gives 0..len-1; len-1 (the last edge itself) is the last bin.
            flat = flat * sizes[d] + pos.clamp(0, sizes[d] - 1)
        w = torch.ones(n, dtype=x2.dtype, device=x2.device) if weight is None else weight.reshape(n)
        hist.index_add_(0, flat, torch.where(inside, w, torch.zeros((), dtype=w.dtype, device=w.device)))
    hist = hist.reshape(sizes)
    if density:
        hist = hist / hist.sum()
        for d, e in enumerate(edges):
            shape = [1] * dims
            shape[d] = sizes[d]
            hist = hist / (e[1:] - e[:-1]).reshape(shape)
    return hist


def _histogram_bin_ct(x, bins=100, *, range=None, weight=None, density=False):
    """histogram.bin_ct: `bins` equal bins over `range` or the data's range; (hist, bin_edges)."""
    _hist_checks(x.reshape(-1, 1), None if weight is None else weight.reshape(-1))
    if x.dtype != torch.float32:
        return NotImplemented
    x2 = x.reshape(-1, 1)
    edges = _hist_edges(x2, [bins], range, "torch.histogram()")
    return _hist_counts(x2, edges, weight, density), edges[0]


def _histogram_bins(x, bins, *, weight=None, density=False):
    """histogram.bins_tensor: the bins between the given edges; (hist, a copy of the edges)."""
    _hist_checks(x.reshape(-1, 1), None if weight is None else weight.reshape(-1))
    _edge_checks(x, [bins], "torch.histogram()")
    if x.dtype != torch.float32:
        return NotImplemented
    edges = [bins.contiguous()]
    return _hist_counts(x.reshape(-1, 1), edges, weight, density), bins.clone(memory_format=torch.contiguous_format)


def _edge_checks(x, bins, name: str):
    """CPU's checks of given bin edges: one dimension, at least two edges, the input's dtype."""
    for d, b in enumerate(bins):
        if b.dim() != 1:
            raise RuntimeError(f"torch.histogramdd: bins tensor should have one dimension, but got {b.dim()} "
                               f"dimensions in the bins tensor for dimension {d}")  # fmt: skip
        if b.numel() < 2:
            raise RuntimeError(f"{name}: bins must be > 0, but got {b.numel() - 1} for dimension {d}")
        if b.dtype != x.dtype:
            raise RuntimeError(
                "torch.histogramdd: input tensor and bins tensors should have the same dtype, but got input with "
                f"dtype {cpp_name(x.dtype)} and bins for dimension {d} with dtype {cpp_name(b.dtype)}"
            )


def _dd_input(x, bins):
    """histogramdd's input as rows of points, after CPU's checks of its rank and of the count of bins."""
    if x.dim() < 2:
        raise RuntimeError("torch.histogramdd: input tensor should have at least 2 dimensions")
    if len(bins) != x.shape[-1]:
        raise RuntimeError("histogramdd: The size of bins must be equal to the innermost dimension of the input.")
    return x.reshape(-1, x.shape[-1])


def _histogramdd_bin_edges(x, bins, *, range=None, weight=None, density=False):
    """_histogramdd_bin_edges: the edges of `bins` equal bins per dimension of the points."""
    x2 = _dd_input(x, bins)
    _hist_checks(x, weight)
    if x.dtype != torch.float32:
        return NotImplemented
    return _hist_edges(x2, list(bins), range, "torch.histogramdd()")


def _histogramdd_from_bin_cts(x, bins, *, range=None, weight=None, density=False):
    """_histogramdd_from_bin_cts: the histogram of the points over `bins` equal bins per dimension."""
    x2 = _dd_input(x, bins)
    _hist_checks(x, weight)
    if x.dtype != torch.float32:
        return NotImplemented
    return _hist_counts(x2, _hist_edges(x2, list(bins), range, "torch.histogramdd()"), weight, density)


def _histogramdd_from_bin_tensors(x, bins, *, weight=None, density=False):
    """_histogramdd_from_bin_tensors: the histogram of the points over the given edges per dimension."""
    x2 = _dd_input(x, bins)
    _hist_checks(x, weight)
    _edge_checks(x, bins, "torch.histogramdd()")
    if x.dtype != torch.float32:
        return NotImplemented
    return _hist_counts(x2, [b.contiguous() for b in bins], weight, density)


def _histogram_rule(result, out):
    """histogram's out= rule: out has exactly the result's dtype."""
    if out.dtype != result.dtype:
        return f"torch.histogram: the out tensors must be {result.dtype}, got {out.dtype}"
    return None


def _bincount(x, weights=None, minlength=0):
    """bincount: how often each of 0..max(x, minlength - 1) occurs in x (the sum of their weights):
    an index_add into a zeroed result. int64 counts; float32 weights sum in float32; integral or bool
    weights (double on CPU) sum exactly in int64 and are widened once at the end."""
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if x.dtype not in (torch.int64, torch.int32, torch.int8):
        return NotImplemented
    if x.dim() == 1 and x.numel() == 0:
        return torch.zeros(minlength, dtype=torch.int64, device=x.device)
    if x.dim() != 1:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    low, high = (int(v) for v in torch.stack(torch.aminmax(x)).tolist())
    if low < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is not None and (weights.dim() != 1 or weights.numel() != x.numel()):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    size = max(high + 1, minlength)
    index = x.to(torch.int64)
    if weights is None:
        return torch.zeros(size, dtype=torch.int64, device=x.device).index_add_(0, index, torch.ones_like(index))
    if weights.dtype == torch.float32:
        return torch.zeros(size, dtype=torch.float32, device=x.device).index_add_(0, index, weights)
    if weights.dtype in (torch.int64, torch.int32, torch.int8, torch.bool):
        summed = torch.zeros(size, dtype=torch.int64, device=x.device).index_add_(0, index, weights.to(torch.int64))
        return summed.to(torch.float64)
    return NotImplemented  # half, bfloat16 or double weights: CPU sums them in double
