"""Uniqueness and the mode on the device (unique, unique_consecutive, mode), from stable sorts and
masks of run starts. ``mode`` returns, among equal values, the index that CPU's std::sort leaves
last: the introsort's partitions are replayed level by level (``_introsort_arrangement``). Listed
in _counting.KERNELS.
"""

from __future__ import annotations

import torch

from ._composite import meta, write_out
from ._counting_search import _DEVICE

_INSERTION_LIMIT = 16  # libstdc++'s std::sort leaves segments this short to its final insertion sort


def _sortable(x):
    """x as a dtype the device sorts and compares: bools as int8."""
    return x.to(torch.int8) if x.dtype == torch.bool else x


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
