"""``torch.spyre``: device management for the Spyre backend, in the shape of ``torch.cuda``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from . import _C

__all__ = [
    "current_device",
    "default_generator",
    "device",
    "device_count",
    "get_amp_supported_dtype",
    "get_rng_state",
    "initial_seed",
    "is_available",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "memory_allocated",
    "max_memory_allocated",
    "memory_stats",
    "seed",
    "set_device",
    "set_rng_state",
    "synchronize",
]


def _index(device: torch.device | str | int | None) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
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


def set_device(device: torch.device | str | int) -> None:
    """Makes ``device`` the calling thread's current device. Raises IndexError if it does not exist."""
    _C._set_device(_index(device))


@contextlib.contextmanager
def device(dev: torch.device | str | int) -> Iterator[None]:
    """Context manager that makes ``dev`` current and restores the previous device on exit."""
    previous = current_device()
    set_device(dev)
    try:
        yield
    finally:
        _C._set_device(previous)


def synchronize(device: torch.device | str | int | None = None) -> None:
    """Waits until all work queued on ``device`` has finished; raises the first device error."""
    _C._synchronize(_index(device))


def is_initialized() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    """True in a child forked after the device started: it cannot use the parent's simulator."""
    return _C._is_in_bad_fork()


def _lazy_init() -> None:
    pass


def init() -> None:
    pass


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float16]


def memory_stats(device: torch.device | str | int | None = None) -> dict[str, int]:
    """Device memory figures in bytes: total, allocated, peak, largest_free, and live blocks."""
    return _C._memory_stats(_index(device))


def memory_allocated(device: torch.device | str | int | None = None) -> int:
    return memory_stats(device)["allocated"]


def max_memory_allocated(device: torch.device | str | int | None = None) -> int:
    return memory_stats(device)["peak"]


# Random numbers: one counter-based generator per device (seed and offset, like CUDA's Philox
# generator). torch.manual_seed(s) seeds them all through manual_seed_all.


def default_generator(device: torch.device | str | int | None = None) -> torch.Generator:
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


def get_rng_state(device: torch.device | str | int | None = None) -> torch.Tensor:
    """The generator state of ``device``: 16 bytes (seed and offset) as a CPU uint8 tensor."""
    return default_generator(device).get_state()


def set_rng_state(state: torch.Tensor, device: torch.device | str | int | None = None) -> None:
    """Restores a state from get_rng_state()."""
    default_generator(device).set_state(state)
