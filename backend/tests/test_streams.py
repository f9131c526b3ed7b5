"""Streams and events: hardware queues that run concurrently on the simulated card.

Device times come from the card's own timestamps (events with timing); the expectations come from
the modelled hardware (PCIe bandwidth in the config), not from the backend's code.
"""

import os
import subprocess
import sys
import threading

import pytest
import torch

PCIE_BYTES_PER_MS = 64e9 / 1e3  # pcie.bandwidth_gbps of the default config, per millisecond
# Data bytes per wire byte: each 256-byte packet (pcie.max_payload_bytes) carries 24 bytes of header,
# sequence number, CRC and framing (pcie.packet_overhead_bytes).
PCIE_EFFICIENCY = 256 / (256 + 24)


def timed_event() -> torch.Event:
    return torch.spyre.Event(enable_timing=True)


def test_streams_are_hardware_queues_with_priorities():
    default = torch.spyre.default_stream()
    assert default.stream_id == 0
    assert torch.spyre.current_stream() == default
    normal = torch.spyre.Stream()
    high = torch.spyre.Stream(priority=-1)
    generic = torch.Stream(device="spyre")
    for s in (normal, high, generic):
        assert isinstance(s, torch.spyre.Stream) and isinstance(s, torch.Stream)
        assert s.device == torch.device("spyre", 0)
        assert s.stream_id != 0
    assert high.stream_id != normal.stream_id
    with torch.spyre.stream(normal):
        assert torch.spyre.current_stream() == normal
        assert torch.accelerator.current_stream() == normal
        with high:
            assert torch.spyre.current_stream() == high
        assert torch.spyre.current_stream() == normal
    assert torch.spyre.current_stream() == default
    torch.spyre.set_stream(high)
    try:
        assert torch.spyre.current_stream() == high
    finally:
        torch.spyre.set_stream(default)


def test_work_on_a_stream_matches_cpu():
    a, b = torch.randn(300, 200), torch.randn(200, 100)
    s = torch.spyre.Stream()
    with torch.spyre.stream(s):
        da, db = a.to("spyre"), b.to("spyre")
        dc = torch.relu(da @ db) + 1
    s.synchronize()
    assert s.query()
    torch.testing.assert_close(dc.cpu(), torch.relu(a @ b) + 1, rtol=1e-4, atol=1e-4)


def test_query_does_not_block_and_synchronize_waits():
    x = torch.randn(1024, 1024, device="spyre")
    torch.spyre.synchronize()
    s = torch.spyre.Stream()
    with torch.spyre.stream(s):
        y = x @ x  # about a hundred microseconds of device time: far longer than a query
        done = timed_event()
        done.record()
    assert not s.query()
    assert not done.query()
    s.synchronize()
    assert s.query() and done.query()
    torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu(), rtol=1e-3, atol=1e-3)


