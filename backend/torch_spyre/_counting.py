"""Searching, counting and uniqueness on the device (searchsorted, histograms, unique, mode), composed of native ops.

Every kernel here is a composition of ops the card runs natively (sort, gather, scatter, cumsum,
comparisons, nonzero); the input's data never goes to the host. A few small control values are read
back where the result's size depends on them (how many unique values, the largest bin of bincount)
or where CPU reads them too (a histogram's range). KERNELS maps ATen overload names to kernels; it is
merged into _decomposed.OWN, which registers them for the PrivateUse1 key.

The answers must be CPU's bit for bit, including where CPU's choice is arbitrary:
- searching is a binary search that probes the same positions as CPU's (so a NaN, in the values or
  in the sequence, lands where CPU puts it; counting comparisons would not);
- a histogram's bin of a value on an edge is the upper bound of the edges (the rightmost bin closed);
- mode returns, among equal values, the index that CPU's std::sort leaves last: the introsort's
  partitions are replayed level by level (`_introsort_arrangement`).
"""

from __future__ import annotations

import math

import torch

from ._composite import cpp_name, meta, scalar_name, with_out, write_out

# Dtypes the card computes in; anything else (float64, uint8, int16, complex) declines to the CPU.
_NUMERIC = (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int8)
_DEVICE = (*_NUMERIC, torch.bool)
_INSERTION_LIMIT = 16  # libstdc++'s std::sort leaves segments this short to its final insertion sort


def _sortable(x):
    """x as a dtype the device sorts and compares: bools as int8."""
    return x.to(torch.int8) if x.dtype == torch.bool else x


def _c_float(v: float) -> str:
    """A double as C++'s ostream prints it (3, 0.5, nan, inf): for CPU's messages."""
    return f"{v:g}"


# ----------------------------------------------------------------------------------------- searching
def _bisect(seq, values, right: bool):
    """The insertion points of values [B, k] in the rows of seq [B or 1, m]: for each value the binary
    search that CPU runs (interval [start, start + length), probe at start + length // 2, go right
    when not probe > value (right) or not probe >= value (left)), all values at once: bit_length(m)
    steps of one gather and one comparison. A NaN probe or value compares false, so the search goes
    right exactly as CPU's does. int64 [B, k]."""
    m = seq.shape[-1]
    start = torch.zeros(values.shape, dtype=torch.int64, device=values.device)
    if m == 0 or values.numel() == 0:
        return start
    length = torch.full(values.shape, m, dtype=torch.int64, device=values.device)
    rows = seq.expand(values.shape[0], m) if seq.shape[0] != values.shape[0] else seq
    for _ in range(m.bit_length()):
        half = torch.div(length, 2, rounding_mode="floor")
        mid = start + half
        probe = rows.gather(1, mid.clamp(max=m - 1))
        above = probe > values if right else probe >= values
        go = ~above & (length > 0)
        start = torch.where(go, mid + 1, start)
        length = torch.where(go, length - half - 1, half)
    return start


def _search_dtype(seq, values):
    """The dtype CPU compares a sequence and values in (both promoted), or None off the device."""
    if isinstance(values, torch.Tensor):
        dtype = torch.promote_types(seq.dtype, values.dtype)
    else:
        dtype = torch.result_type(seq, values)
    if dtype == torch.bool:
        raise NotImplementedError("\"searchsorted_out_cpu\" not implemented for 'Bool'")
    return dtype if dtype in _NUMERIC else None


def _search_checks(seq, values, out_int32, right, side, sorter):
    """CPU's argument checks of searchsorted, with its messages."""
    if side is not None and side not in ("left", "right"):
        raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}")
    if seq.dim() == 0:
        raise RuntimeError("torch.searchsorted(): boundaries tensor should have positive dimension, but got 0 "
                           "dimension")  # fmt: skip
    if sorter is not None and sorter.dtype != torch.int64:
        name = str(sorter.dtype).removeprefix("torch.")
        raise RuntimeError(f"torch.searchsorted(): sorter must be a tensor of long dtype but got dtype {name}")
    if not isinstance(values, torch.Tensor) and seq.dim() != 1:
        raise RuntimeError(
            "torch.searchsorted(): input value can be a scalar only when boundaries tensor dimension is 1, but we "
            f"got boundaries tensor dim({seq.dim()}) and input value's dim(0) numel(1)"
        )
    probe = meta(values) if isinstance(values, torch.Tensor) else torch.empty((), device="meta")
    sorter_meta = None if sorter is None else meta(sorter)
    torch.ops.aten.searchsorted.Tensor(meta(seq), probe, out_int32=out_int32, right=right, side=side,
                                       sorter=sorter_meta)  # fmt: skip
    if sorter is not None and sorter.numel():
        low, high = torch.aminmax(sorter)
        if low.item() < 0 or high.item() >= seq.shape[-1]:
            raise RuntimeError("torch.searchsorted(): sorter index out of range")


