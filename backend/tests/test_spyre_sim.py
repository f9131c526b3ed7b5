"""spyre-sim, the architects' command-line tool (tools/spyre_sim): its GEMM timing against
analytical bounds and scaling laws worked out here from the default hardware figures, not from
the tool's own summary.

Default card (docs/architect-guide.md): 32 cores x 2 corelets x an 8x8 PT array x 8 fp16 lanes,
2 flops per multiply-add, so 65536 fp16 flops per cycle; fp32 runs at a quarter of that.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BINARY = ROOT / "build" / "tools" / "spyre_sim" / "spyre-sim"

FP16_FLOPS_PER_CYCLE_PER_CORE = 2 * 8 * 8 * 8 * 2  # corelets * rows * cols * lanes * 2
FP32_RATE = 0.25


def peak_flops_per_cycle(cores: int, dtype: str) -> float:
    return cores * FP16_FLOPS_PER_CYCLE_PER_CORE * (FP32_RATE if dtype == "f32" else 1.0)


def spyre_sim(*args: str) -> dict:
    """Runs spyre-sim with `args` and --json in a clean environment; returns its summary."""
    if not BINARY.exists():
        pytest.fail(f"{BINARY} is missing: build it with `cmake --build build` (scripts/bootstrap.sh does)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPYRE_", "TORCH_SPYRE_"))}
    p = subprocess.run([str(BINARY), *args, "--json"], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, f"spyre-sim {' '.join(args)} exited {p.returncode}:\n{p.stderr}"
    return json.loads(p.stdout)


def gemm(n: int, dtype: str, cores: int = 32, *extra: str) -> dict:
    s = spyre_sim(
        "gemm", "--m", str(n), "--k", str(n), "--n", str(n), "--dtype", dtype, *extra, "--set", f"chip.cores={cores}"
    )
    assert s["kernel"] == "gemm" and s["shape"] == {"m": n, "k": n, "n": n} and s["dtype"] == dtype
    assert len(s["launch_cycles"]) == 1 and s["cycles"] == s["launch_cycles"][0] > 0
    return s


def test_gemm_takes_at_least_its_compute_bound_and_matches_the_golden_model():
    m, k, n = 512, 384, 256
    s = spyre_sim("gemm", "--m", str(m), "--k", str(k), "--n", str(n), "--dtype", "f16", "--check")
    bound = 2 * m * n * k / peak_flops_per_cycle(32, "f16")  # 3072 cycles
    assert s["cycles"] >= bound
    assert s["check"]["status"] == "passed" and s["check"]["elements"] == m * n
    assert s["check"]["mismatches"] == 0 and s["check"]["worst_ratio"] <= 1


@pytest.fixture(scope="module")
def f32_gemms() -> dict[tuple[int, int], dict]:
    """fp32 GEMMs (size, cores): compute-bound on the card they run on."""
    runs = {(n, c): gemm(n, "f32", c, "--no-check") for n, c in [(1024, 8), (2048, 8), (2048, 32)]}
    for (n, c), s in runs.items():
        assert s["cycles"] >= 2 * n**3 / peak_flops_per_cycle(c, "f32"), (n, c)
    return runs


def test_doubling_a_compute_bound_gemm_multiplies_its_cycles_by_eight(f32_gemms):
    # On an 8-core card a 1024^3 fp32 GEMM already keeps the PT arrays busy: both sizes are
    # compute-bound there, so 8x the multiply-adds take about 8x the cycles.
    ratio = f32_gemms[(2048, 8)]["cycles"] / f32_gemms[(1024, 8)]["cycles"]
    assert 8 / 1.15 <= ratio <= 8 * 1.15, ratio


def test_a_quarter_of_the_cores_makes_a_compute_bound_gemm_four_times_slower(f32_gemms):
    ratio = f32_gemms[(2048, 8)]["cycles"] / f32_gemms[(2048, 32)]["cycles"]
    assert 4 / 1.2 <= ratio <= 4 * 1.2, ratio


def test_a_bad_argument_fails_with_a_clear_message():
    p = subprocess.run([str(BINARY), "gemm", "--m", "0"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.startswith("spyre-sim: --m: Value 0 not in range 1 to")


def test_the_watchdog_counts_a_short_program_of_long_waits():
    """A GEMM of a few instructions per core whose memory waits outlast firmware.watchdog_cycles is
    stopped by the watchdog: the budget counts waits as well as instructions (it was looked at only
    every 256 instructions, so this program ran 569k cycles past a 20k budget)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPYRE_", "TORCH_SPYRE_"))}
    slow = ["--set", "memory.bandwidth_gbps=0.1", "gemm", "--m", "64", "--k", "64", "--n", "64", "--no-check"]
    p = subprocess.run([str(BINARY), "--set", "firmware.watchdog_cycles=20000", *slow], capture_output=True,
                       text=True, env=env, timeout=120)  # fmt: skip
    assert p.returncode != 0 and "watchdog: program ran past its cycle budget" in p.stderr, p.stderr
    q = subprocess.run([str(BINARY), *slow], capture_output=True, text=True, env=env, timeout=120)
    assert q.returncode == 0, q.stderr  # the default budget lets the same run finish


def test_listing_prints_the_kernels_decoded_program_without_running_it(tmp_path):
    stats = tmp_path / "stats.json"
    argv = ["--listing", "--stats", str(stats), "gemm", "--m", "64", "--k", "32", "--n", "16", "--dtype", "f32"]
    p = subprocess.run(
        [str(BINARY), *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("; mm f32 64x32x16")
    assert lines[1].startswith("; ") and " instructions, " in lines[1]
    assert lines[2] == "; op 0: mm f32 64x32x16"  # the graph's one op heads its code
    numbered = [line.split(maxsplit=1) for line in lines[3:]]
    assert [int(n) for n, _ in numbered] == list(range(len(numbered)))  # every instruction, in order
    assert any(text.startswith("ARG ") and text.endswith("; out f32 [64, 16]") for _, text in numbered)
    assert any(text.startswith("MATMUL   f32 ") for _, text in numbered)
    assert any(text.startswith("LOAD ") for _, text in numbered) and numbered[-1][1] == "END"
    assert not stats.exists() or json.loads(stats.read_text())["cards"][0]["launches"] == []  # nothing ran
