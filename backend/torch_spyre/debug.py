"""Entry points for kernel and driver developers; not needed to run models."""

from __future__ import annotations

import contextlib
import dataclasses
import os

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


def listing(op: str | None = None, device: torch.device | str | int | None = None) -> str:
    """The program a kernel ran, one decoded instruction per line, numbered as a device error's
    instruction index counts (``core 0 at instruction 17``).

    ``op`` names the ATen operator whose last launch to list (``"aten::index_select"``, as a
    trace's ``args.op`` and a device error name it); without it, the device's last launch. The
    program is read back from device memory, so it is exactly what ran. Raises ``ValueError``,
    naming the ops launched so far, when there is no such launch (or its program has left the
    program cache).
    """
    return _C._listing(_index(device), op or "")


@contextlib.contextmanager
def capture_launch(path: str | os.PathLike, op: str | None = None, device: torch.device | str | int | None = None):
    """Captures one launch to ``path``: the first launch of ``op`` (``"aten::index_select"``, as
    ``listing`` names it; any op when ``None``) inside the ``with`` block.

    That launch runs alone (the card is synchronized first) and the file holds its program, its
    arguments and every driver allocation its arguments point into, as they were before and after
    it. ``spyre-sim launch FILE`` replays it alone, on any config, and checks that it leaves the
    captured outputs bit for bit (docs/debugging-guide.md, "One launch, captured and replayed").
    Raises ``ValueError`` on leaving the block if no such launch ran.
    """
    index = _index(device)
    _C._capture_next_launch(index, os.fspath(path), op or "")
    captured = False
    try:
        yield
    finally:
        captured = _C._end_launch_capture(index)
    if not captured:
        raise ValueError(f"capture_launch: no launch of {op or 'any op'} ran on spyre:{index} inside the block")


@contextlib.contextmanager
def sanitize(checks: str, device: torch.device | str | int | None = None):
    """Runs the ``with`` block with the device sanitizer's checks narrowed to ``checks`` (a
    comma-separated list of those ``SPYRE_SANITIZE`` named; ``""`` for none), then switches back to
    ``SPYRE_SANITIZE``'s: a suppression, for code whose findings are known and accepted. The card
    is synchronized at both ends. ``ValueError`` for a check ``SPYRE_SANITIZE`` did not name (the
    device tracks allocations only when it starts with the sanitizer on).
    """
    index = _index(device)
    _C._sanitize_checks(index, checks)
    try:
        yield
    finally:
        _C._sanitize_checks(index, _C._sanitize_env())


@contextlib.contextmanager
def watch(tensor: torch.Tensor):
    """A watchpoint on a spyre tensor's bytes (from its first element to its last) for the ``with``
    block: the first kernel that stores into them stops, and its device error (at the next
    synchronization, or at the launching call under ``TORCH_SPYRE_LAUNCH_BLOCKING=1``) names the
    writer: op, kernel, core, instruction and the byte it reached. Set and removed in the current
    stream's order, so it sees exactly the kernels queued inside the block. Copies (``copy_`` from
    the host, DMA) are not kernels and pass. Needs no ``SPYRE_SANITIZE``.
    """
    if tensor.device.type != "spyre":
        raise ValueError(f"watch: the tensor is on {tensor.device}, not on a spyre device")
    span = 1 + sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride(), strict=True)) if tensor.numel() else 0
    index = tensor.device.index or 0
    wid = _C._watch(
        index, torch.spyre.current_stream(index).stream_id, device_address(tensor), span * tensor.element_size()
    )
    try:
        yield
    finally:
        _C._unwatch(index, torch.spyre.current_stream(index).stream_id, wid)


@dataclasses.dataclass
class Snapshot:
    """A core stopped at a breakpoint (``break_at``): its 16 scalar registers and its scratchpad."""

    instruction: int
    rank: int
    registers: list[int]
    scratchpad: torch.Tensor  # uint8, on the CPU: the core's whole scratchpad
    error: str  # the device error that reported the stop

    def view(self, dtype: torch.dtype, offset: int, shape: tuple[int, ...]) -> torch.Tensor:
        """``shape`` elements of ``dtype`` at byte ``offset`` of the scratchpad, packed row after row
        (how the SFP and the PT arrays lay out their tiles)."""
        n = int(torch.Size(shape).numel()) * torch.empty(0, dtype=dtype).element_size()
        return self.scratchpad[offset : offset + n].view(dtype).reshape(shape)


def break_at(fn, instruction: int, rank: int = 0, device: torch.device | str | int | None = None) -> Snapshot:
    """Runs ``fn()`` with a breakpoint: the first launch it queues on the current stream stops when
    the core of rank ``rank`` is about to execute ``instruction`` (a line of ``listing``), and the
    core's scalar registers and scratchpad are returned as a ``Snapshot``. The launch does not go
    on: what it would have written is undefined, and the device error that reported the stop is
    in ``Snapshot.error``. ``ValueError`` when that core never reached the instruction.
    """
    index = _index(device)
    lx = int(_C._compile_target(index)["lx_bytes"])
    buffer = torch.zeros(128 + lx, dtype=torch.uint8, device=f"spyre:{index}")
    stream = torch.spyre.current_stream(index).stream_id
    _C._break_at(index, stream, device_address(buffer), buffer.numel(), instruction, rank)
    error = ""
    try:
        fn()
        torch.spyre.synchronize(index)
    except RuntimeError as e:
        if "breakpoint" not in str(e):
            raise
        error = str(e)
    finally:
        _C._break_at(index, stream, 0, 0, -1, 0)
    if not error:
        raise ValueError(f"break_at: the core of rank {rank} never reached instruction {instruction}")
    dump = buffer.cpu()
    registers = dump[:128].view(torch.int64).tolist()
    return Snapshot(instruction, rank, [r % 2**64 for r in registers], dump[128:].clone(), error)


def device_address(tensor: torch.Tensor) -> int:
    """The device address of a spyre tensor's first element: what a raw descriptor (or a program's
    argument) names to reach the tensor's bytes in device memory."""
    return _C._device_address(tensor)


def empty_command_round_trips(count: int = 1000, device: torch.device | str | int | None = None) -> list[float]:
    """Wall seconds of ``count`` empty commands (NOP descriptors), each submitted on a queue of
    its own and waited for: the command path's own round trip, driver to card and back, with no
    work on the card (benchmarks/command_path.py)."""
    return _C._empty_command_round_trips(_index(device), count)


def program_cache_info(device: torch.device | str | int | None = None) -> dict:
    """The device's cache of compiled programs: ``entries``, ``bytes`` (device memory they hold),
    ``hits``, ``misses`` and ``evictions``.

    An eager op compiles once per signature (op, shapes, strides, dtypes) and is then launched from
    the cache. The cache keeps the ``$TORCH_SPYRE_PROGRAM_CACHE`` most recently used programs
    (default 4096, and at most 512 MiB); an evicted program's device memory is freed.
    """
    return _C._program_cache_stats(_index(device))


def driver_memory_info(device: torch.device | str | int | None = None) -> dict:
    """The driver's view of the device's memory: ``total``, ``allocated`` (everything handed out:
    the caching allocator's segments, compiled programs, launch arguments), ``peak``,
    ``largest_free`` and ``blocks`` (live allocations).

    ``torch.spyre.memory_stats`` gives the caching allocator's figures for tensors instead.
    """
    return _C._driver_memory_stats(_index(device))
