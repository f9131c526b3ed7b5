"""spyre's Dynamo device interface: how torch.compile asks about devices, streams and events of
a device type. Registered when the spyre backend is first used (importing torch._dynamo on
``import torch`` would cost a second), or by ``torch_spyre._compile.device_interface.register()``."""

from __future__ import annotations

import torch
from torch._dynamo.device_interface import DeviceInterface, register_interface_for_device


class SpyreInterface(DeviceInterface):
    device = torch.spyre.device
    Event = torch.spyre.Event
    Stream = torch.spyre.Stream

    class Worker:
        @staticmethod
        def set_device(device: int):
            torch.spyre.set_device(device)

        @staticmethod
        def current_device() -> int:
            return torch.spyre.current_device()

        @staticmethod
        def get_device_properties(device=None):
            return torch.spyre.get_device_properties(device)

    @staticmethod
    def current_device() -> int:
        return torch.spyre.current_device()

    @staticmethod
    def set_device(device) -> None:
        torch.spyre.set_device(device)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        prev = torch.spyre.current_device()
        if device != prev:
            torch.spyre.set_device(device)
        return prev

    @staticmethod
    def exchange_device(device: int) -> int:
        return SpyreInterface.maybe_exchange_device(device)

    @staticmethod
    def device_count() -> int:
        return torch.spyre.device_count()

    @staticmethod
    def is_available() -> bool:
        return torch.spyre.is_available()

    @staticmethod
    def current_stream():
        return torch.spyre.current_stream()

    @staticmethod
    def set_stream(stream) -> None:
        torch.spyre.set_stream(stream)

    @staticmethod
    def stream(stream):
        return torch.spyre.stream(stream)

    @staticmethod
    def get_raw_stream(device: int) -> int:
        return torch.spyre.current_stream(device).stream_id

    @staticmethod
    def synchronize(device=None) -> None:
        torch.spyre.synchronize(device)

    @staticmethod
    def get_device_properties(device=None):
        return torch.spyre.get_device_properties(device)

    @staticmethod
    def memory_allocated(device=None) -> int:
        return torch.spyre.memory_allocated(device)

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @classmethod
    def is_dtype_supported(cls, dtype: torch.dtype, including_emulation: bool = False) -> bool:
        return dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int8, torch.bool, torch.int64)

    @staticmethod
    def get_compute_capability(device=None):
        return torch.spyre.get_device_capability(device)

    @staticmethod
    def is_triton_capable(device=None) -> bool:
        return False


def register() -> None:
    register_interface_for_device("spyre", SpyreInterface)
