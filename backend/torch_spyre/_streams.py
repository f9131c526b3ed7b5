"""Streams and events of ``torch.spyre``, in the shape of ``torch.cuda``'s.

A stream is one of the card's hardware queues: work on two streams runs concurrently on the card
(a copy beside a kernel, say), and sharing the cores and DMA channels. Stream 0 is the default
stream; new streams come from two pools, normal and high priority (``priority < 0``). An event
marks a point in a stream: other streams wait for it on the card, not on the host, and with
``enable_timing=True`` the card stamps it with its cycle counter, so ``elapsed_time`` is device
time. Everything goes through ``torch.Stream`` and ``torch.Event``, which the backend implements.
"""

import contextlib as _contextlib
from collections.abc import Iterator as _Iterator

import torch as _torch

_Device = _torch.device | str | int


def _device(device: _Device | None) -> _torch.device:
    from .device_module import _index  # device_module imports this module

    return _torch.device("spyre", _index(device))


class _SpyreOf(type):
    """isinstance(x, torch.spyre.Stream) is true for a torch.Stream of a spyre device (and so for
    events): torch's own methods take only torch.Stream and torch.Event themselves, not
    subclasses, so these classes make torch's objects rather than their own."""

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, cls._base) and obj.device.type == "spyre"


class Stream(metaclass=_SpyreOf):
    """A Spyre stream (a hardware queue), as a ``torch.Stream``. ``priority < 0`` takes one from
    the high-priority pool, whose work gets the cores and DMA channels first when streams compete
    for them."""

    _base = _torch.Stream

    def __new__(cls, device: _Device | None = None, priority: int = 0) -> _torch.Stream:
        return _torch.Stream(device=_device(device), priority=priority)


class Event(metaclass=_SpyreOf):
    """A Spyre event, as a ``torch.Event``. ``enable_timing=True`` makes the card write its cycle
    counter when the event is reached, so ``elapsed_time`` gives device time in milliseconds."""

    _base = _torch.Event

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> _torch.Event:
        if interprocess:
            raise NotImplementedError("torch.spyre.Event: interprocess events are not supported")
        return _torch.Event(device="spyre", enable_timing=enable_timing, blocking=blocking)


def current_stream(device: _Device | None = None) -> _torch.Stream:
    """The calling thread's current stream on ``device``."""
    return _torch.accelerator.current_stream(_device(device))


def default_stream(device: _Device | None = None) -> _torch.Stream:
    """The default stream (0) of ``device``."""
    device = _device(device)
    device_type = current_stream(device).device_type  # c10's number for the device type
    return _torch.Stream(stream_id=0, device_index=device.index, device_type=device_type)


def set_stream(stream: _torch.Stream) -> None:
    """Makes ``stream`` the calling thread's current stream on its device."""
    _torch.accelerator.set_stream(stream)


@_contextlib.contextmanager
def stream(s: _torch.Stream | None) -> _Iterator[None]:
    """Context manager: ``s`` is the current stream (and its device the current device) inside."""
    if s is None:
        yield
        return
    with s:
        yield
