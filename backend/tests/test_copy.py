"""Copies between host and device, within the device, with dtype and stride conversion."""

from __future__ import annotations

import pytest
import torch
from conftest import run_with_stats

DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int64,
    torch.int32,
    torch.int8,
    torch.uint8,
    torch.bool,
]


def sample(shape, dtype, gen):
    x = torch.randn(shape, generator=gen) * 10
    return x > 0 if dtype == torch.bool else x.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip_is_exact(dtype, cpu_gen):
    x = sample((37, 129), dtype, cpu_gen)
    y = x.to("spyre")
    assert y.device.type == "spyre" and y.dtype == dtype and y.shape == x.shape
    assert torch.equal(y.cpu(), x)


def test_host_to_device_with_dtype_conversion(cpu_gen):
    x = torch.randn(64, 65, generator=cpu_gen)
    y = x.to("spyre", torch.float16)
    assert y.dtype == torch.float16
    assert torch.equal(y.cpu(), x.half())
    assert torch.equal(y.to(torch.float32).cpu(), x.half().float())  # device -> device conversion


def test_non_contiguous_sources_and_views(cpu_gen):
    x = torch.randn(40, 70, generator=cpu_gen)
    assert torch.equal(x.t().to("spyre").cpu(), x.t())  # strided host source
    d = x.to("spyre")
    assert torch.equal(d.t().cpu(), x.t())  # strided device source
    assert torch.equal(d[3:17, ::3].cpu(), x[3:17, ::3])
    assert torch.equal(d.t().contiguous().cpu(), x.t().contiguous())  # strided device -> device
    assert d.view(70, 40).data_ptr() == d.data_ptr()  # views share storage


def test_copy_into_strided_device_destination(cpu_gen):
    x = torch.randn(16, 32, generator=cpu_gen)
    d = x.to("spyre")
    src = torch.randn(16, 16, generator=cpu_gen)
    d[:, ::2] = src.to("spyre")  # device -> strided device
    x[:, ::2] = src
    assert torch.equal(d.cpu(), x)
    d[1:3, 5:9].copy_(torch.ones(4, dtype=torch.int32))  # host -> strided device, converted and broadcast
    x[1:3, 5:9] = 1
    assert torch.equal(d.cpu(), x)


def test_copy_into_non_contiguous_host_destination(cpu_gen):
    x = torch.randn(8, 12, generator=cpu_gen)
    out = torch.zeros(12, 8).t()
    out.copy_(x.to("spyre"))
    assert torch.equal(out, x)


def test_a_copy_between_overlapping_views_raises_as_on_cpu(cpu_gen):
    x = torch.randn(300_000, generator=cpu_gen)  # 1.2 MB: more than the DMA engine reads ahead
    n = 100_000
    c = x.clone()
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        c[n:].copy_(c[:-n])
    d = x.to("spyre")
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        d[n:].copy_(d[:-n])
    assert torch.equal(d.cpu(), x), "a refused copy writes nothing"


def test_item_and_empty_tensors():
    assert torch.tensor([3.5]).to("spyre").item() == 3.5
    assert torch.tensor(7, dtype=torch.int64).to("spyre").item() == 7
    e = torch.empty(0, 5).to("spyre")
    assert e.shape == (0, 5) and e.cpu().shape == (0, 5)


def test_resize_keeps_contents(cpu_gen):
    x = torch.randn(10, generator=cpu_gen)
    d = x.to("spyre")
    d.resize_(40)
    assert torch.equal(d[:10].cpu(), x)
    d.resize_(2, 3)
    assert torch.equal(d.cpu().flatten(), x[:6])


def test_memory_is_returned_when_tensors_die():
    torch.spyre.synchronize()
    before, before_torch = torch.spyre.memory_allocated(), torch.accelerator.memory_allocated()
    x = torch.empty(1024, 1024, device="spyre")
    assert torch.spyre.memory_allocated() == before + 4 * 2**20
    assert torch.accelerator.memory_allocated() == before_torch + 4 * 2**20
    del x
    assert torch.spyre.memory_allocated() == before
    assert torch.accelerator.memory_allocated() == before_torch


def test_large_host_copies_move_in_pieces(tmp_path):
    """Host copies go in pieces (a descriptor moves at most 4 GiB, and staging a copy whole would
    double its host memory). With tiny pieces forced, copies of every size and dtype give the bytes
    back exactly both ways, and a kernel reads what the pieces wrote."""
    code = """
import torch
g = torch.Generator().manual_seed(0)
for n in (1, 999, 1000, 1001, 12345, 100000):
    for dtype in (torch.float32, torch.int64, torch.float16, torch.uint8):
        host = (torch.randn(n, generator=g) * 100).to(dtype)
        dev = host.to("spyre")
        assert torch.equal(dev.cpu(), host), (n, dtype)
        if dtype in (torch.float32, torch.int64):
            assert torch.equal((dev * 2).cpu(), host * 2), (n, dtype)
print("ok")
"""
    stats, proc = run_with_stats(code, tmp_path, env={"TORCH_SPYRE_COPY_CHUNK": "1000"})
    assert proc.stdout.strip() == "ok"
    # 400 kB of fp32 each way alone is 800 pieces of 1000 bytes
    assert stats["cards"][0]["commands"]["copy"] > 800


def test_pinned_host_memory(cpu_gen):
    """pin_memory() gives DMA-mapped host memory: is_pinned() says so, and copies from and into it
    (which the card makes in place, without staging) give the same bytes, non_blocking included."""
    x = torch.randn(70000, generator=cpu_gen)
    pinned = x.pin_memory()
    assert pinned.is_pinned() and not x.is_pinned() and torch.equal(pinned, x)
    assert torch.equal(pinned.to("spyre").cpu(), x)
    dev = pinned[5:60005].to("spyre", non_blocking=True)  # a slice: an address inside the buffer
    torch.spyre.synchronize()
    assert torch.equal(dev.cpu(), x[5:60005])
    out = torch.empty(60000).pin_memory()
    out.copy_(dev * 2)
    assert torch.equal(out, x[5:60005] * 2)
