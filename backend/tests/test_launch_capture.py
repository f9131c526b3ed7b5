"""One launch captured (torch_spyre.debug.capture_launch) and replayed alone (`spyre-sim launch`):
the replay must leave the captured output bit for bit on the capture's config and on a changed
one (whose cycles move), refuse a card with other fp16 numerics, and say when the output differs.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import torch
import torch_spyre  # noqa: F401
from conftest import ROOT
from torch_spyre import _C
from torch_spyre.debug import capture_launch

BINARY = ROOT / "build" / "tools" / "spyre_sim" / "spyre-sim"
IEEE = ["--set", "chip.fp16_format=ieee"]  # the suite's card keeps fp16 as IEEE half


def _launch(path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPYRE_", "TORCH_SPYRE_"))}
    return subprocess.run(
        [str(BINARY), "launch", str(path), *args], capture_output=True, text=True, env=env, timeout=300
    )


def _summary(path, *args: str) -> dict:
    p = _launch(path, *args, "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout)


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    d = tmp_path_factory.mktemp("launches")
    torch.manual_seed(3)
    x = torch.randn(40, 24)
    idx = torch.tensor([5, 0, 39, 5, 17])
    a, b = torch.randn(64, 48), torch.randn(48, 32)
    xs, idxs, as_, bs = x.to("spyre"), idx.to("spyre"), a.to("spyre"), b.to("spyre")
    with capture_launch(d / "index_select.launch", op="aten::index_select"):
        y = xs.index_select(0, idxs)
    with capture_launch(d / "mm.launch", op="aten::mm"):
        z = as_ @ bs
    torch.testing.assert_close(y.cpu(), x.index_select(0, idx))
    torch.testing.assert_close(z.cpu(), a @ b, atol=1e-4, rtol=1e-4)
    return d


@pytest.mark.parametrize("name,op", [("index_select", "aten::index_select"), ("mm", "aten::mm")])
def test_a_captured_launch_replays_bit_for_bit_on_its_config_and_on_another(captured, name, op):
    path = captured / f"{name}.launch"
    own = _summary(path, *IEEE)
    assert own["identical"] and own["differing_bytes"] == 0 and own["bytes"] > 0, own
    assert own["op"] == op and own["error"] == "" and own["cycles"] > 0
    slower = _summary(path, *IEEE, "--set", "memory.bandwidth_gbps=12.8")
    assert slower["identical"], slower
    assert slower["config_hash"] != own["config_hash"]
    assert slower["cycles"] > own["cycles"]  # a sixteenth of the bandwidth: the loads take longer


def test_the_replay_has_a_trace_of_every_instruction(captured, tmp_path):
    trace = tmp_path / "launch.json"
    s = _summary(captured / "mm.launch", *IEEE, "--trace", str(trace))
    assert s["identical"] and s["trace"] == str(trace)
    events = json.loads(trace.read_text())["traceEvents"]
    launches = [e for e in events if e.get("ph") == "X" and e.get("args", {}).get("op") == "aten::mm"]
    assert len(launches) == 1
    assert any("instruction" in e.get("args", {}) for e in events if e.get("ph") == "X")


def test_a_changed_output_and_other_numerics_are_reported(captured, tmp_path):
    data = bytearray((captured / "index_select.launch").read_bytes())
    data[-1] ^= 0xFF  # the last byte of the last block's captured output
    bad = tmp_path / "bad.launch"
    bad.write_bytes(bytes(data))
    p = _launch(bad, *IEEE)
    assert p.returncode == 1
    assert "1 of" in p.stdout and "differ from the capture's (first: block" in p.stdout, p.stdout
    p = _launch(captured / "index_select.launch")  # the default card keeps fp16 as DLFloat16
    assert p.returncode == 1
    assert "keeps fp16 as IEEE half, and this config keeps it as DLFloat16 (chip.fp16_format)" in p.stderr


def test_a_file_that_is_no_capture_is_refused(tmp_path):
    junk = tmp_path / "junk.launch"
    junk.write_bytes(b"not a launch")
    p = _launch(junk)
    assert p.returncode == 1 and "is not a launch capture" in p.stderr


def test_capture_launch_says_when_nothing_was_captured(tmp_path):
    with pytest.raises(ValueError, match="no launch of aten::index_select ran on spyre:0 inside the block"):
        with capture_launch(tmp_path / "none.launch", op="aten::index_select"):
            torch.ones(3, device="spyre").sum().item()
    assert not (tmp_path / "none.launch").exists()


def test_a_launch_captured_on_the_default_card_replays_on_the_default_config(tmp_path):
    # The default card keeps fp16 as DLFloat16: an fp16 matmul captured there replays bit for bit
    # with no options at all, and on a card with a slower clock.
    from conftest import run_python

    path = tmp_path / "mm16.launch"
    code = (
        "import torch, torch_spyre\n"
        "from torch_spyre.debug import capture_launch\n"
        "a = torch.randn(64, 96).half().to('spyre'); b = torch.randn(96, 48).half().to('spyre')\n"
        f"with capture_launch({str(path)!r}, op='aten::mm'):\n"
        "    c = a @ b\n"
        "print(c.float().abs().sum().item() > 0)\n"
    )
    proc = run_python(code, env={"SPYRE_CONFIG": ""})
    assert proc.returncode == 0, proc.stderr
    own = _summary(path)
    assert own["identical"] and own["op"] == "aten::mm", own
    slower = _summary(path, "--set", "chip.clock_mhz=1000")
    assert slower["identical"] and slower["config_hash"] != own["config_hash"], slower


def test_the_replay_dumps_each_core_s_scratchpad_as_it_ends(captured, tmp_path):
    # The gathered rows of x.index_select(0, idx) pass through the scratchpad of the cores that
    # gather them: the dump of each core's final scratchpad holds them, byte for byte.
    p = _launch(captured / "index_select.launch", *IEEE, "--dump-scratchpad", str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    dump = json.loads((tmp_path / "dump.json").read_text())
    assert dump["op"] == "aten::index_select" and dump["cores"], dump
    lx = b""
    for core in dump["cores"]:
        assert len(core["registers"]) == 16
        data = (tmp_path / core["scratchpad"]).read_bytes()
        assert len(data) == int(_C._compile_target(0)["lx_bytes"])
        lx += data
    torch.manual_seed(3)
    x = torch.randn(40, 24)
    for row in x.index_select(0, torch.tensor([5, 0, 39, 5, 17])):
        assert row.numpy().tobytes() in lx
    # A core stopped at an instruction it never reaches is an error that names it.
    p = _launch(captured / "index_select.launch", *IEEE, "--dump-scratchpad", str(tmp_path), "--at", "100000")
    assert p.returncode == 1 and "did not reach instruction 100000" in p.stderr, p.stderr
