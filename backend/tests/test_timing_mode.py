"""Timing mode (`sim.mode: "timing"`): every instruction and transfer is timed as in the timed mode,
but the cores do no floating-point arithmetic. Its cycles, stats and trace must be the timed mode's
exactly (the timed run is the reference): for a kernel of spyre-sim, and for captured PyTorch runs
replayed, a Llama training step and the forward of a mixture of experts whose routing is computed
on the card and decides which rows its gathers and scatters move (a replay in timing mode takes
those indices from the capture); and live, for a run whose indices come from the host."""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest
from conftest import IEEE_FP16, run_python

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPYRE_SIM = ROOT / "build" / "tools" / "spyre_sim" / "spyre-sim"
TIMING = ("--set", "sim.mode=timing")

# What the stats of a run hold besides its config: every one must be the timed run's.
CARD_KEYS = ("cycles", "commands", "flops", "bytes", "stall", "cores", "launches", "memory_channels", "ring_links")

_SETUP = """
import sys, torch, torch_spyre
sys.path.insert(0, "backend/tests")
from test_models import _batches, _llama_config, _train, moe_llama
torch_spyre.set_cpu_fallback("error")
torch.manual_seed(0)
"""
WORKLOADS = {
    # One AdamW step of the Llama decoder: embedding gathers by token id, attention, backward.
    "llama training step": _SETUP
    + """
transformers, config = _llama_config()
model = transformers.LlamaForCausalLM(config)
print(_train(model, _batches(128, 16)[:1], "spyre"))
""",
    # A forward whose top-2 routing (softmax, topk, cumsum on the card) picks the rows that
    # index_add and the gathers move.
    "moe forward": _SETUP
    + """
model = moe_llama().to("spyre").eval()
tokens = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    print(float(model(tokens.to("spyre")).logits.float().abs().sum()))
""",
}


def _spyre_sim(*args: str) -> dict:
    assert SPYRE_SIM.exists(), f"{SPYRE_SIM} is missing: build it with `cmake --build build`"
    p = subprocess.run([str(SPYRE_SIM), *args, "--json"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _reports(folder: pathlib.Path, name: str) -> tuple[str, ...]:
    """The options that write a run's stats and trace into `folder`, under `name`."""
    return ("--stats", str(folder / f"{name}.stats.json"), "--trace", str(folder / f"{name}.trace.json"))


def _assert_same_run(folder: pathlib.Path, timed: str, timing: str):
    """The two runs' stats agree on everything but the config, and their traces event for event."""
    a, b = (json.loads((folder / f"{n}.stats.json").read_text()) for n in (timed, timing))
    assert a["config"]["sim"]["mode"] == "timed" and b["config"]["sim"]["mode"] == "timing"
    for key in CARD_KEYS:
        assert b["cards"][0][key] == a["cards"][0][key], key
    ta, tb = (json.loads((folder / f"{n}.trace.json").read_text()) for n in (timed, timing))
    events = [e for e in ta["traceEvents"] if e.get("ph") != "M"]
    assert len(events) > 100
    assert [e for e in tb["traceEvents"] if e.get("ph") != "M"] == events


def test_a_gemm_in_timing_mode_takes_the_timed_cycles_stats_and_trace(tmp_path):
    shape = ("gemm", "--m", "384", "--k", "256", "--n", "320", "--dtype", "f16")
    timed = _spyre_sim(*shape, *_reports(tmp_path, "timed"))
    timing = _spyre_sim(*shape, *TIMING, *_reports(tmp_path, "timing"))
    assert timed["check"]["status"] == "passed"  # the timed run computed the product
    assert timing["check"]["status"] == "skipped" and "timing" in timing["check"]["why"]
    assert timing["cycles"] == timed["cycles"] and timing["launch_cycles"] == timed["launch_cycles"]
    _assert_same_run(tmp_path, "timed", "timing")


def test_check_is_refused_in_timing_mode():
    p = subprocess.run(
        [str(SPYRE_SIM), "gemm", "--m", "64", "--k", "64", "--n", "64", "--check", *TIMING],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 1
    assert "--check" in p.stderr and "timing" in p.stderr


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_captured_run_replays_in_timing_mode_with_the_timed_cycles_stats_and_trace(workload, tmp_path):
    capture = tmp_path / "run.cap"
    proc = run_python(WORKLOADS[workload], env={"SPYRE_CAPTURE": str(capture)}, timeout=600)
    assert proc.returncode == 0, proc.stderr
    timed = _spyre_sim("replay", str(capture), *_reports(tmp_path, "timed"))
    timing = _spyre_sim("replay", str(capture), *TIMING, *_reports(tmp_path, "timing"))
    assert timed["same_config"] and timing["same_config"] and timing["mode"] == "timing"
    assert timed["cycles"] == timed["captured_cycles"]
    assert timing["cycles"] == timed["cycles"]
    # Every gather and scatter indexed with the captured run's indices.
    assert timing["played_indices"] > 0 and timing["missing_indices"] == 0
    assert timing["diverged_writes"] > 0  # it computed no values: what it wrote back differs
    _assert_same_run(tmp_path, "timed", "timing")


def test_a_live_run_whose_indices_come_from_the_host_takes_the_timed_cycles_stats_and_trace(tmp_path):
    # The Llama step's gathers index with token ids copied from the host: timing mode moves their
    # (integer) bytes, and nothing it leaves out can change a time.
    for mode in ("timed", "timing"):
        config = tmp_path / f"{mode}.json"
        config.write_text(json.dumps({**json.loads(IEEE_FP16.read_text()), "sim": {"mode": mode}}))
        env = {
            "SPYRE_CONFIG": str(config),
            "SPYRE_STATS": str(tmp_path / f"{mode}.stats.json"),
            "SPYRE_TRACE": str(tmp_path / f"{mode}.trace.json"),
        }
        proc = run_python(WORKLOADS["llama training step"], env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr
    _assert_same_run(tmp_path, "timed", "timing")


def test_a_functional_capture_replays_in_timing_mode_as_another_config(tmp_path):
    # Its cycles count instructions, not time: a timing replay times them, and is not held to them.
    config, capture = tmp_path / "functional.json", tmp_path / "run.cap"
    config.write_text(json.dumps({**json.loads(IEEE_FP16.read_text()), "sim": {"mode": "functional"}}))
    code = "import torch, torch_spyre\nx = torch.ones(64, 64).to('spyre')\nprint(float((x @ x).sum()))"
    proc = run_python(code, env={"SPYRE_CONFIG": str(config), "SPYRE_CAPTURE": str(capture)})
    assert proc.returncode == 0, proc.stderr
    timing = _spyre_sim("replay", str(capture), *TIMING)
    assert timing["same_config"] is False
    assert timing["cycles"][0] > timing["captured_cycles"][0]
