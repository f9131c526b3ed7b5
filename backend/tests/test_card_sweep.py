"""The compiler plans for the configured card: over a sweep of PT array shapes, core counts,
memory bandwidths, scratchpads and ring widths, spyre-sim's kernels land near a roofline worked
out here from the config alone (never from the model's timing code):

- compute: the GEMM's multiply-adds at cores x corelets x pt_rows x pt_cols x pt_simd per cycle;
- memory: the compulsory bytes (each input read once, the output written once) at
  memory.bandwidth_gbps;
- ring: the same bytes over the ring of docs/architect-guide.md (stop 0 the PCIe endpoint, then
  the cores in order, controller j after core (j + 1) * cores / controllers - 1; every transfer
  takes the shorter way round, clockwise on a tie), every controller serving every core alike:
  the busiest link direction's bytes at ring.bytes_per_cycle.

A 16M-element add must land within 5 % of it everywhere, a 2048-cube fp16 GEMM within 15 %.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BINARY = ROOT / "build" / "tools" / "spyre_sim" / "spyre-sim"

GEMM_N = 2048
ADD_N = 16 << 20
FP16 = 2  # bytes

# One figure changed from the default card at a time (the default is the first point).
POINTS: list[dict[str, float]] = [
    {},
    {"chip.pt_rows": 16, "chip.pt_cols": 8},
    {"chip.pt_rows": 16, "chip.pt_cols": 16},
    {"chip.pt_rows": 4, "chip.pt_cols": 8},
    {"chip.cores": 8},
    {"chip.cores": 16},
    {"chip.cores": 64},
    {"memory.bandwidth_gbps": 51.2},
    {"memory.bandwidth_gbps": 102.4},
    {"memory.bandwidth_gbps": 409.6},
    {"chip.lx_bytes": 1 << 20},
    {"chip.lx_bytes": 4 << 20},
    {"chip.lx_bytes": 8 << 20},
    {"ring.bytes_per_cycle": 8},
    {"ring.bytes_per_cycle": 16},
    {"ring.bytes_per_cycle": 32},
    {"ring.bytes_per_cycle": 64},
]


def point_id(p: dict[str, float]) -> str:
    return ",".join(f"{k}={v}" for k, v in p.items()) or "default"


def run(point: dict[str, float], *kernel: str, check: bool = False) -> tuple[dict, dict]:
    """Runs a spyre-sim kernel on `point`; returns its summary and the simulated config."""
    if not BINARY.exists():
        pytest.fail(f"{BINARY} is missing: build it with `cmake --build build` (scripts/bootstrap.sh does)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPYRE_", "TORCH_SPYRE_"))}
    args = [str(BINARY), "--json", "--check" if check else "--no-check"]
    for key, value in point.items():
        args += ["--set", f"{key}={value}"]
    proc = subprocess.run([*args, *kernel], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, f"spyre-sim {' '.join(args[1:])} {' '.join(kernel)}:\n{proc.stderr}"
    summary = json.loads(proc.stdout)
    return summary, config_of(point)


def config_of(point: dict[str, float]) -> dict:
    """The default card's figures (docs/architect-guide.md) with `point` over them."""
    config = {
        "chip.cores": 32, "chip.corelets_per_core": 2, "chip.pt_rows": 8, "chip.pt_cols": 8, "chip.pt_simd": 8,
        "chip.clock_mhz": 1500, "memory.bandwidth_gbps": 204.8, "memory.controllers": 4, "ring.bytes_per_cycle": 128,
    }  # fmt: skip
    return {**config, **point}


def busiest_link_bytes(cores: int, controllers: int, load_bytes: float, store_bytes: float) -> float:
    """Bytes on the busiest ring link direction when every controller sends each core an equal
    share of `load_bytes` and receives an equal share of `store_bytes` from each."""
    kinds = ["pcie"]
    core_stops, controller_stops = [], []
    for core in range(cores):
        core_stops.append(len(kinds))
        kinds.append("core")
        while len(controller_stops) < controllers and (len(controller_stops) + 1) * cores // controllers <= core + 1:
            controller_stops.append(len(kinds))
            kinds.append("controller")
    stops = len(kinds)
    clockwise, counter = [0.0] * stops, [0.0] * stops  # link i joins stop i and i + 1

    def route(src: int, dst: int, n: float) -> None:
        ahead = (dst - src) % stops
        if ahead <= stops - ahead:
            for h in range(ahead):
                clockwise[(src + h) % stops] += n
        else:
            for h in range(stops - ahead):
                counter[(src - 1 - h) % stops] += n

    pairs = controllers * cores
    for m in controller_stops:
        for c in core_stops:
            route(m, c, load_bytes / pairs)
            route(c, m, store_bytes / pairs)
    return max(max(clockwise), max(counter))