def test_event_elapsed_time_is_device_time_of_a_pcie_copy():
    n = 16 << 20
    src = torch.ones(n // 4).pin_memory()
    dst = torch.empty(n // 4, device="spyre")
    torch.spyre.synchronize()
    start, end = timed_event(), timed_event()
    start.record()
    dst.copy_(src, non_blocking=True)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    expected = n / (PCIE_BYTES_PER_MS * PCIE_EFFICIENCY)
    assert expected <= ms <= 1.05 * expected, (ms, expected)
    assert torch.equal(dst.cpu(), src)


def test_elapsed_time_needs_timing():
    a, b = torch.spyre.Event(), torch.spyre.Event()
    assert isinstance(a, torch.spyre.Event) and not isinstance(torch.Event(device="cpu"), torch.spyre.Event)
    a.record()
    b.record()
    with pytest.raises(ValueError, match="enable_timing"):
        a.elapsed_time(b)
    assert torch.spyre.Event().query()  # never recorded: nothing to wait for


def test_copy_on_one_stream_overlaps_a_kernel_on_another_and_a_wait_orders_them():
    """Done-when 2 of the runtime issue, in device time from the card's timestamps."""
    x = torch.randn(1024, 1024, device="spyre")
    n = 16 << 20
    src = torch.ones(n // 4).pin_memory()
    dst = torch.empty(n // 4, device="spyre")
    compute, copies = torch.spyre.Stream(), torch.spyre.Stream()
    compute.wait_stream(torch.spyre.current_stream())  # x is written on the default stream
    with torch.spyre.stream(compute):
        (x @ x).sum()  # warm up: programs loaded, so nothing below waits on the host
    torch.spyre.synchronize()

    def run(ordered: bool) -> tuple[float, float, float, float]:
        k0, k1, c0, c1 = (timed_event() for _ in range(4))
        with torch.spyre.stream(compute):
            k0.record()
            for _ in range(4):
                x @ x
            k1.record()
        with torch.spyre.stream(copies):
            if ordered:
                copies.wait_event(k1)
            c0.record()
            dst.copy_(src, non_blocking=True)
            c1.record()
        torch.spyre.synchronize()
        return 0.0, k0.elapsed_time(k1), k0.elapsed_time(c0), k0.elapsed_time(c1)

    k_start, k_end, c_start, c_end = run(ordered=False)
    print(f"overlapped: kernels 0..{k_end:.3f} ms, copy {c_start:.3f}..{c_end:.3f} ms")
    copy_ms, kernel_ms = c_end - c_start, k_end - k_start
    assert copy_ms >= n / PCIE_BYTES_PER_MS
    assert kernel_ms > copy_ms  # the copy fits inside the kernels, so overlap is visible
    # The intervals overlap, and the two together take less than one after the other.
    assert max(k_start, c_start) < min(k_end, c_end), (k_start, k_end, c_start, c_end)
    assert max(k_end, c_end) - min(k_start, c_start) < 0.9 * (copy_ms + kernel_ms)

    k_start, k_end, c_start, c_end = run(ordered=True)
    print(f"ordered: kernels 0..{k_end:.3f} ms, copy {c_start:.3f}..{c_end:.3f} ms")
    assert c_start >= k_end, (k_end, c_start)
    assert torch.equal(dst.cpu(), src)


def test_wait_stream_orders_work_across_streams():
    a = torch.randn(512, 512)
    producer, consumer = torch.spyre.Stream(), torch.spyre.Stream()
    with torch.spyre.stream(producer):
        d = a.to("spyre")
        d = d @ d
    consumer.wait_stream(producer)
    with torch.spyre.stream(consumer):
        e = d + 1
    # .cpu() copies on the current (default) stream: it too must wait, as on CUDA.
    torch.spyre.current_stream().wait_stream(consumer)
    torch.testing.assert_close(e.cpu(), a @ a + 1, rtol=1e-3, atol=1e-3)


def test_record_stream_and_events_across_threads():
    results = {}

    def worker(i: int) -> None:
        s = torch.spyre.Stream()
        with torch.spyre.stream(s):
            t = torch.full((256,), float(i), device="spyre")
            t.record_stream(s)
            ev = torch.spyre.Event()
            ev.record()
        ev.synchronize()
        results[i] = (torch.spyre.current_stream().stream_id, t.sum().item())

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert {i: r[1] for i, r in results.items()} == {i: 256.0 * i for i in range(4)}
    assert all(r[0] == 0 for r in results.values())  # each thread left its current stream default


def test_a_stream_id_the_device_does_not_have_is_refused():
    device_type = torch.spyre.current_stream().device_type
    bogus = torch.Stream(stream_id=99, device_index=0, device_type=device_type)
    with pytest.raises(IndexError, match="no stream 99"):
        bogus.query()
    with pytest.raises(IndexError, match="no stream 99"):
        torch.spyre.set_stream(bogus)


def test_a_stream_of_one_card_waits_for_an_event_of_another_in_device_time(tmp_path):
    """Card 1's stream waits, on the card, for an event recorded on card 0 after a long chain of
    matmuls: its next timestamp lands after card 0's, by about a PCIe read. Without the wait card 1
    runs ahead. (It once raised: an event of device 0 could not be waited on by device 1.)"""
    config = tmp_path / "two.json"
    config.write_text('{"sim": {"devices": 2}}')
    code = (
        "import sys, torch\n"
        "a = torch.randn(1024, 1024).to('spyre:0')\n"
        "b = torch.ones(4).to('spyre:1')\n"
        "torch.spyre.synchronize(0); torch.spyre.synchronize(1)\n"
        "z0 = torch.spyre.Event(enable_timing=True); z0.record(torch.spyre.current_stream(0))\n"
        "z1 = torch.spyre.Event(enable_timing=True); z1.record(torch.spyre.current_stream(1))\n"
        "for _ in range(4): a = a @ a * 1e-3\n"
        "e = torch.spyre.Event(); e.record(torch.spyre.current_stream(0))\n"
        "t0 = torch.spyre.Event(enable_timing=True); t0.record(torch.spyre.current_stream(0))\n"
        "s1 = torch.spyre.current_stream(1)\n"
        "if sys.argv[1] == 'wait': s1.wait_event(e)\n"
        "t1 = torch.spyre.Event(enable_timing=True); t1.record(s1)\n"
        "c = b + 1\n"
        "torch.spyre.synchronize(0); torch.spyre.synchronize(1)\n"
        "print(z0.elapsed_time(t0), z1.elapsed_time(t1), c.cpu().tolist())\n"
    )
    script = tmp_path / "wait.py"
    script.write_text(code)
    times = {}
    for mode in ("wait", "none"):
        proc = subprocess.run(
            [sys.executable, str(script), mode],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "SPYRE_CONFIG": str(config)},
        )
        assert proc.returncode == 0, proc.stderr
        card0, card1, c = proc.stdout.split(" ", 2)
        assert c.strip() == "[2.0, 2.0, 2.0, 2.0]"
        times[mode] = float(card0), float(card1)
    card0, card1 = times["wait"]
    assert card0 > 0.1  # ms: the chain took a while
    assert card0 <= card1 <= card0 + 0.01  # after card 0's event, by a read across PCIe
    card0, card1 = times["none"]
    assert card1 < card0 / 2
