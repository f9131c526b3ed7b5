"""Entry points for kernel and driver developers; not needed to run models."""

from __future__ import annotations

import torch

from . import _C
from .device_module import _index


def submit_raw_descriptor(raw: bytes, device: torch.device | str | int | None = None) -> dict:
    """Submits 64 descriptor bytes, exactly as given, on a fresh hardware queue and waits for them.

    The layout is ``Descriptor`` in hw/include/spyre/hw/commands.h (docs/hardware-interface.md).
    Returns the completion: ``ok``, ``error`` (the device's error name), ``field`` (the descriptor
    field it blames), ``message`` (the driver's message) and ``cycles``. A malformed descriptor
    fails only its own queue; the device stays usable.
    """
    return _C._submit_raw_descriptor(_index(device), bytes(raw))
