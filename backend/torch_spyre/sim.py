"""What only a simulated card can tell: its cycle counter, its identity, and its report files."""

from __future__ import annotations

import torch

from . import _C
from .device_module import _index


def device_cycles(device: torch.device | str | int | None = None) -> int:
    """The card's cycle counter (device clock cycles since the simulation started).

    Simulated time advances only while the card has work, so the difference between two readings
    around a synchronized region is the device time that region took.
    """
    return _C._device_cycles(_index(device))


def device_info(device: torch.device | str | int | None = None) -> dict:
    """Identity and limits of the card: cores, clock, memory, queues, transport."""
    return _C._device_info(_index(device))


def write_reports() -> tuple[str, str]:
    """Writes the simulator's trace (Chrome/Perfetto JSON) and stats (JSON) files now.

    Their paths come from ``$SPYRE_TRACE`` / ``$SPYRE_STATS`` or the ``output`` section of the
    ``$SPYRE_CONFIG`` file; an empty path means that report is off. Returns ``(trace, stats)``.
    The same files are written again when the process exits.
    """
    trace, stats = _C._write_reports()
    return trace, stats