def roofline_cycles(c: dict, flops: float, load_bytes: float, store_bytes: float) -> dict[str, float]:
    macs = c["chip.cores"] * c["chip.corelets_per_core"] * c["chip.pt_rows"] * c["chip.pt_cols"] * c["chip.pt_simd"]
    bytes_per_cycle = c["memory.bandwidth_gbps"] * 1e9 / (c["chip.clock_mhz"] * 1e6)
    ring = busiest_link_bytes(c["chip.cores"], c["memory.controllers"], load_bytes, store_bytes)
    return {
        "compute": flops / (2 * macs),
        "memory": (load_bytes + store_bytes) / bytes_per_cycle,
        "ring": ring / c["ring.bytes_per_cycle"],
    }


def gemm_ratio(point: dict[str, float]) -> tuple[float, dict, dict]:
    s, c = run(point, "gemm", "--m", str(GEMM_N), "--n", str(GEMM_N), "--k", str(GEMM_N), "--dtype", "f16")
    n = GEMM_N
    roof = roofline_cycles(c, 2.0 * n**3, 2 * n * n * FP16, n * n * FP16)
    return s["launch_cycles"][0] / max(roof.values()), roof, s


def add_ratio(point: dict[str, float]) -> tuple[float, dict, dict]:
    s, c = run(point, "elementwise", "--op", "add", "--numel", str(ADD_N), "--dtype", "f16")
    roof = roofline_cycles(c, 0.0, 2 * ADD_N * FP16, ADD_N * FP16)
    return s["launch_cycles"][0] / max(roof.values()), roof, s


def test_the_ring_model_matches_the_hand_count():
    """The busiest-link count on a tiny ring, by hand: stops P c0 c1 M (one controller after core 1).
    Loads of 4 bytes per core: M -> c1 is one hop back, M -> c0 is two hops back (the ring has four
    stops, so two hops either way: clockwise on a tie, M -> P -> c0)."""
    assert busiest_link_bytes(2, 1, 8.0, 0.0) == 4.0


@pytest.mark.parametrize("point", POINTS, ids=point_id)
def test_an_add_lands_within_5_percent_of_the_roofline(point):
    ratio, roof, s = add_ratio(point)
    print(f"add {point_id(point)}: {s['launch_cycles'][0]} cycles, roofline {roof}, ratio {ratio:.3f}")
    assert 0.98 <= ratio <= 1.05, (ratio, roof, s["stall"])


@pytest.mark.parametrize("point", POINTS, ids=point_id)
def test_a_gemm_lands_within_15_percent_of_the_roofline(point):
    ratio, roof, s = gemm_ratio(point)
    print(f"gemm {point_id(point)}: {s['launch_cycles'][0]} cycles, roofline {roof}, ratio {ratio:.3f}")
    assert 0.98 <= ratio <= 1.15, (ratio, roof, s["stall"])


def test_a_starved_ring_is_ring_time_in_the_stats_and_on_the_roofline_line():
    starved = {"ring.bytes_per_cycle": 8}
    _, _, add = add_ratio(starved)
    assert add["roofline"]["limit"] == "ring"
    stall = add["stall"]["cycles"]
    assert stall["ring"] > 0.9 * sum(stall.values()), stall
    _, _, gemm = gemm_ratio(starved)
    assert gemm["roofline"]["limit"] == "ring"
    stall = gemm["stall"]["cycles"]
    assert stall["ring"] > 10 * stall["memory"], stall
    # With the default ring, the same add waits on the memory channels, not the ring.
    _, _, wide = add_ratio({})
    assert wide["roofline"]["limit"] == "memory" and wide["stall"]["cycles"]["ring"] == 0


@pytest.mark.parametrize("lx", [64 << 10, 256 << 10, 1 << 20, 8 << 20])
def test_a_gemm_is_right_on_every_scratchpad(lx):
    """Smaller scratchpads take smaller tiles; every one computes the golden model's result."""
    s, _ = run({"chip.lx_bytes": lx}, "gemm", "--m", "300", "--n", "260", "--k", "520", "--dtype", "f16", check=True)
    assert s["check"]["status"] == "passed", s["check"]


@pytest.mark.parametrize("point", POINTS, ids=point_id)
def test_a_gemm_is_right_on_every_card(point):
    """Each card's plan (grid, strips, pieces, tiles) computes the golden model's result, on a
    shape small enough to check (K a multiple of 128, so the resident-B plan may be taken)."""
    s, _ = run(point, "gemm", "--m", "1024", "--n", "512", "--k", "1152", "--dtype", "f16", check=True)
    assert s["check"]["status"] == "passed", s["check"]
