"""Capture and replay: $SPYRE_CAPTURE records a PyTorch run at the wire, and `spyre-sim replay`
plays it with no PyTorch and no driver. On the capturing config the replay must reproduce the live
run's device cycles exactly (the live run's own stats are the reference), with every DMA write
(completions, fences, results) bit for bit the same; on another config it must still run to the
end, from the captured bytes alone, with the timing that config gives."""

from __future__ import annotations

import json
import pathlib
import struct
import subprocess

import pytest
from conftest import run_python

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPYRE_SIM = ROOT / "build" / "tools" / "spyre_sim" / "spyre-sim"

# Two streams with an event between them, host copies both ways, a graph of ops on each stream.
WORKLOAD = """
import torch, torch_spyre
torch_spyre.set_cpu_fallback("error")
torch.manual_seed(0)
a = torch.randn(512, 512).to("spyre")
b = torch.randn(512, 512).pin_memory().to("spyre", non_blocking=True)
side = torch.spyre.Stream()
done = torch.spyre.Event()
with torch.spyre.stream(side):
    c = (b @ b).relu()
    done.record()
d = torch.nn.functional.softmax(a, dim=-1) * 3
torch.spyre.current_stream().wait_event(done)
e = (c + d).sum(0)
print(float(e.cpu().sum()))
"""


def _replay(capture: pathlib.Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    assert SPYRE_SIM.exists(), f"{SPYRE_SIM} is missing: build it with `cmake --build build`"
    p = subprocess.run(
        [str(SPYRE_SIM), "replay", str(capture), "--json", *args], capture_output=True, text=True, timeout=300
    )
    return p, (json.loads(p.stdout) if p.stdout.strip().startswith("{") else {})


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    folder = tmp_path_factory.mktemp("capture")
    capture, stats = folder / "run.cap", folder / "stats.json"
    proc = run_python(WORKLOAD, env={"SPYRE_CAPTURE": str(capture), "SPYRE_STATS": str(stats)})
    assert proc.returncode == 0, proc.stderr
    return capture, json.loads(stats.read_text())


def test_replay_on_the_capturing_config_reproduces_the_cycles_exactly(captured, tmp_path):
    capture, live = captured
    stats = tmp_path / "replay.json"
    p, summary = _replay(capture, "--stats", str(stats))
    assert p.returncode == 0, p.stderr
    assert summary["same_config"] is True
    assert summary["config_hash"] == live["config_hash"]
    assert summary["cycles"] == [live["cards"][0]["cycles"]] == summary["captured_cycles"]
    assert summary["missing_reads"] == 0 and summary["diverged_writes"] == 0
    assert summary["host_writes"] > 0
    replayed = json.loads(stats.read_text())["cards"][0]
    card = live["cards"][0]
    # The same work, command for command, core for core.
    for key in ("commands", "flops", "bytes", "stall", "cores", "launches", "memory_channels", "ring_links"):
        assert replayed[key] == card[key], key


def test_replay_on_another_config_runs_the_same_work_with_its_timing(captured):
    capture, live = captured
    card = live["cards"][0]
    p, slow = _replay(capture, "--set", "memory.bandwidth_gbps=51.2")
    assert p.returncode == 0, p.stderr
    assert slow["same_config"] is False
    assert slow["missing_reads"] == 0  # every byte the card asked for was in the capture
    assert slow["flops"] == card["flops"] and slow["launches"] == card["commands"]["launch"]
    assert slow["cycles"][0] > card["cycles"]
    p, fast = _replay(capture, "--set", "memory.bandwidth_gbps=409.6", "--set", "pcie.bandwidth_gbps=128")
    assert p.returncode == 0, p.stderr
    assert fast["cycles"][0] < card["cycles"]


def test_a_damaged_capture_is_refused_with_its_reason(captured, tmp_path):
    capture, _ = captured
    cut = tmp_path / "cut.cap"
    cut.write_bytes(capture.read_bytes()[: capture.stat().st_size // 2])
    p, _ = _replay(cut)
    assert p.returncode == 1
    assert "spyre-sim: capture: " in p.stderr and str(cut) in p.stderr
    junk = tmp_path / "junk.cap"
    junk.write_bytes(b"not a capture at all")
    p, _ = _replay(junk)
    assert p.returncode == 1 and "is not a Spyre capture file" in p.stderr
    # A record that claims more bytes than the whole file (index bytes, 2^60 of them) is refused
    # before anything is allocated for it.
    data = capture.read_bytes()
    header = 16 + int.from_bytes(data[12:16], "little")  # magic, version, the config's length and text
    huge = tmp_path / "huge.cap"
    huge.write_bytes(data[:header] + struct.pack("<BBHIQQQQQ", 6, 1, 0, 0, 0, 0, 0, 1 << 60, 0))
    p, _ = _replay(huge)
    assert p.returncode == 1 and "is truncated" in p.stderr
    # Indices of a core no card has (its number once sized a table of that many cores).
    stray = tmp_path / "stray.cap"
    stray.write_bytes(
        data[:header] + struct.pack("<BBHIQQQQQ", 6, 1, 0, 0, 0, 0, 1 << 32, 8, 0) + bytes(8) + data[header:]
    )
    p, _ = _replay(stray)
    assert p.returncode == 1 and "has indices of core 4294967296" in p.stderr
