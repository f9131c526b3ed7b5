"""Bad input gives a clear error, and the device stays usable afterwards."""

from __future__ import annotations

import struct

import pytest
import torch
from torch_spyre.debug import submit_raw_descriptor

# Descriptor layout from hw/include/spyre/hw/commands.h: opcode u8, flags u8, reserved u16, reserved u32,
# seq u64, then six u64 operands.
OP_COPY, OP_LAUNCH = 1, 2
COPY_SRC_HOST = 1


def descriptor(opcode: int, flags: int = 0, operands=(0, 0, 0, 0, 0, 0), reserved: int = 0) -> bytes:
    return struct.pack("<BBHIQ6Q", opcode, flags, 0, reserved, 0, *operands)


def assert_device_works():
    x = torch.arange(12.0).reshape(3, 4)
    torch.testing.assert_close((x.to("spyre") @ x.t().to("spyre")).cpu(), x @ x.t())


def test_out_of_memory_is_a_python_exception():
    with pytest.raises(torch.OutOfMemoryError, match=r"out of device memory: tried to allocate 200\.00 GiB"):
        torch.empty(200 * 2**30, dtype=torch.uint8, device="spyre")
    # Almost all of the card's 112 GB (through spyre-simd: this client's share) is addressable
    # (sparse backing), and then it is given back.
    memory = torch.spyre.get_device_properties(0).total_memory
    big = torch.empty(memory - 12 * 2**30, dtype=torch.uint8, device="spyre")
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(20 * 2**30, dtype=torch.uint8, device="spyre")
    del big
    # Given back: the cache holds the freed ~100 GB until emptied (and a later test's small tensors
    # would be placed in it and keep it reserved).
    torch.spyre.empty_cache()
    assert torch.spyre.memory_reserved() < 2**30
    assert_device_works()


@pytest.mark.parametrize(
    "raw,error,field",
    [
        (descriptor(99), "bad opcode", "opcode"),
        (descriptor(OP_COPY, operands=(0, 1 << 40, 64, 0, 0, 0)), "address out of device memory", "copy.dst"),
        (descriptor(OP_COPY, operands=(0, 4096, 0, 0, 0, 0)), "bad size", "copy.size"),
        (descriptor(OP_COPY, COPY_SRC_HOST, (0xDEAD000, 4096, 64, 0, 0, 0)), "DMA fault", "copy.src"),
        (descriptor(OP_COPY, operands=(0, 4096, 64, 0, 0, 0), reserved=5), "reserved field not zero", "reserved"),
        (descriptor(OP_LAUNCH, operands=(65536, 4096, 0, 0, 0, 0)), "no such core", "launch.core_mask"),
    ],
    ids=["opcode", "copy-dst", "copy-size", "unmapped-host", "reserved", "core-mask"],
)
def test_malformed_descriptor_fails_with_the_field_named(raw, error, field):
    result = submit_raw_descriptor(raw, device=0)
    assert not result["ok"]
    assert error in result["error"] or error in result["message"]
    assert result["field"] == field
    assert f"in field {field}" in result["message"]
    assert_device_works()


def test_raw_descriptor_of_the_wrong_size_is_rejected():
    with pytest.raises(ValueError, match="a descriptor is 64 bytes, got 3"):
        submit_raw_descriptor(b"abc")


def test_valid_raw_descriptor_succeeds():
    result = submit_raw_descriptor(descriptor(0))  # nop
    assert result["ok"] and result["error"] == "ok"