def _searchsorted(seq, values, *, out_int32=False, right=False, side=None, sorter=None):
    """searchsorted.Tensor / .Scalar: where each value goes in the innermost dim of seq (one sequence
    for every value when seq is 1-D, else one per leading index), left or right of equal elements."""
    _search_checks(seq, values, out_int32, right, side, sorter)
    dtype = _search_dtype(seq, values)
    if dtype is None:
        return NotImplemented
    right = right or side == "right"
    if not isinstance(values, torch.Tensor):
        values = torch.full((), values, dtype=dtype, device=seq.device)
    if sorter is not None:
        seq = seq.gather(-1, sorter)
    m = seq.shape[-1]
    seq, vals = seq.to(dtype), values.to(dtype)
    if seq.dim() == 1:
        rows, flat = seq.reshape(1, m), vals.reshape(1, -1)
    else:
        b = math.prod(seq.shape[:-1])
        rows, flat = seq.reshape(b, m), vals.reshape(b, vals.shape[-1])
    pos = _bisect(rows, flat, right).reshape(values.shape)
    return pos.to(torch.int32) if out_int32 else pos


def _searchsorted_out(seq, values, *, out_int32=False, right=False, side=None, sorter=None, out):
    """searchsorted's out= forms: CPU's dtype check of out, then the functional result written in."""
    want = torch.int32 if out_int32 else torch.int64
    if out.dtype != want:
        name = scalar_name(out.dtype)
        raise RuntimeError(
            "torch.searchsorted(): output tensor's dtype is wrong, it can only be Int(int32) or Long(int64) depending "
            f"on whether out_int32 flag is True, but we got output tensor's dtype {name} and out_int32 flag is "
            f"{'True' if out_int32 else 'False'}"
        )
    result = _searchsorted(seq, values, out_int32=out_int32, right=right, side=side, sorter=sorter)
    return result if result is NotImplemented else write_out(out, result)


def _bucketize_out(values, boundaries, *, out_int32=False, right=False, out):
    """bucketize's out= forms: searchsorted in a 1-D sequence of boundaries."""
    if boundaries.dim() != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.dim()})")
    return _searchsorted_out(boundaries, values, out_int32=out_int32, right=right, out=out)


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


# -------------------------------------------------------------------------------------------- unique
def _runs(keys_differ, n: int, device):
    """From a [n - 1] mask of "row i + 1 differs from row i" over n sorted or consecutive rows: each
    row's run number, the first row of each run, and each run's length (one read-back: the count)."""
    new = torch.cat([torch.ones(1, dtype=torch.bool, device=device), keys_differ])
    group = torch.cumsum(new.to(torch.int64), 0) - 1
    starts = torch.nonzero(new).reshape(-1)
    ends = torch.cat([starts[1:], torch.full((1,), n, dtype=torch.int64, device=device)])
    return group, starts, ends - starts


def _lexsort_rows(rows):
    """The order that sorts the rows of [n, k] lexicographically (equal rows in their order): a stable
    sort by each column from the last to the first."""
    n, k = rows.shape
    order = torch.arange(n, device=rows.device)
    for c in reversed(range(k)):
        _, o = torch.sort(rows[:, c].index_select(0, order), stable=True)
        order = order.index_select(0, o)
    return order


def _empty_long(device, shape=(0,)):
    return torch.empty(shape, dtype=torch.int64, device=device)


