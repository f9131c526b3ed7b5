"""``torch.spyre``: device management for the Spyre backend, in the shape of ``torch.cuda``."""

# Every module-level name not in __all__ is private (underscored): torch.spyre shows only its API.
import contextlib as _contextlib
import dataclasses as _dataclasses
from collections.abc import Iterator as _Iterator

import torch as _torch

from . import _C
from ._memory import (
    MemPool,
    empty_cache,
    get_per_process_memory_fraction,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
    use_mem_pool,
)
from ._streams import Event, Stream, current_stream, default_stream, set_stream, stream

_Device = _torch.device | str | int

__all__ = [
    "Event",
    "MemPool",
    "Stream",
    "current_stream",
    "default_stream",
    "set_stream",
    "stream",
    "current_device",
    "default_generator",
    "device",
    "device_count",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "get_per_process_memory_fraction",
    "get_rng_state",
    "init",
    "initial_seed",
    "is_available",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "set_device",
    "set_per_process_memory_fraction",
    "set_rng_state",
    "synchronize",
    "use_mem_pool",
]


def _index(device: _Device | None) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    device = _torch.device(device)
    if device.type != "spyre":
        raise ValueError(f"torch.spyre: expected a spyre device, got {device}")
    return current_device() if device.index is None else device.index


def is_available() -> bool:
    """True when at least one Spyre device (simulated or real) can be used."""
    return _C._device_count() > 0


def device_count() -> int:
    """Number of Spyre devices; 0 when none can be opened."""
    return _C._device_count()


def current_device() -> int:
    """Index of the calling thread's current Spyre device."""
    return _C._current_device()


def set_device(device: _Device) -> None:
    """Makes ``device`` the calling thread's current device. Raises IndexError if it does not exist."""
    _C._set_device(_index(device))


@_contextlib.contextmanager
def device(dev: _Device) -> _Iterator[None]:
    """Context manager that makes ``dev`` current and restores the previous device on exit."""
    previous = current_device()
    set_device(dev)
    try:
        yield
    finally:
        _C._set_device(previous)


def synchronize(device: _Device | None = None) -> None:
    """Waits until all work queued on ``device`` has finished; raises the first device error."""
    _C._synchronize(_index(device))


def is_initialized() -> bool:
    """True once a Spyre device has been opened in this process (by ``init()`` or by first use)."""
    return any(_C._device_opened(i) for i in range(_C._device_count()))


def _is_in_bad_fork() -> bool:
    """True in a child forked after the device started: it cannot use the parent's simulator."""
    return _C._is_in_bad_fork()


def _lazy_init() -> None:
    # What torch calls before a device's first use: the driver starts, and the card that is used
    # opens then (a process of a server takes only the cards it uses; init() opens the current one).
    _C._start()


def init() -> None:
    """Opens the current Spyre device now rather than at its first use. Raises RuntimeError at once
    in a subprocess forked after the device started, which cannot use it."""
    _C._init(current_device())


@_dataclasses.dataclass(frozen=True)
class _DeviceProperties:
    """What torch.spyre.get_device_properties() returns (CUDA's names where they fit)."""

    name: str
    total_memory: int  # usable device memory in bytes
    multi_processor_count: int  # AI cores
    clock_rate_mhz: int
    scratchpad_bytes: int  # per core
    queues: int  # hardware queues: the default stream and the stream pools
    fp16_format: str  # "dlfloat16" (the silicon's) or "ieee"
    # The figures the compiler plans with, as the card's capability registers report them.
    corelets: int  # PT arrays per core
    pt_array: tuple  # (rows, cols, fp16 multiply-add lanes per PE)
    sfp_lanes: int
    ring_bytes_per_cycle: int
    memory_bandwidth_gbps: float


def get_device_properties(device: _Device | None = None) -> _DeviceProperties:
    """Name, memory, cores, clock, scratchpad, queues and compute figures of ``device``."""
    info = _C._device_info(_index(device))
    return _DeviceProperties(
        name=info["name"],
        total_memory=info["memory_bytes"],
        multi_processor_count=info["cores"],
        clock_rate_mhz=info["clock_mhz"],
        scratchpad_bytes=info["lx_bytes"],
        queues=info["queues"],
        fp16_format=info["fp16_format"],
        corelets=info["corelets"],
        pt_array=tuple(info["pt_array"]),
        sfp_lanes=info["sfp_lanes"],
        ring_bytes_per_cycle=info["ring_bytes_per_cycle"],
        memory_bandwidth_gbps=info["memory_bandwidth_gbps"],
    )


def get_device_name(device: _Device | None = None) -> str:
    """The name of ``device``, e.g. "IBM Spyre (simulated)"."""
    return get_device_properties(device).name


def get_device_capability(device: _Device | None = None) -> dict:
    """As ``torch.accelerator.get_device_capability``: the dtypes the card computes in."""
    return _torch.accelerator.get_device_capability(_torch.device("spyre", _index(device)))


def get_amp_supported_dtype() -> list[_torch.dtype]:
    return [_torch.float16, _torch.bfloat16]


# Random numbers: one counter-based generator per device (seed and offset, like CUDA's Philox
# generator). torch.manual_seed(s) seeds them all through manual_seed_all.


def default_generator(device: _Device | None = None) -> _torch.Generator:
    """The device's default generator, as used by rand, randn, dropout and normal_ on it."""
    return _C._default_generator(_index(device))


def manual_seed(seed: int) -> None:
    """Seeds the current device's generator."""
    default_generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seeds every device's generator (called by torch.manual_seed)."""
    for index in range(device_count()):
        default_generator(index).manual_seed(int(seed))


def seed() -> int:
    """Seeds the current device's generator from a non-deterministic source and returns the seed."""
    return default_generator().seed()


def initial_seed() -> int:
    """The current device's generator's seed."""
    return default_generator().initial_seed()


def get_rng_state(device: _Device | None = None) -> _torch.Tensor:
    """The generator state of ``device``: 16 bytes (seed and offset) as a CPU uint8 tensor."""
    return default_generator(device).get_state()


def set_rng_state(state: _torch.Tensor, device: _Device | None = None) -> None:
    """Restores a state from get_rng_state()."""
    default_generator(device).set_state(state)
