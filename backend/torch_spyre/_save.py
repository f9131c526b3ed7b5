"""torch.save of an fp16 tensor on a DLFloat16 card stores IEEE half.

torch.save writes a device tensor's storage bytes as they are. On a card that keeps fp16 as
DLFloat16 (the default, docs/user-guide.md "Numerics") those bytes are not IEEE half, and a load
on the CPU would read other numbers. Such tensors are pickled the way torch pickles tensors of
backends without host-readable storage (XLA, MTIA): as a host copy, converted at the copy
boundary, that a load puts back on the card, or leaves on the CPU under ``map_location="cpu"``.
Views of one such storage are saved apart (torch does the same for those backends).

This replaces a torch attribute because torch 2.13 has no public point for it: the host-copy
path is taken by hard-coded device types, and for PrivateUse1 only for tensors without storage.
backend/tests/test_public_points.py fails the day torch lets a backend choose, and this file goes.
"""

from __future__ import annotations

import torch


def _dlfloat16(t: torch.Tensor) -> bool:
    from .sim import device_info

    return t.device.type == "spyre" and t.dtype == torch.float16 and device_info(t.device)["fp16_format"] == "dlfloat16"


def install() -> None:
    """Wraps Tensor._reduce_ex_internal once (idempotent)."""
    original = torch.Tensor._reduce_ex_internal
    if getattr(original, "_spyre_ieee_half", False):
        return

    def _reduce_ex_internal(self, proto):
        if _dlfloat16(self) and not torch.serialization._serialization_tls.skip_data:
            host = self.detach().cpu()  # requires_grad travels apart (a leaf is rebuilt on load)
            return (
                torch._utils._rebuild_device_tensor_from_cpu_tensor,
                (host, self.dtype, str(self.device), self.requires_grad),
            )
        return original(self, proto)

    _reduce_ex_internal._spyre_ieee_half = True
    torch.Tensor._reduce_ex_internal = _reduce_ex_internal