def _unique_flat(x, return_inverse: bool, return_counts: bool):
    """The sorted distinct elements of x (NaNs each their own, last, as CPU's), the run of each element
    (shaped like x) and the count of each run; empty tensors for what was not asked."""
    flat = x.reshape(-1)
    n = flat.numel()
    if n == 0:
        inverse = _empty_long(x.device, x.shape if return_inverse else (0,))
        return flat.new_empty(0), inverse, _empty_long(x.device)
    values, order = torch.sort(_sortable(flat), stable=True)
    group, starts, counts = _runs(values[1:] != values[:-1], n, x.device)
    out = values.index_select(0, starts).to(x.dtype)
    inverse = _empty_long(x.device)
    if return_inverse:
        inverse = torch.empty(n, dtype=torch.int64, device=x.device).scatter_(0, order, group).reshape(x.shape)
    return out, inverse, counts if return_counts else _empty_long(x.device)


def _unique2(x, sorted=True, return_inverse=False, return_counts=False):
    """_unique2 (torch.unique without dim): sorted whatever `sorted` says, as CPU's."""
    if x.dtype not in _DEVICE:
        return NotImplemented
    return _unique_flat(x, return_inverse, return_counts)


def _unique(x, sorted=True, return_inverse=False):
    """_unique: _unique2 without the counts."""
    if x.dtype not in _DEVICE:
        return NotImplemented
    out, inverse, _ = _unique_flat(x, return_inverse, False)
    return out, inverse


def _slices(x, dim: int):
    """x's slices along dim as the rows of [n, k], after CPU's check that no other dim is empty."""
    meta(x).size(dim)  # CPU's IndexError for a dim out of range
    dim %= x.dim()
    if any(s == 0 for i, s in enumerate(x.shape) if i != dim) and x.shape[dim] != 0:
        raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")
    return dim, x.movedim(dim, 0).reshape(x.shape[dim], -1) if x.numel() else None


def _unique_slices(x, dim: int, sort: bool):
    """The distinct slices of x along dim (sorted lexicographically, or runs of equal neighbours), the
    run of each slice and each run's count: unique_dim and unique_dim_consecutive."""
    dim, rows = _slices(x, dim)
    if rows is None:
        return x.clone(), _empty_long(x.device), _empty_long(x.device)
    n = rows.shape[0]
    keys = _sortable(rows)
    order = _lexsort_rows(keys) if sort else torch.arange(n, device=x.device)
    ordered = keys.index_select(0, order)
    group, starts, counts = _runs((ordered[1:] != ordered[:-1]).any(dim=1), n, x.device)
    out = rows.index_select(0, order.index_select(0, starts))
    out = out.reshape(-1, *x.movedim(dim, 0).shape[1:]).movedim(0, dim).contiguous()
    inverse = torch.empty(n, dtype=torch.int64, device=x.device).scatter_(0, order, group) if sort else group
    return out, inverse, counts


def _unique_dim(x, dim, sorted=True, return_inverse=False, return_counts=False):
    """unique_dim: CPU gives the inverse and the counts whether asked or not."""
    if x.dtype not in _DEVICE:
        return NotImplemented
    return _unique_slices(x, dim, True)


def _unique_dim_consecutive(x, dim, return_inverse=False, return_counts=False):
    """unique_dim_consecutive: runs of equal neighbouring slices along dim."""
    if x.dtype not in _DEVICE:
        return NotImplemented
    return _unique_slices(x, dim, False)


def _unique_consecutive(x, return_inverse=False, return_counts=False, dim=None):
    """unique_consecutive: runs of equal neighbours (NaN equals nothing), flat or along dim."""
    if x.dtype not in _DEVICE:
        return NotImplemented
    if dim is not None and not (dim == 0 and x.dim() == 1):  # CPU takes dim 0 of a vector as no dim
        return _unique_slices(x, dim, False)
    flat = x.reshape(-1)
    n = flat.numel()
    if n == 0:
        inverse = _empty_long(x.device, x.shape if return_inverse else (0,))
        return flat.new_empty(0), inverse, _empty_long(x.device)
    keys = _sortable(flat)
    group, starts, counts = _runs(keys[1:] != keys[:-1], n, x.device)
    inverse = group.reshape(x.shape) if return_inverse else _empty_long(x.device)
    return flat.index_select(0, starts), inverse, counts if return_counts else _empty_long(x.device)


