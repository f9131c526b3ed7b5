"""Printing a spyre tensor formats a host copy of it.

Torch's formatter measures the values in float64 (``torch._tensor_str``), a type the card does
not compute in, so printing on the device would run its max, min, div and comparisons on the CPU
fallback, with a warning per operator (and fail under ``TORCH_SPYRE_CPU_FALLBACK=error``). One
copy to the host first gives the same text, device suffix included (torch takes it from the
tensor printed, not from the copy).

This replaces a torch attribute because torch 2.13 has no public point for it: it picks the
dtype it formats in by hard-coded device types (MPS, XPU without fp64, MAIA) and copies only
XLA, lazy, IPU and MTIA tensors to the host. backend/tests/test_public_points.py fails the day
torch asks the device instead, and this file goes then.
"""

from __future__ import annotations

import torch
import torch._tensor_str


def install() -> None:
    """Wraps the formatter of tensor contents once (idempotent)."""
    original = torch._tensor_str._tensor_str
    if getattr(original, "_spyre_host_copy", False):
        return

    def _tensor_str(self, indent):
        if self.device.type == "spyre":
            self = self.cpu()
        return original(self, indent)

    _tensor_str._spyre_host_copy = True
    torch._tensor_str._tensor_str = _tensor_str
