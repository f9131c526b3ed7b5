"""The package reaches into torch only through public points (registrations, torch.library, the
device module), except where torch 2.13 offers none; each of those is listed here with the torch
limitation, and a canary fails the day torch gains the point, so the wrapper can go.
"""

from __future__ import annotations

import inspect
import pathlib
import re

import torch
import torch._tensor
import torch._tensor_str

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "torch_spyre"

# file -> the one torch attribute it replaces, because torch has no public point for it (below).
NO_PUBLIC_POINT = {
    "_printing.py": "torch._tensor_str._tensor_str",
    "_save.py": "torch.Tensor._reduce_ex_internal",
}

ASSIGNMENT = re.compile(r"^\s*(torch(?:\.\w+)+)\s*=[^=]", re.MULTILINE)


def test_no_torch_attribute_is_assigned_outside_the_listed_files():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for target in ASSIGNMENT.findall(path.read_text()):
            found.setdefault(path.name, []).append(target)
        if "setattr(torch" in path.read_text():
            found.setdefault(path.name, []).append("setattr(torch...)")
    assert found == {name: [target] for name, target in NO_PUBLIC_POINT.items()}


def test_torch_still_picks_the_print_dtype_by_hard_coded_device_types():
    """torch formats a tensor's values in float64 unless the device is MPS, an XPU without fp64 or
    MAIA, and copies only XLA, lazy, IPU and MTIA tensors to the host first: a PrivateUse1 device
    that has no float64 cannot say so. _printing.py formats a host copy instead. When torch asks the
    device (torch.accelerator, the PrivateUse1 backend's name, a capability), this fails."""
    source = inspect.getsource(torch._tensor_str)  # the module's text: _tensor_str itself is wrapped
    assert "privateuse1" not in source.lower() and "accelerator" not in source
    assert "has_fp64" in inspect.getsource(torch._tensor_str.tensor_totype)  # the XPU-only question


def test_torch_still_saves_a_host_copy_only_for_storage_less_privateuse1_tensors():
    """torch.save pickles a device tensor as a host copy (converted at the copy boundary) only for
    XLA, MAIA, MTIA and PrivateUse1 tensors without storage; others write their storage bytes as
    they are, which on a DLFloat16 card are not IEEE half. _save.py takes the host-copy path for
    fp16 on such a card. When torch lets a backend choose it, this fails."""
    source = inspect.getsource(torch._tensor)  # the module's text: the method itself is wrapped
    assert re.search(
        r"not torch\._C\._has_storage\(self\)\s*and self\.device\.type == torch\._C\._get_privateuse1", source
    )