# ---------------------------------------------------------------------------------------------- mode
def _introsort_arrangement(values):
    """The order libstdc++'s std::sort leaves the rows of `values` [R, n] in before its final insertion
    sort, as (values, original positions), or None where it would switch to heapsort.

    CPU's mode sorts (value, position) pairs by value alone with std::sort, so which position of a
    repeated value comes last (the one mode reports) is decided by the introsort's partitions. Segments
    longer than 16 are split level by level (`_partition_level`), every segment of every row at once;
    the recursion's order does not matter, the segments being disjoint. The final insertion sort is
    stable, so a stable sort of this arrangement is std::sort's result."""
    rows, n = values.shape
    pos = torch.arange(n, device=values.device).expand(rows, n)
    first = torch.zeros(rows, n, dtype=torch.int64, device=values.device)  # each position's segment
    last = torch.full((rows, n), n, dtype=torch.int64, device=values.device)  # is [first, last)
    origin = pos.clone()
    depth = 2 * (n.bit_length() - 1)  # std::sort's limit: 2 floor(log2 n) levels, then heapsort
    while True:
        active = last - first > _INSERTION_LIMIT
        if not bool(active.any()):
            return values, origin
        if depth == 0:
            return None
        depth -= 1
        values, origin, first, last = _partition_level(values, origin, first, last, active, pos)


def _at(table, index, valid, none: int):
    """table [R, n] read at index where valid, else `none`."""
    return torch.where(valid, table.gather(1, index.clamp(0, table.shape[1] - 1)), none)


def _partition_level(values, origin, first, last, active, pos):
    """One level of introsort over the active segments: the median of the second, middle and last
    elements is swapped to the segment's front; then the Hoare partition around it swaps the k-th
    element from the left that is not below the pivot with the k-th from the right that is not above it
    while the first lies left of the second, and the segment is cut where the two scans cross (the left
    scan's next stop, or the last swapped right stop if that comes first)."""
    rows, n = values.shape
    # The median of three to the front (clamped: a finished segment's second element may lie past the row).
    a = (first + 1).clamp(max=n - 1)
    b, c = first + torch.div(last - first, 2, rounding_mode="floor"), last - 1
    va, vb, vc = values.gather(1, a), values.gather(1, b), values.gather(1, c)
    median = torch.where(
        va < vb,
        torch.where(vb < vc, b, torch.where(va < vc, c, a)),
        torch.where(va < vc, a, torch.where(vb < vc, c, b)),
    )
    src = torch.where(active & (pos == first), median, torch.where(active & (pos == median), first, pos))
    values, origin = values.gather(1, src), origin.gather(1, src)
    # Where the two scans stop, numbered within each segment: from the left and from the right.
    pivot = values.gather(1, first)
    inner = active & (pos > first)
    stop_left, stop_right = inner & ~(values < pivot), inner & ~(pivot < values)
    cum_left = torch.cumsum(stop_left.to(torch.int64), 1)
    cum_right = torch.cumsum(stop_right.to(torch.int64), 1)
    left_base, right_end = cum_left.gather(1, first), cum_right.gather(1, last - 1)
    n_left, n_right = cum_left.gather(1, last - 1) - left_base, right_end - cum_right.gather(1, first)
    # Each row's stop positions in ascending order, indexed by their running count (column n: none).
    left_at = torch.full((rows, n + 1), n, dtype=torch.int64, device=values.device)
    left_at = left_at.scatter_(1, torch.where(stop_left, cum_left - 1, n), pos)[:, :n]
    right_at = torch.full((rows, n + 1), n, dtype=torch.int64, device=values.device)
    right_at = right_at.scatter_(1, torch.where(stop_right, cum_right - 1, n), pos)[:, :n]
    # The k-th left stop pairs with the k-th right stop; they swap when the left one lies left of it.
    rank_left, rank_right = cum_left - left_base - 1, right_end - cum_right
    partner_of_left = _at(right_at, right_end - 1 - rank_left, stop_left & (rank_left < n_right), -1)
    partner_of_right = _at(left_at, left_base + rank_right, stop_right & (rank_right < n_left), n)
    swap_left = stop_left & (partner_of_left > pos)
    swap_right = stop_right & (partner_of_right < pos)
    src = torch.where(swap_left, partner_of_left, torch.where(swap_right, partner_of_right, pos))
    values, origin = values.gather(1, src), origin.gather(1, src)
    # The cut after k swaps: min(k-th left stop, (k-1)-th right stop), either missing counting as n.
    swaps = torch.cumsum(swap_left.to(torch.int64), 1)
    k = swaps.gather(1, last - 1) - swaps.gather(1, first)
    next_left = _at(left_at, left_base + k, active & (k < n_left), n)
    last_right = _at(right_at, right_end - k, active & (k > 0), n)
    cut = torch.minimum(next_left, last_right)
    last = torch.where(active & (pos < cut), cut, last)
    first = torch.where(active & (pos >= cut), cut, first)
    return values, origin, first, last


