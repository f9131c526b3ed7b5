"""Device memory: the caching allocator seen through torch.spyre and torch.accelerator.

Expected figures are worked out here from the documented policy (requests rounded to 512 bytes;
up to 1 MiB from 2 MiB segments; below 10 MiB from 20 MiB segments; larger ones in their own
segment rounded to 2 MiB), not read back from the allocator.
"""

from __future__ import annotations

import importlib
import os
import threading

import pytest
import torch
import torch_spyre.debug
from conftest import run_python

MiB = 2**20


def round512(n: int) -> int:
    return (n + 511) // 512 * 512


def fresh_state() -> None:
    """No pending work and no cached memory: what remains reserved is what live tensors need."""
    torch.spyre.synchronize()
    torch.spyre.empty_cache()


def test_allocated_and_reserved_follow_tensor_sizes():
    # A fresh process, so that no other test's tensors share the segments.
    code = """
import torch
small = torch.empty(1000, dtype=torch.float32, device="spyre")         # 4000 bytes
mid = torch.empty(3 * 2**20, dtype=torch.uint8, device="spyre")       # 3 MiB
big = torch.empty(25 * 2**20 + 1, dtype=torch.uint8, device="spyre")  # 25 MiB + 1
print(torch.spyre.memory_allocated(), torch.spyre.memory_reserved(),
      torch.accelerator.memory_allocated(), torch.accelerator.memory_reserved(),
      torch.spyre.memory_stats()["requested_bytes.all.current"], torch.spyre.memory_stats()["segment.all.current"])
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    allocated, reserved, acc_allocated, acc_reserved, requested, segments = map(int, proc.stdout.split())
    # 25 MiB + 1 takes a 26 MiB segment; the 1 MiB - 512 left is no large block, so it stays with it.
    assert allocated == round512(4000) + 3 * MiB + 26 * MiB
    assert reserved == 2 * MiB + 20 * MiB + 26 * MiB
    assert (acc_allocated, acc_reserved) == (allocated, reserved)
    assert requested == 4000 + 3 * MiB + 25 * MiB + 1
    assert segments == 3


def test_a_freed_block_is_reused_without_a_driver_call():
    x = torch.empty(12345, device="spyre")
    ptr = x.data_ptr()
    device_allocs = torch.spyre.memory_stats()["num_device_alloc"]
    del x
    y = torch.empty(12345, device="spyre")
    assert y.data_ptr() == ptr
    assert torch.spyre.memory_stats()["num_device_alloc"] == device_allocs


def test_empty_cache_lowers_reserved_to_what_live_tensors_need():
    fresh_state()
    start = torch.spyre.memory_reserved()
    tensors = [torch.empty(n * MiB, dtype=torch.uint8, device="spyre") for n in (12, 16, 30, 40)]
    grown = torch.spyre.memory_reserved()
    assert grown - start == (12 + 16 + 30 + 40) * MiB  # each large enough for a segment of its own
    del tensors[1:]
    assert torch.spyre.memory_reserved() == grown  # cached, not given back
    torch.spyre.empty_cache()
    assert torch.spyre.memory_reserved() - start == 12 * MiB
    del tensors
    torch.accelerator.empty_cache()  # the same cache
    assert torch.spyre.memory_reserved() == start


@pytest.mark.skipif(
    os.environ.get("SPYRE_TRANSPORT") == "socket", reason="the card's memory lives in spyre-simd's process there"
)
def test_empty_cache_gives_the_host_memory_back_to_the_os():
    """The simulated card's memory lives in this process: a segment given back by empty_cache is
    scrubbed, and the host memory behind it returns to the operating system (once, it stayed)."""
    code = (
        "import torch, torch_spyre\n"
        "def rss():\n"
        "    return next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmRSS')) >> 10\n"
        "start = rss()\n"
        "x = torch.empty(128 << 20, device='spyre'); x.fill_(1.0); torch.spyre.synchronize()\n"
        "full = rss()\n"
        "del x; torch.spyre.empty_cache()\n"
        "y = torch.zeros(1 << 20, device='spyre')\n"  # memory given out again reads as zeros
        "print(start, full, rss(), y.abs().sum().item())\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    start, full, emptied, rest = (float(v) for v in proc.stdout.split())
    assert full - start > 400  # 512 MiB written
    assert full - emptied > 400, (start, full, emptied)
    assert rest == 0


def pending_bytes() -> int:
    """Bytes freed by their tensors but held back for a recorded stream (active, not allocated)."""
    stats = torch.spyre.memory_stats()
    return stats["active_bytes.all.current"] - stats["allocated_bytes.all.current"]


def test_record_stream_keeps_a_block_from_reuse_while_the_stream_works():
    side = torch.spyre.Stream()
    x = torch.randn(512, 512).to("spyre")  # 1 MiB, allocated on the default stream
    ptr = x.data_ptr()
    side.wait_stream(torch.spyre.current_stream())
    with torch.spyre.stream(side):
        outs = [x @ x for _ in range(4)]  # the side stream reads x
    x.record_stream(side)
    del x
    assert not side.query(), "the side stream finished too soon for this test to mean anything"
    assert pending_bytes() >= MiB
    y = torch.empty(512, 512, device="spyre")
    assert y.data_ptr() != ptr, "a block was reused while a recorded stream could still read it"
    side.synchronize()
    del y, outs
    torch.empty(1, device="spyre")  # an allocation completes the frees whose streams have passed
    assert pending_bytes() == 0


def test_record_stream_api_on_the_tensors_own_stream_is_a_no_op():
    x = torch.empty(1000, device="spyre")
    ptr = x.data_ptr()
    x.record_stream(torch.spyre.current_stream())
    del x
    assert torch.empty(1000, device="spyre").data_ptr() == ptr


def test_memory_fraction_caps_reserved_memory_and_the_device_stays_usable():
    fresh_state()
    total = torch.spyre.mem_get_info()[1]
    ooms = torch.spyre.memory_stats()["num_ooms"]
    try:
        torch.spyre.set_per_process_memory_fraction(0.05)
        assert torch.spyre.get_per_process_memory_fraction() == 0.05
        with pytest.raises(torch.OutOfMemoryError, match=r"per-process memory fraction 0\.05"):
            torch.empty(int(total * 0.06), dtype=torch.uint8, device="spyre")
        assert torch.spyre.memory_stats()["num_ooms"] == ooms + 1
        ok = torch.empty(int(total * 0.01), dtype=torch.uint8, device="spyre")
        del ok
    finally:
        torch.spyre.set_per_process_memory_fraction(1.0)
    with pytest.raises(ValueError, match="memory fraction"):
        torch.spyre.set_per_process_memory_fraction(1.5)
    x = torch.arange(6.0).to("spyre")
    assert (x * 2).cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]


def test_out_of_memory_is_a_python_exception_after_one_retry():
    before = torch.spyre.memory_stats()
    with pytest.raises(torch.OutOfMemoryError, match=r"out of device memory: tried to allocate 200\.00 GiB"):
        torch.empty(200 * 2**30, dtype=torch.uint8, device="spyre")
    after = torch.spyre.memory_stats()
    assert after["num_ooms"] == before["num_ooms"] + 1
    assert after["num_alloc_retries"] == before["num_alloc_retries"] + 1
    assert torch.ones(3, device="spyre").sum().item() == 3.0


def test_empty_cache_gives_back_the_fft_tables_too():
    # Regression: the FFT's cached cos/sin tables stayed reserved after empty_cache(), so a later
    # allocation was served from their segment instead of a new one.
    fresh_state()
    start = torch.spyre.memory_reserved()
    x = torch.randn(64, device="spyre")
    spectrum = torch.fft.fft(x)
    torch.testing.assert_close(spectrum.cpu(), torch.fft.fft(x.cpu()), atol=1e-4, rtol=1e-4)
    del x, spectrum
    fresh_state()
    assert torch.spyre.memory_reserved() == start


def test_a_memory_pool_serves_its_own_reservation():
    fresh_state()
    start = torch.spyre.memory_reserved()
    pool = torch.spyre.MemPool(reserve=7 * MiB)  # rounded to 8 MiB
    assert torch.spyre.memory_reserved() == start + 8 * MiB
    device_allocs = torch.spyre.memory_stats()["num_device_alloc"]
    with torch.spyre.use_mem_pool(pool):
        inside = torch.empty(3 * MiB, dtype=torch.uint8, device="spyre")
        elsewhere = []

        def allocate_elsewhere() -> None:
            elsewhere.append(torch.empty(3 * MiB, dtype=torch.uint8, device="spyre"))

        worker = threading.Thread(target=allocate_elsewhere)
        worker.start()
        worker.join()
    # The pool's reservation served `inside`; the other thread used the default pool (a new segment).
    assert torch.spyre.memory_stats()["num_device_alloc"] == device_allocs + 1
    assert torch.spyre.memory_reserved() == start + 8 * MiB + 20 * MiB
    outside = torch.empty(3 * MiB, dtype=torch.uint8, device="spyre")  # default pool again: its cache
    assert torch.spyre.memory_stats()["num_device_alloc"] == device_allocs + 1
    torch.spyre.empty_cache()  # the pool keeps what it reserved
    assert torch.spyre.memory_reserved() == start + 8 * MiB + 20 * MiB
    del inside, pool
    assert torch.spyre.memory_reserved() == start + 20 * MiB  # its segment went with it
    elsewhere.clear()
    del outside
    torch.spyre.empty_cache()
    assert torch.spyre.memory_reserved() == start


def test_a_released_pool_cannot_be_used():
    pool = torch.spyre.MemPool()
    assert pool.id[0] == 0 and pool.id[1] > 0
    pool_id = pool._pool
    del pool
    with pytest.raises(ValueError, match="memory pool"):
        importlib.import_module("torch_spyre._C")._mempool_begin(pool_id)


# c10::CachingDeviceAllocator::DeviceStats (c10/core/CachingDeviceAllocator.h), field by field, as
# torch.cuda.memory_stats flattens it: the per-pool arrays, the two single figures, the counters.
_STAT_ARRAYS = (
    "allocation",
    "segment",
    "active",
    "inactive_split",
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "inactive_split_bytes",
    "requested_bytes",
)
_STATS = ("oversize_allocations", "oversize_segments")
_COUNTERS = (
    "num_alloc_retries",
    "num_ooms",
    "max_split_size",
    "num_sync_all_streams",
    "num_device_alloc",
    "num_device_free",
)
_METRICS = ("current", "peak", "allocated", "freed")


def test_memory_stats_has_cudas_keys_and_agrees_with_torch_accelerator():
    expected = {f"{a}.{p}.{m}" for a in _STAT_ARRAYS for p in ("all", "small_pool", "large_pool") for m in _METRICS}
    expected |= {f"{s}.{m}" for s in _STATS for m in _METRICS}
    expected |= set(_COUNTERS)
    keep = torch.empty(100, device="spyre")
    stats = torch.spyre.memory_stats()
    assert set(stats) == expected
    assert list(stats) == sorted(stats)
    assert dict(torch.accelerator.memory_stats()) == dict(stats)
    for a in _STAT_ARRAYS:
        for m in ("current", "allocated", "freed"):  # peaks of the pools need not coincide
            assert stats[f"{a}.all.{m}"] == stats[f"{a}.small_pool.{m}"] + stats[f"{a}.large_pool.{m}"]
    assert (
        torch.spyre.memory_allocated() == torch.accelerator.memory_allocated() == stats["allocated_bytes.all.current"]
    )
    assert torch.spyre.max_memory_reserved() == torch.accelerator.max_memory_reserved()
    del keep


def test_peak_and_accumulated_figures_reset():
    big = torch.empty(64 * MiB, dtype=torch.uint8, device="spyre")
    del big
    assert torch.spyre.max_memory_allocated() >= torch.spyre.memory_allocated() + 64 * MiB
    torch.spyre.reset_peak_memory_stats()
    assert torch.spyre.max_memory_allocated() == torch.spyre.memory_allocated()
    assert torch.accelerator.max_memory_allocated() == torch.spyre.memory_allocated()
    assert torch.spyre.max_memory_reserved() == torch.spyre.memory_reserved()
    torch.spyre.reset_accumulated_memory_stats()
    stats = torch.spyre.memory_stats()
    assert stats["allocated_bytes.all.allocated"] == stats["allocated_bytes.all.freed"] == 0
    assert stats["num_device_alloc"] == stats["num_ooms"] == 0
    x = torch.empty(1000, dtype=torch.uint8, device="spyre")
    assert torch.spyre.memory_stats()["allocated_bytes.all.allocated"] == round512(1000)
    del x


def test_mem_get_info_counts_the_cache_as_used():
    fresh_state()
    free, total = torch.spyre.mem_get_info()
    driver = torch_spyre.debug.driver_memory_info()
    assert total == driver["total"]
    assert free == driver["total"] - driver["allocated"]
    x = torch.empty(64 * MiB, dtype=torch.uint8, device="spyre")
    del x
    assert torch.spyre.mem_get_info()[0] == free - 64 * MiB  # cached, so still in use for the driver
    torch.spyre.empty_cache()
    assert torch.spyre.mem_get_info()[0] == free


def test_resize_keeps_contents_through_the_cache():
    t = torch.arange(10.0).to("spyre")
    t.resize_(1000)
    assert t[:10].cpu().tolist() == list(map(float, range(10)))
    t.resize_(4)
    assert t.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


def test_without_caching_memory_goes_back_at_once():
    code = """
