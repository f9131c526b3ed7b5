"""Searching on the device (searchsorted, bucketize): a vectorised binary search that probes the
positions CPU's search probes, so a NaN, in the values or in the sequence, lands where CPU puts it;
and the dtypes the counting family computes in. Listed in _counting.KERNELS.
"""

from __future__ import annotations

import math

import torch

from ._composite import meta, scalar_name, write_out

# Dtypes the card computes in; anything else (float64, uint8, int16, complex) declines to the CPU.
_NUMERIC = (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int8)
_DEVICE = (*_NUMERIC, torch.bool)


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