def _mode(x, dim=-1, keepdim=False):
    """mode: the most frequent value along dim (the smallest of equally frequent ones) and the index
    CPU reports for it: the last of its occurrences in CPU's std::sort order (see
    _introsort_arrangement; the plain order of occurrence for rows of up to 16)."""
    if x.dtype not in _DEVICE:
        return NotImplemented
    if x.dim() == 0:
        meta(x.reshape(1)).size(dim)  # CPU's range check of dim (a 0-dim tensor counts as 1-D)
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    meta(x).size(dim)  # CPU's IndexError for a dim out of range
    dim %= x.dim()
    n = x.shape[dim]
    if n == 0:
        raise IndexError(f"mode(): Expected reduction dim {dim} to have non-zero size.")
    shape = list(x.shape)
    shape[dim] = 1
    if not keepdim:
        shape.pop(dim)
    if x.numel() == 0:
        return x.new_empty(shape), _empty_long(x.device, shape)
    source = x.movedim(dim, -1).reshape(-1, n)
    keys = _sortable(source)
    positions = torch.arange(n, device=x.device).expand(keys.shape)
    if x.is_floating_point() and bool(torch.isnan(keys).any()):
        return NotImplemented  # NaN breaks the order std::sort relies on: where it leaves NaNs is CPU's alone
    if n > _INSERTION_LIMIT:
        arranged = _introsort_arrangement(keys)
        if arranged is None:
            return NotImplemented
        keys, positions = arranged
    keys, order = torch.sort(keys, dim=1, stable=True)
    positions = positions.gather(1, order)
    # Run lengths, read at each run's last element; the first run of the greatest length wins.
    ends = torch.cat([keys[:, 1:] != keys[:, :-1], torch.ones_like(keys[:, :1], dtype=torch.bool)], 1)
    run = torch.cumsum(torch.cat([torch.zeros_like(ends[:, :1]), ends[:, :-1]], 1).to(torch.int64), 1)
    length = torch.zeros_like(run).scatter_add_(1, run, torch.ones_like(run)).gather(1, run)
    best = torch.where(ends, length, 0).amax(1, keepdim=True)
    column = torch.arange(n, device=x.device).expand(keys.shape)
    at = torch.where(ends & (length == best), column, n).amin(1, keepdim=True)
    index = positions.gather(1, at)
    return source.gather(1, index).reshape(shape), index.reshape(shape)


def _mode_out(x, dim=-1, keepdim=False, *, values, indices):
    """mode.values: the functional result written into the out tensors after CPU's dtype checks."""
    if values.dtype != x.dtype or indices.dtype != torch.int64:
        raise RuntimeError("mode(): the out tensors must have the input's dtype and int64 indices")
    result = _mode(x, dim, keepdim)
    if result is NotImplemented:
        return result
    return write_out(values, result[0]), write_out(indices, result[1])


# ------------------------------------------------------------------------------------ index helpers
def _nonzero_static(x, *, size, fill_value=-1):
    """nonzero_static: the first `size` coordinates of nonzero elements, padded with fill_value."""
    if size < 0:
        raise RuntimeError("nonzero_static: 'size' must be an non-negative integer")
    found = torch.nonzero(x)
    if found.shape[0] >= size:
        return found[:size].clone()
    pad = torch.full((size - found.shape[0], found.shape[1]), fill_value, dtype=torch.int64, device=x.device)
    return torch.cat([found, pad])


def _nonzero_static_out(x, *, size, fill_value=-1, out):
    if out.dtype != torch.int64:
        raise RuntimeError(f"nonzero_static: Expected out tensor to have scalar type Long but got scalar type "
                           f"{scalar_name(out.dtype)}")  # fmt: skip
    return write_out(out, _nonzero_static(x, size=size, fill_value=fill_value))


def _nonzero_out(x, *, out):
    """nonzero.out: CPU's dtype check (its message, without its space), then the native nonzero."""
    if out.dtype != torch.int64:
        name = scalar_name(out.dtype)
        raise RuntimeError(f"nonzero: Expected out tensor to have scalar type Long but got scalar type{name}")
    return write_out(out, torch.nonzero(x))