import torch
x = torch.empty(1000, device="spyre")
print(torch.spyre.memory_reserved())
del x
print(torch.spyre.memory_reserved())
"""
    proc = run_python(code, env={"TORCH_SPYRE_NO_MEMORY_CACHING": "1"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(round512(4000)), "0"]


def test_memory_given_back_to_the_driver_waits_for_every_stream():
    """empty_cache() returns segments to the driver, whose memory map knows no streams: a segment
    that a kernel on another stream is still writing must not go to a new tensor before that
    kernel is done (here a DMA on a second stream would finish first and be overwritten)."""
    a = torch.randn(2048, 2048, device="spyre")
    keep = a @ a  # warm up, and keep its memory out of the way
    torch.spyre.synchronize()
    writer, other = torch.spyre.Stream(), torch.spyre.Stream()
    with torch.spyre.stream(writer):
        x = a @ a  # a kernel of about a millisecond of device time, writing x
        x_addr = x.data_ptr()
        del x
    torch.spyre.empty_cache()
    host = torch.full((2048, 2048), 7.0).pin_memory()
    with torch.spyre.stream(other):
        y = host.to("spyre", non_blocking=True)
    torch.spyre.synchronize()
    assert y.data_ptr() == x_addr  # the driver handed out the same memory...
    assert torch.equal(y.cpu(), host)  # ...only once the kernel was done with it
    del keep
