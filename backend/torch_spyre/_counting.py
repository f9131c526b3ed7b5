"""Searching, counting and uniqueness on the device (searchsorted, histograms, unique, mode), composed of native ops.

Every kernel here is a composition of ops the card runs natively (sort, gather, scatter, cumsum,
comparisons, nonzero); the input's data never goes to the host. A few small control values are read
back where the result's size depends on them (how many unique values, the largest bin of bincount)
or where CPU reads them too (a histogram's range). KERNELS maps ATen overload names to kernels; it is
merged into _decomposed.OWN, which registers them for the PrivateUse1 key. The kernels live in
_counting_search.py, _counting_histograms.py and _counting_unique.py; the index helpers are here.

The answers must be CPU's bit for bit, including where CPU's choice is arbitrary:
- searching is a binary search that probes the same positions as CPU's (so a NaN, in the values or
  in the sequence, lands where CPU puts it; counting comparisons would not);
- a histogram's bin of a value on an edge is the upper bound of the edges (the rightmost bin closed);
- mode returns, among equal values, the index that CPU's std::sort leaves last: the introsort's
  partitions are replayed level by level (`_introsort_arrangement`).
"""

from __future__ import annotations

import torch

from ._composite import scalar_name, with_out, write_out
from ._counting_histograms import (
    _bincount,
    _histogram_bin_ct,
    _histogram_bins,
    _histogram_rule,
    _histogramdd_bin_edges,
    _histogramdd_from_bin_cts,
    _histogramdd_from_bin_tensors,
)
from ._counting_search import _bucketize_out, _searchsorted, _searchsorted_out
from ._counting_unique import (
    _mode,
    _mode_out,
    _unique,
    _unique2,
    _unique_consecutive,
    _unique_dim,
    _unique_dim_consecutive,
)


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
