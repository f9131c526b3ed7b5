"""The hardware config is strict (sim/src/config.cpp): a number outside its key's range, a fraction
for an integer key, a value past the field's type and a key given twice are refused at load, with
the key, the range and the value named; the ranges in docs/architect-guide.md are the code's."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BINARY = ROOT / "build" / "tools" / "spyre_sim" / "spyre-sim"


def spyre_sim(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPYRE_", "TORCH_SPYRE_"))}
    cmd = [str(BINARY), *args, "gemm", "--m", "8", "--k", "8", "--n", "8", "--no-check"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize(
    "setting, message",
    [
        # Each ran before as some other card: 16 cores, 15 (a sweep's row said 15.5), 1, 1500 MHz,
        # a 49,150 TFLOP/s peak, a GEMM of 36e9 cycles that no watchdog stopped.
        ("chip.cores=16.7", "'chip.cores' must be an integer in 1..64 (got 16.7)"),
        ("chip.cores=15.5", "'chip.cores' must be an integer in 1..64 (got 15.5)"),
        ("chip.cores=4294967297", "'chip.cores' must be an integer in 1..64 (got 4294967297)"),
        ("chip.clock_mhz=1500.9", "'chip.clock_mhz' must be an integer in 1..10000 (got 1500.9)"),
        ("chip.corelets_per_core=1000", "'chip.corelets_per_core' must be an integer in 1..8 (got 1000)"),
        ("memory.latency_ns=4e9", "'memory.latency_ns' must be an integer in 0..1000000 (got 4000000000.0)"),
        ("memory.bandwidth_gbps=0", "'memory.bandwidth_gbps' must be a number in 0.001..100000 (got 0)"),
        ("faults.hang_core=-2", "'faults.hang_core' must be an integer in -1..63 (got -2)"),
        ("chip.cores=-3", "'chip.cores' must be an integer in 1..64 (got -3)"),
        ("memory.channels=-16", "'memory.channels' must be an integer in 1..1024 (got -16)"),
        ("sim.host_memory_bytes=1e30", "'sim.host_memory_bytes' must be an integer in 0..18446744073709551615"),
    ],
)
def test_a_nonsense_number_is_refused_with_its_key_range_and_value(setting, message):
    p = spyre_sim("--set", setting)
    assert p.returncode != 0 and message in p.stderr, p.stderr


def test_an_integral_number_written_as_a_float_is_taken():
    assert spyre_sim("--set", "chip.cores=16.0").returncode == 0


def test_a_key_given_twice_is_refused_in_a_file_and_in_spyre_config(tmp_path):
    cfg = tmp_path / "twice.json"
    cfg.write_text('{"chip": {"cores": 8, "pt_rows": 8, "cores": 16}}')
    p = spyre_sim("--config", str(cfg))
    assert p.returncode != 0 and "key 'chip.cores' is given twice" in p.stderr, p.stderr
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SPYRE_")}, "SPYRE_CONFIG": str(cfg)}
    q = subprocess.run([str(BINARY), "gemm", "--m", "8", "--k", "8", "--n", "8"], capture_output=True, text=True,
                       env=env, timeout=120)  # fmt: skip
    assert q.returncode != 0 and "given twice" in q.stderr, q.stderr


def _code_ranges() -> dict[str, str]:
    """key -> 'lo..hi' as from_tree checks them (its constants evaluated)."""
    src = (ROOT / "sim" / "src" / "config.cpp").read_text(encoding="utf-8")
    consts = {"kMax": 2**64 - 1, "kMiB": 2**20, "kGiB": 2**30}
    found = re.findall(r'get\(j, "(\w+)", "(\w+)", c\.[\w.]+, ([^,)]+), ([^,)]+)\);', src)
    assert len(found) > 40, "from_tree's calls no longer parse here: update this test"

    def show(v) -> str:
        return str(int(v)) if float(v).is_integer() else repr(float(v))

    return {f"{s}.{k}": f"{show(eval(lo, {}, consts))}..{show(eval(hi, {}, consts))}" for s, k, lo, hi in found}


def test_the_architect_guide_lists_the_ranges_the_loader_checks():
    doc = (ROOT / "docs" / "architect-guide.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| ((?:`[a-z0-9_.]+`(?:, )?)+) \| [^|]* \| ([^|]*) \|", doc, re.M)
    listed = {}
    for keys, cell in rows:
        for key in re.findall(r"`([^`]+)`", keys):
            listed[key] = cell.strip()
    code = _code_ranges()
    missing = sorted(k for k in code if k not in listed and not k.startswith("faults."))
    assert not missing, f"keys with a range that docs/architect-guide.md does not list: {missing}"
    wrong = {k: (listed[k], code[k]) for k in code if k in listed and listed[k] != code[k]}
    assert not wrong, f"ranges that differ (doc, code): {wrong}"