def _masked_select_out(x, mask, *, out):
    """masked_select.out: CPU's dtype check, then the native masked_select."""
    if out.dtype != x.dtype:
        raise RuntimeError("masked_select(): self and result must have the same scalar type")
    return write_out(out, torch.masked_select(x, mask))


def _repeat_interleave(repeats, *, output_size=None):
    """repeat_interleave.Tensor: i repeated repeats[i] times. A 1 is added where each index's run
    starts (a run of no length adds onto the next) and the marks are summed up."""
    if repeats.dim() != 1:
        raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
    if repeats.dtype not in (torch.int64, torch.int32):
        raise RuntimeError("repeats has to be Long or Int tensor")
    ends = torch.cumsum(repeats.to(torch.int64), 0)
    if repeats.numel():
        low, total = (int(v) for v in torch.stack([repeats.to(torch.int64).amin(), ends[-1]]).tolist())
    else:
        low, total = 0, 0
    if low < 0:
        raise RuntimeError("repeats can not be negative")
    if output_size is not None and output_size != total:
        raise RuntimeError("allocated size does not match required size")
    marks = torch.zeros(total + 1, dtype=torch.int64, device=repeats.device)
    if repeats.numel() > 1:
        marks.index_add_(0, ends[:-1], torch.ones_like(ends[:-1]))
    return torch.cumsum(marks[:total], 0).to(repeats.dtype)


def _triangle_indices(lower: bool):
    """tril_indices / triu_indices: the coordinates (row-major) of the triangle of a row x col matrix,
    the nonzero of its mask. (torch's decomposition computes them in float64, which the card lacks.)"""
    name = "tril_indices" if lower else "triu_indices"

    def indices(row, col, offset=0, *, dtype=torch.int64, layout=None, device=None, pin_memory=None):
        dtype = torch.int64 if dtype is None else dtype
        if row < 0:
            raise RuntimeError(f"row must be non-negative, got{row}")
        if col < 0:
            raise RuntimeError(f"col must be non-negative, got{col}")
        if dtype not in (torch.int64, torch.int32):
            raise NotImplementedError(f"\"{name}\" not implemented for '{scalar_name(dtype)}'")
        device = device if device is not None else torch.device("spyre")
        r = torch.arange(row, device=device).reshape(-1, 1)
        c = torch.arange(col, device=device).reshape(1, -1)
        mask = (c - r <= offset) if lower else (c - r >= offset)
        return torch.nonzero(mask).t().contiguous().to(dtype)

    return indices


KERNELS: dict = {
    "searchsorted.Tensor": _searchsorted,
    "searchsorted.Scalar": _searchsorted,
    "searchsorted.Tensor_out": _searchsorted_out,
    "searchsorted.Scalar_out": _searchsorted_out,
    "bucketize.Tensor_out": _bucketize_out,
    "bucketize.Scalar_out": _bucketize_out,
    "histogram.bin_ct": _histogram_bin_ct,
    "histogram.bins_tensor": _histogram_bins,
    "histogram.bin_ct_out": with_out(_histogram_bin_ct, ("hist", "bin_edges"), _histogram_rule),
    "histogram.bins_tensor_out": with_out(_histogram_bins, ("hist", "bin_edges"), _histogram_rule),
    "_histogramdd_bin_edges": _histogramdd_bin_edges,
    "_histogramdd_from_bin_cts": _histogramdd_from_bin_cts,
    "_histogramdd_from_bin_tensors": _histogramdd_from_bin_tensors,
    "bincount": _bincount,
    "_unique2": _unique2,
    "_unique": _unique,
    "unique_dim": _unique_dim,
    "unique_consecutive": _unique_consecutive,
    "unique_dim_consecutive": _unique_dim_consecutive,
    "mode": _mode,
    "mode.values": _mode_out,
    "nonzero_static": _nonzero_static,
    "nonzero_static.out": _nonzero_static_out,
    "nonzero.out": _nonzero_out,
    "masked_select.out": _masked_select_out,
    "repeat_interleave.Tensor": _repeat_interleave,
    "tril_indices": _triangle_indices(True),
    "triu_indices": _triangle_indices(False),
}
