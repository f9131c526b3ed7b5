"""Compiled programs on disk, keyed by what they depend on: the graph's IR (ops, shapes, strides,
dtypes), the target the device compiles for (cores, scratchpad, rates) and the build of the
compiler itself. A second process, or a second run, finds them instead of compiling again.

The cache lives in ``$TORCH_SPYRE_CACHE_DIR`` (default ``$XDG_CACHE_HOME/torch_spyre/programs``,
i.e. ``~/.cache/torch_spyre/programs``); ``TORCH_SPYRE_CACHE_DIR=off`` disables it. Files are written
to a temporary name and renamed, so processes sharing the directory never read half a file.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

import torch

from .. import _C

_MAGIC = b"SPYREPRG2\n"
# The programs this process used last, by key: a graph planned again (another compiled function
# with the same segment) takes its program from here. Bounded; a compiled graph holds its own.
_recent: OrderedDict[str, object] = OrderedDict()
RECENT_PROGRAMS = 256
_stats = {"hits": 0, "misses": 0, "in_memory": 0, "compile_seconds": 0.0}
_build_id: str | None = None
_targets: dict[int, str] = {}


def stats() -> dict:
    return dict(_stats)


def reset_stats() -> None:
    _stats.update(hits=0, misses=0, in_memory=0, compile_seconds=0.0)


def directory() -> Path | None:
    d = os.environ.get("TORCH_SPYRE_CACHE_DIR")
    if d == "off":
        return None
    if d:
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torch_spyre" / "programs"


def _build() -> str:
    """The compiler's build: a hash of the extension holding it, so that a rebuilt compiler never
    reads programs an older one wrote."""
    global _build_id
    if _build_id is None:
        h = hashlib.sha256()
        with open(_C.__file__, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _build_id = h.hexdigest()[:16]
    return _build_id


def _target(device: int) -> str:
    if device not in _targets:
        _targets[device] = json.dumps(_C._compile_target(device), sort_keys=True)
    return _targets[device]


def program_key(spec: str, device: int | None = None) -> str:
    device = torch.spyre.current_device() if device is None else device
    h = hashlib.sha256()
    for part in (_build(), _target(device), spec):
        h.update(part.encode())
        h.update(b"\0")
    return "graph:" + h.hexdigest()


def _path(key: str) -> Path | None:
    d = directory()
    if d is None:
        return None
    digest = key.split(":", 1)[1]
    return d / digest[:2] / f"{digest}.prg"


_HEADER = struct.Struct("<QII32s")  # core mask, arguments, name bytes, SHA-256 of name and image


def _read(path: Path):
    """The program in a cache file, or None when it is missing, foreign or damaged (a damaged file
    is a miss: the program is compiled again and the file rewritten)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    at = len(_MAGIC) + _HEADER.size
    if not data.startswith(_MAGIC) or len(data) < at:
        return None
    core_mask, num_args, name_len, digest = _HEADER.unpack_from(data, len(_MAGIC))
    payload = data[at:]
    if hashlib.sha256(payload).digest() != digest or name_len > len(payload):
        return None
    try:
        name = payload[:name_len].decode()
    except UnicodeDecodeError:
        return None
    return name, payload[name_len:], core_mask, num_args


def _write(path: Path, program) -> None:
    name, image, core_mask, num_args = program
    payload = name.encode() + image
    header = _HEADER.pack(core_mask, num_args, len(name.encode()), hashlib.sha256(payload).digest())
    blob = _MAGIC + header + payload
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only or full cache only costs compile time


def compile_program(spec: str, key: str, device: int | None = None):
    """The program of `spec`: from disk when it is there, else compiled (and written)."""
    device = torch.spyre.current_device() if device is None else device
    path = _path(key)
    program = _read(path) if path is not None else None
    if program is not None:
        _stats["hits"] += 1
        return program
    _stats["misses"] += 1
    t0 = time.perf_counter()
    program = _C._compile_graph(device, spec)
    _stats["compile_seconds"] += time.perf_counter() - t0
    if path is not None:
        _write(path, program)
    return program


def program(segment):
    """The launchable program of segment (a ``_C._Program``): from the programs this process used
    last, from disk, or compiled. The caller keeps it for as long as it launches it."""
    handle = _recent.get(segment.key)
    if handle is not None:
        _recent.move_to_end(segment.key)
        _stats["in_memory"] += 1
        return handle
    handle = _C._program(segment.key, *compile_program(segment.spec, segment.key))
    _recent[segment.key] = handle
    while len(_recent) > RECENT_PROGRAMS:
        _recent.popitem(last=False)
    return handle


def pretty(spec: str) -> str:
    return json.dumps(json.loads(spec), indent=1) + "\n"


def listing(segment) -> str:
    path = _path(segment.key)
    program = _read(path) if path is not None else None
    if program is None:
        program = _C._compile_graph(torch.spyre.current_device(), segment.spec)
    return f"; {segment.label}\n" + _C._program_listing(program[1])
