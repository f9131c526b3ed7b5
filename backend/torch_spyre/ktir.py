"""KTIR kernels on the card: ``torch_spyre.ktir.load(path)(*tensors)``.

KTIR is IBM's kernel tile IR for Spyre (MLIR text: the ``ktdp`` dialect with ``arith``, ``math``,
``linalg``, ``tensor`` and ``scf``). A kernel's function takes one ``index`` argument per tensor
(the tensor's base address, KTIR's base-pointer convention); calling the loaded kernel with spyre
tensors compiles it for the tensors' card (once per card) and launches it on the current stream,
like any other kernel: it is traced, profiled, sanitized and captured as the rest are. The subset
taken and how each construct lowers: docs/ktir.md.
"""

from __future__ import annotations

import os
import re

import torch

from . import _C

_DTYPES = {
    "f32": torch.float32,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "i64": torch.int64,
    "i32": torch.int32,
    "i8": torch.int8,
    "bool": torch.bool,
}


class Kernel:
    """A KTIR function, compiled per card on first use.

    Calling it launches the kernel with ``tensors`` as its arguments, in order. Each must be a
    contiguous spyre tensor on one card, of the element type the kernel's views give it and at
    least as many bytes as they reach; otherwise ``TypeError`` or ``ValueError`` names the
    argument, before anything runs. A kernel the lowering does not take raises
    ``NotImplementedError`` naming the construct (``torch_spyre._C.Unsupported``), and one that is
    wrong in itself ``ValueError`` naming its line (``torch_spyre._C.Malformed``).
    """

    def __init__(self, text: str, function: str | None = None, source: str = "<string>"):
        self.text = text
        self.function = function or ""
        self.source = source
        self._compiled: dict[int, tuple[dict, object]] = {}

    def compiled(self, device: torch.device | str | int | None = None) -> dict:
        """The kernel compiled for a card: its ``name``, ``grid``, ``arguments`` (name, element
        type, bytes), ``workspace_bytes``, ``work`` (bytes moved, multiply-adds, SFP elements),
        ``roofline_cycles`` and ``listing`` (each core's instructions under their KTIR line)."""
        index = torch.device(device if device is not None else "spyre").index
        index = torch.spyre.current_device() if index is None else index
        if index not in self._compiled:
            info = _C._compile_ktir(index, self.text, self.function)
            key = f"ktir:{self.source}:{info['function']}"
            program = _C._program(key, info["name"], info["image"], info["core_mask"], info["num_args"])
            self._compiled[index] = (info, program)
        return self._compiled[index][0]

    @property
    def listing(self) -> str:
        return self.compiled()["listing"]

    @property
    def roofline_cycles(self) -> float:
        return self.compiled()["roofline_cycles"]

    def __call__(self, *tensors: torch.Tensor) -> None:
        if not tensors or not all(isinstance(t, torch.Tensor) for t in tensors):
            raise TypeError("ktir: a kernel takes its arguments as spyre tensors")
        device = tensors[0].device
        info = self.compiled(device)
        args = info["arguments"]
        if len(tensors) != len(args):
            names = ", ".join(a[0] for a in args)
            raise TypeError(f"ktir: {info['function']} takes {len(args)} tensors ({names}), got {len(tensors)}")
        for t, (name, dtype, nbytes) in zip(tensors, args, strict=True):
            if t.device != device or t.device.type != "spyre":
                raise ValueError(f"ktir: argument {name} is on {t.device}; every argument must be on {device}")
            if nbytes and t.dtype != _DTYPES[dtype]:
                raise TypeError(f"ktir: argument {name} is {t.dtype}; the kernel's views read it as {dtype}")
            if not t.is_contiguous():
                raise ValueError(f"ktir: argument {name} is not contiguous; the kernel's views give its layout")
            if t.numel() * t.element_size() < nbytes:
                raise ValueError(
                    f"ktir: argument {name} holds {t.numel() * t.element_size()} bytes; the kernel reaches {nbytes}"
                )
        launch = list(tensors)
        if info["workspace_bytes"]:
            launch.append(torch.empty(info["workspace_bytes"], dtype=torch.uint8, device=device))
        try:
            _C._launch_graphs([(self._compiled[device.index][1], launch, f"ktir::{info['function']}")])
        except RuntimeError as e:  # a fault raised here (launch blocking): name the KTIR line too
            line = self.source_line(str(e), device)
            if line is None:
                raise
            raise RuntimeError(f"{e}; {line}") from None

    def source_line(self, error: str, device: torch.device | str | int | None = None) -> str | None:
        """The KTIR line of the instruction a device error names (``core 9 at instruction 105``),
        as ``"KTIR line 37: %x = ktdp.load %rows ..."``, or None when it names none of this
        kernel's instructions."""
        found = re.search(r"core (\d+) at instruction (\d+)", error)
        info = self.compiled(device)
        if not found or f"'{info['name']}'" not in error:
            return None
        core, instruction = int(found.group(1)), int(found.group(2))
        if core >= len(info["entries"]):
            return None
        at = instruction - info["entries"][core]
        lines = info["source_lines"][core]
        if not 0 <= at < len(lines):
            return None
        text = self.text.splitlines()
        n = lines[at]
        return f"KTIR line {n}: {text[n - 1].strip() if 0 < n <= len(text) else ''}"


def loads(text: str, function: str | None = None) -> Kernel:
    """A kernel from KTIR text; ``function`` picks one of several (default: the one with a grid)."""
    return Kernel(text, function)


def load(path: str | os.PathLike, function: str | None = None) -> Kernel:
    """A kernel from a KTIR file (``.mlir``); see ``loads``."""
    with open(path, encoding="utf-8") as f:
        return Kernel(f.read(), function, os.fspath(path))
