"""Device memory for ``torch.spyre``: the caching allocator's figures and controls, and memory pools,
in the shape of ``torch.cuda``'s (docs/user-guide.md, "Device memory").

Every figure here is the one ``torch.accelerator.memory_*`` reads: both come from the same
allocator (``getDeviceStats`` of the PrivateUse1 allocator).
"""

from __future__ import annotations

import collections as _collections
import contextlib as _contextlib
from collections.abc import Callable as _Callable
from collections.abc import Iterator as _Iterator
from typing import Any as _Any

import torch as _torch

from . import _C

_Device = _torch.device | str | int


def _index(device: _Device | None) -> int:
    from .device_module import _index as index  # device_module imports this module

    return index(device)


def _flatten(prefix: str, value: _Any, out: list[tuple[str, int]]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}" if prefix else key, inner, out)
    else:
        out.append((prefix, value))


def memory_stats(device: _Device | None = None) -> _collections.OrderedDict[str, int]:
    """The caching allocator's figures for ``device``, under ``torch.cuda.memory_stats``'s keys.

    ``"<figure>.<pool>.<metric>"`` with figure one of allocation, segment, active, inactive_split,
    allocated_bytes, reserved_bytes, active_bytes, inactive_split_bytes, requested_bytes; pool one of
    all, small_pool (requests up to 1 MiB), large_pool; metric one of current, peak, allocated (total
    added) and freed (total removed). Plus the counters num_alloc_retries, num_ooms,
    num_device_alloc, num_device_free, and CUDA's num_sync_all_streams, max_split_size and
    oversize_* (always 0 here). Sorted by key, as CUDA's. All zero before the device's first
    allocation.
    """
    flat: list[tuple[str, int]] = []
    _flatten("", _C._allocator_stats(_index(device)), flat)
    return _collections.OrderedDict(sorted(flat))


def memory_allocated(device: _Device | None = None) -> int:
    """Bytes of device memory held by tensors now (blocks as handed out: requests rounded up)."""
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device: _Device | None = None) -> int:
    """The highest memory_allocated() since the start or the last reset_peak_memory_stats()."""
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device: _Device | None = None) -> int:
    """Bytes the caching allocator holds from the driver: tensors' memory plus its cache."""
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device: _Device | None = None) -> int:
    """The highest memory_reserved() since the start or the last reset_peak_memory_stats()."""
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: _Device | None = None) -> None:
    """Sets every peak figure of ``device`` to its current value."""
    _C._reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: _Device | None = None) -> None:
    """Zeroes the allocated and freed totals and the counters (num_ooms, ...) of ``device``."""
    _C._reset_accumulated_memory_stats(_index(device))


# Clearers of the device tensors the backend itself keeps between calls (FFT tables, ...): empty_cache
# drops them first, so that what stays reserved is what the user's tensors need.
_backend_caches: list[_Callable[[], None]] = []


def register_backend_cache(clear: _Callable[[], None]) -> None:
    """Has empty_cache() call clear(), which drops device tensors the backend keeps for reuse."""
    _backend_caches.append(clear)


def empty_cache() -> None:
    """Gives every cached segment that no tensor uses back to the driver, on every device.

    The backend's own caches of device tensors (the FFT's tables) are dropped first. Tensors keep
    their memory; memory_reserved() drops to what they (and blocks freed while other streams may
    still read them) need. Blocks of live memory pools stay with their pools.
    """
    for clear in _backend_caches:
        clear()
    _C._empty_cache()


def mem_get_info(device: _Device | None = None) -> tuple[int, int]:
    """(free, total) bytes of the device as the driver sees them; the allocator's cache counts as used."""
    return tuple(_C._mem_get_info(_index(device)))


def set_per_process_memory_fraction(fraction: float, device: _Device | None = None) -> None:
    """Caps the memory this process reserves on ``device`` at ``fraction`` (0 to 1) of its memory.

    A request that would need more raises torch.OutOfMemoryError naming the fraction. Memory
    already reserved is kept. Raises ValueError outside [0, 1].
    """
    _C._set_memory_fraction(_index(device), float(fraction))


def get_per_process_memory_fraction(device: _Device | None = None) -> float:
    """The cap set by set_per_process_memory_fraction (1.0 by default)."""
    return _C._memory_fraction(_index(device))


class MemPool:
    """A memory pool: device memory that only the allocations routed into it (``use_mem_pool``) use.

    Tensors allocated in the pool never share segments with the default pool or other pools, so a
    service can set memory aside for its requests ahead of time (``reserve``) and find it there.
    When the pool object dies, its cached memory goes back to the driver, and the memory of its
    tensors as each of them dies.
    """

    def __init__(self, device: _Device | None = None, reserve: int = 0) -> None:
        """Creates the pool on ``device`` (default: the current one) and reserves ``reserve``
        bytes in it (see ``reserve``)."""
        self.device = _index(device)
        self._pool = _C._mempool_create(self.device)
        if reserve:
            self.reserve(reserve)

    @property
    def id(self) -> tuple[int, int]:
        """The pool's id as a c10 MempoolId_t pair: ``(0, n)`` like CUDA's user-created pools."""
        return (0, self._pool)

    def reserve(self, nbytes: int) -> None:
        """Takes ``nbytes`` (rounded up to 2 MiB) from the device into the pool now, for the current
        stream, as one segment. Raises torch.OutOfMemoryError when the device cannot give them."""
        _C._mempool_reserve(self._pool, int(nbytes))

    def empty_cache(self) -> None:
        """Gives the pool's segments that no tensor uses back to the driver."""
        _C._mempool_empty_cache(self._pool)

    def __del__(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None and _C is not None:
            _C._mempool_release(pool)


@_contextlib.contextmanager
def use_mem_pool(pool: MemPool) -> _Iterator[None]:
    """Routes the calling thread's allocations on the pool's device into ``pool`` inside the block.

    Other threads, and other devices, keep allocating from the default pool. Nests.
    """
    _C._mempool_begin(pool._pool)
    try:
        yield
    finally:
        _C._mempool_end(pool._pool)
