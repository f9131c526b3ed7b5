"""The architect's tools (spyre_arch): spyre-sweep and spyre-plot on a real simulated workload, and
their parts (stats flattening, grids, trace binning, roofline points) on hand-made inputs.

A Llama-style decoder forward (scripts/workloads/llama_forward.py) is captured once per module
($SPYRE_CAPTURE), and the sweep replays it with spyre-sim on 24 configs: its table is checked
against the grid, the configs the simulator reports, the captured run's flop count and the physics
of memory bandwidth; then resumed, and repeated in full on a local Ray cluster started here, which
must give the same table. The plots are drawn from a torch run's stats and trace and from the sweep.
"""

from __future__ import annotations

import itertools
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

import pandas as pd
import pytest
from conftest import run_script
from spyre_arch import analysis, grid, stats, trace, trace_cli
from spyre_arch.grid import GridError
from spyre_arch.sweep import HOST_COLUMNS, read_table

BIN = pathlib.Path(sys.executable).parent
ROOT = pathlib.Path(__file__).resolve().parents[2]
SPYRE_SIM = ROOT / "build" / "tools" / "spyre_sim" / "spyre-sim"
WORKLOAD = """\
import torch
import torch_spyre  # noqa: F401

a = torch.arange(256 * 256, dtype=torch.float32).reshape(256, 256) / 1000
x = a.to("spyre")
torch.spyre.synchronize()  # each step on an idle card: device time does not depend on the host
y = x + x
torch.spyre.synchronize()
z = x @ x
torch.spyre.synchronize()
assert torch.equal(y.cpu(), a + a)
torch.testing.assert_close(z.cpu(), a @ a, rtol=1e-4, atol=1e-2)
"""
# The grid, written the way the test expects it; the command line gives the bandwidths as a range.
# A replay keeps the captured programs, so the core count (their core masks) stays; the PT array,
# the ring and LPDDR5 may change.
BANDWIDTHS = [51.2, 102.4, 204.8]
RINGS = [64, 128]
ROWS = [4, 8, 16, 32]
NAMES = ["memory.bandwidth_gbps", "ring.bytes_per_cycle", "chip.pt_rows"]
GRID_ARGS = [
    "--param", "memory.bandwidth_gbps=51.2:204.8:*2",
    "--param", "ring.bytes_per_cycle=64,128",
    "--param", "chip.pt_rows=4,8,16,32",
]  # fmt: skip
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def tool_env(**extra: str) -> dict[str, str]:
    """The caller's environment without the test session's card settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPYRE_", "TORCH_SPYRE_"))}
    env.update(extra)
    return env


def run_tool(name: str, args: list[str], cwd: pathlib.Path, timeout: float = 300, **env: str):
    exe = BIN / name
    assert exe.exists(), f"{exe} is missing: reinstall with bash scripts/bootstrap.sh"
    return subprocess.run(
        [str(exe), *args], cwd=cwd, env=tool_env(**env), capture_output=True, text=True, timeout=timeout
    )


def sweep_args(out: str, *extra: str, grid_args: list[str] = GRID_ARGS) -> list[str]:
    """A sweep whose workload replays the module's capture (llama.cap in the work folder)."""
    return ["-o", out, "--no-progress", *grid_args, *extra, "--", str(SPYRE_SIM), "replay", "llama.cap"]


def check_png(path: pathlib.Path) -> None:
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_MAGIC, path
    height, width, _ = matplotlib.image.imread(path).shape
    assert height > 100 and width > 100, path


def svg_text(path: pathlib.Path) -> str:
    """Parses an SVG (so it must be well-formed SVG) and returns its text content."""
    root = ET.parse(path).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg", path
    return " ".join(t.strip() for t in root.itertext() if t.strip())


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> pathlib.Path:
    """The work folder: the torch workload, and a capture of a 2-layer Llama forward with its stats."""
    assert SPYRE_SIM.exists(), f"{SPYRE_SIM} is missing: build it with `cmake --build build`"
    folder = tmp_path_factory.mktemp("arch")
    (folder / "workload.py").write_text(WORKLOAD)
    env = {"SPYRE_CAPTURE": str(folder / "llama.cap"), "SPYRE_STATS": str(folder / "llama_stats.json")}
    args = ["--layers", "2", "--seq", "64"]
    run = run_script(ROOT / "scripts" / "workloads" / "llama_forward.py", env=env, args=args)
    assert run.returncode == 0, run.stderr
    return folder


@pytest.fixture(scope="module")
def local_sweep(workdir):
    started = time.monotonic()
    proc = run_tool("spyre-sweep", sweep_args("local", "-j", "2", "--plot"), workdir)
    print(f"local sweep of 24 points: {time.monotonic() - started:.1f} s")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table, params = read_table(workdir / "local" / "sweep.parquet")
    return table, params, proc


def test_sweep_table_covers_the_grid_with_the_configs_the_card_ran(workdir, local_sweep):
    table, params, proc = local_sweep
    assert "24 points: 0 already done, 24 run, 0 failed" in proc.stdout
    assert params == NAMES
    assert list(table["status"]) == ["ok"] * 24, table["error"].dropna().tolist()
    # Sorted by the parameter values, first one slowest: the product of the sorted value lists.
    assert list(table[NAMES].itertuples(index=False, name=None)) == list(itertools.product(BANDWIDTHS, RINGS, ROWS))
    assert table["config_hash"].nunique() == 24 and table["point_key"].nunique() == 24
    captured = json.loads((workdir / "llama_stats.json").read_text())["cards"][0]
    for _, row in table.iterrows():
        # What the simulator itself says it ran, from the point's own stats file.
        report = json.loads((workdir / "local" / "points" / row["point_key"][:16] / "stats.json").read_text())
        assert report["config_hash"] == row["config_hash"]
        assert report["config"]["memory"]["bandwidth_gbps"] == row["memory.bandwidth_gbps"]
        assert report["config"]["ring"]["bytes_per_cycle"] == row["ring.bytes_per_cycle"]
        assert report["config"]["chip"]["pt_rows"] == row["chip.pt_rows"]
        assert row["flops"] == captured["flops"]  # the same programs, whatever the config
        assert row["cycles"] == report["cards"][0]["cycles"]
    # The point with the capture's own config reproduces the captured run's cycles.
    own = table[(table["memory.bandwidth_gbps"] == 204.8) & (table["ring.bytes_per_cycle"] == 128)]
    assert own[own["chip.pt_rows"] == 8]["cycles"].tolist() == [captured["cycles"]]
    assert (table["host_seconds"] > 0).all()


def test_halving_memory_bandwidth_slows_the_forward(local_sweep):
    table, _, _ = local_sweep
    for (ring, rows), group in table.groupby(["ring.bytes_per_cycle", "chip.pt_rows"]):
        cycles = group.sort_values("memory.bandwidth_gbps", ascending=False)["cycles"].tolist()
        # 204.8 -> 102.4 -> 51.2 GB/s: every halving costs cycles.
        assert cycles[0] < cycles[1] < cycles[2], (ring, rows, cycles)
    # A bigger PT array never slows it down.
    for (bandwidth, ring), group in table.groupby(["memory.bandwidth_gbps", "ring.bytes_per_cycle"]):
        cycles = group.sort_values("chip.pt_rows")["cycles"].tolist()
        assert cycles == sorted(cycles, reverse=True), (bandwidth, ring, cycles)


def test_sweep_writes_curves_per_parameter(workdir, local_sweep):
    folder = workdir / "local" / "plots"
    for name in NAMES:
        check_png(folder / f"sweep_launch_cycles_vs_{name}.png")
        text = svg_text(folder / f"sweep_launch_cycles_vs_{name}.svg")
        assert name in text and "cycles" in text


def test_resume_runs_only_the_missing_point(workdir, local_sweep):
    table, _, _ = local_sweep
    points = workdir / "local" / "points"
    victim = table["point_key"][13][:16]
    (points / victim / "row.json").unlink()
    before = {p: p.stat().st_mtime_ns for p in points.glob("*/*.json")}
    result = run_tool("spyre-sweep", sweep_args("local", "-j", "2"), workdir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "24 points: 23 already done, 1 run, 0 failed" in result.stdout
    changed = {p.parent.name for p in points.glob("*/*.json") if before.get(p) != p.stat().st_mtime_ns}
    assert changed == {victim}
    resumed, _ = read_table(workdir / "local" / "sweep.parquet")
    pd.testing.assert_frame_equal(resumed.drop(columns=list(HOST_COLUMNS)), table.drop(columns=list(HOST_COLUMNS)))


def test_a_failing_point_is_a_row_not_a_crash(workdir):
    args = ["-o", "bad", "--no-progress", "--param", "memory.bandwidth_gbps=-1,102.4", "--", str(SPYRE_SIM)]
    proc = run_tool("spyre-sweep", [*args, "replay", "llama.cap"], workdir)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    table, _ = read_table(workdir / "bad" / "sweep.parquet")
    assert table["memory.bandwidth_gbps"].tolist() == [-1, 102.4]
    assert table["status"].tolist() == ["failed", "ok"]
    assert "memory.bandwidth_gbps" in table["error"][0] and table["exit_status"][0] != 0
    assert table["cycles"].isna().tolist() == [True, False]


@pytest.fixture(scope="module")
def ray_cluster():
    """A one-node Ray cluster on the loopback interface, stopped by its own process group."""
    pytest.importorskip("ray")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    log = open(os.path.join(temp, "start.log"), "w")  # closed in the finally below
    # Without a cluster flag Ray binds the machine's external address; the head never needs it here.
    env = tool_env(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0")
    argv = [str(BIN / "ray"), "start", "--head", "--block", f"--port={port}", "--num-cpus=2"]
    argv += ["--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while "Ray runtime started" not in pathlib.Path(log.name).read_text():
            assert proc.poll() is None, pathlib.Path(log.name).read_text()[-3000:]
            assert time.monotonic() < deadline, "ray start took more than 90 s"
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the head and every Ray process it started, nothing else
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def test_ray_gives_the_local_table(workdir, local_sweep, ray_cluster):
    table, _, _ = local_sweep
    started = time.monotonic()
    args = sweep_args("ray", "--ray", ray_cluster, "--plot")
    proc = run_tool("spyre-sweep", args, workdir, timeout=300, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    print(f"ray sweep of 24 points: {time.monotonic() - started:.1f} s")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "24 points: 0 already done, 24 run, 0 failed" in proc.stdout
    on_ray, _ = read_table(workdir / "ray" / "sweep.parquet")
    assert set(HOST_COLUMNS) <= set(on_ray.columns)
    pd.testing.assert_frame_equal(on_ray.drop(columns=list(HOST_COLUMNS)), table.drop(columns=list(HOST_COLUMNS)))
    for name in NAMES:
        check_png(workdir / "ray" / "plots" / f"sweep_launch_cycles_vs_{name}.png")


def test_plots_of_a_run_and_a_sweep(workdir, local_sweep, tmp_path):
    stats_file, trace_file = tmp_path / "stats.json", tmp_path / "trace.json"
    run = run_script(workdir / "workload.py", env={"SPYRE_STATS": str(stats_file), "SPYRE_TRACE": str(trace_file)})
    assert run.returncode == 0, run.stderr
    figures = tmp_path / "figures"
    jobs = {
        "roofline": ["roofline", str(stats_file)],
        "utilisation": ["utilisation", str(trace_file), "--bins", "50"],
        "ops": ["breakdown", str(trace_file), "--name", "ops"],
        "stalls": ["breakdown", str(stats_file), "--name", "stalls"],
        "sweep": ["sweep", str(workdir / "local" / "sweep.parquet"), "--x", "chip.pt_rows", "--y", "cycles"]
        + ["--hue", "memory.bandwidth_gbps", "--where", "ring.bytes_per_cycle=128"],
    }
    texts = {}
    for name, args in jobs.items():
        proc = run_tool("spyre-plot", [*args, "-o", str(figures)], workdir)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == [str(figures / f"{name}.png"), str(figures / f"{name}.svg")]
        check_png(figures / f"{name}.png")
        texts[name] = svg_text(figures / f"{name}.svg")
    # 32 cores x 2 corelets x 8 x 8 PEs x 8 lanes x 2 flop x 1.5 GHz (docs/architect-guide.md).
    assert "fp16 peak 98.3 TFLOP/s" in texts["roofline"]
    assert "core 00" in texts["utilisation"] and "core 31" in texts["utilisation"]
    assert "aten::mm" in texts["ops"] and "aten::add.Tensor" in texts["ops"]
    assert "memory.bandwidth_gbps = 51.2" in texts["sweep"]
    bad = run_tool("spyre-plot", ["roofline", str(trace_file), "-o", str(figures)], workdir)
    assert bad.returncode == 2 and "spyre-plot: stats: no cards" in bad.stderr


def test_spyre_arch_runs_without_torch():
    code = (
        "import sys\n"
        "import spyre_arch.sweep, spyre_arch.sweep_cli, spyre_arch.plot_cli, spyre_arch.plots, spyre_arch.engines\n"
        "import spyre_arch.trace_cli\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torch_spyre')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=tool_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


# --- the parts, on hand-made inputs ---------------------------------------------------------------


def test_flatten_stats_reads_every_section_and_tolerates_missing_ones():
    full = {
        "config_hash": "00ff00ff00ff00ff",
        "config": {"chip": {"cores": 2, "corelets_per_core": 1, "pt_rows": 2, "pt_cols": 2, "pt_simd": 1}},
        "trace_dropped_events": 3,
        "cards": [
            {
                "cycles": 1000, "seconds": 2e-6, "flops": 400, "commands": {"launch": 2, "copy": 3},
                "bytes": {"h2d": 10, "d2h": 20, "d2d": 0}, "msix": 5,
                "cores": {
                    "0": {"busy_cycles": 600, "bytes_loaded": 100, "stall": {"compute": 1, "memory": 2}},
                    "1": {"busy_cycles": 0, "bytes_loaded": 0},
                },
                "stall": {"compute": 300, "memory": 200, "sync": 0, "issue": 10, "idle": 1490},
                "launches": [{"name": "k", "start": 100, "end": 400}, {"name": "k", "start": 500, "end": 600}],
                "memory_channels": [{"channel": 0, "bytes": 64, "utilisation": 0.25}, {"channel": 1, "bytes": 0,
                                    "utilisation": 0.75}],
                "ring_links": [{"from": 0, "to": 1, "bytes": 8, "utilisation": 0.5}],
                "pcie": {"to_host": {"bytes": 20}, "from_host": {"bytes": 10}},
                "energy_j": {"pt": 0.5, "total": 1.5},
            }
        ],
    }  # fmt: skip
    row = stats.flatten_stats(full)
    expected = {
        "config_hash": "00ff00ff00ff00ff", "cards": 1, "cycles": 1000, "seconds": 2e-6, "flops": 400,
        "flops_per_second": 2e8, "commands_copy": 3, "commands_launch": 2, "bytes_d2d": 0, "bytes_d2h": 20,
        "bytes_h2d": 10, "msix": 5, "core_busy_cycles": 600, "core_bytes_loaded": 100, "cores_used": 1,
        "core_busy_max": 600, "core_busy_fraction": 0.3, "stall_compute": 300, "stall_memory": 200,
        "stall_sync": 0, "stall_issue": 10, "stall_idle": 1490, "launches": 2, "launch_cycles": 400,
        "mem_channel_bytes": 64, "mem_channel_util_mean": 0.5, "mem_channel_util_max": 0.75,
        "ring_link_bytes": 8, "ring_link_util_mean": 0.5, "ring_link_util_max": 0.5,
        "pcie_to_host_bytes": 20, "pcie_from_host_bytes": 10, "energy_pt_j": 0.5, "energy_total_j": 1.5,
        "trace_dropped_events": 3,
    }  # fmt: skip
    assert "pt_peak_fraction" not in row  # the config has no clock
    assert row == pytest.approx(expected)
    # Per-core stalls stand in for a card without its own sum; absent sections give no column.
    del full["cards"][0]["stall"]
    assert {k: v for k, v in stats.flatten_stats(full).items() if k.startswith("stall_")} == {
        "stall_compute": 1,
        "stall_memory": 2,
    }
    assert stats.flatten_stats({"cards": [{"cycles": 7}]}) == {"cards": 1, "cycles": 7}
    assert stats.flatten_stats({}) == {"cards": 0}


def test_peak_and_memory_roof_of_the_default_card():
    config = {
        "chip": {"cores": 32, "corelets_per_core": 2, "pt_rows": 8, "pt_cols": 8, "pt_simd": 8, "clock_mhz": 1500},
        "memory": {"bandwidth_gbps": 204.8},
    }
    assert stats.peak_flops(config) == pytest.approx(98.304e12)  # the 98.3 TFLOPS of the public figures
    assert stats.memory_roof(config) == pytest.approx(204.8e9)
    assert stats.peak_flops({"chip": {"cores": 32}}) is None


def test_sweep_files(tmp_path):
    spec = {"base": {"chip": {"pt_rows": 16}}, "params": {"chip.cores": [8, 16], "memory.bandwidth_gbps": "1:3:1"}}
    (tmp_path / "s.json").write_text(json.dumps(spec))
    (tmp_path / "s.yaml").write_text("base: {chip: {pt_rows: 16}}\nparams:\n  chip.cores: [8, 16]\n")
    base, params = grid.load_sweep_file(tmp_path / "s.json")
    assert base == {"chip": {"pt_rows": 16}}
    assert params == [grid.Param("chip.cores", (8, 16)), grid.Param("memory.bandwidth_gbps", (1, 2, 3))]
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(GridError, match="bad.json"):
        grid.load_sweep_file(tmp_path / "bad.json")
    pytest.importorskip("yaml")  # YAML files need PyYAML, which Ray brings
    assert grid.load_sweep_file(tmp_path / "s.yaml") == (base, params[:1])


def test_values_ranges_and_point_configs():
    assert grid.parse_values("51.2:409.6:*2") == [51.2, 102.4, 204.8, 409.6]
    assert grid.parse_values("8:32:8") == [8, 16, 24, 32]
    assert grid.parse_values("0.1:0.3:0.1") == [0.1, 0.2, 0.3]
    assert grid.parse_values("8,ieee,true") == [8, "ieee", True]
    for bad in ("8:4:8", "1:2", "1:4:0", "a:b:c", "1,,2"):
        with pytest.raises(GridError):
            grid.parse_values(bad)
    with pytest.raises(GridError, match="repeats"):
        grid.parse_param("chip.cores=8,8")
    with pytest.raises(GridError, match="not a config key"):
        grid.parse_param("cores=8")
    points = grid.grid([grid.parse_param("a.x=1,2"), grid.parse_param("b.y=p,q")])
    assert points == [{"a.x": 1, "b.y": "p"}, {"a.x": 1, "b.y": "q"}, {"a.x": 2, "b.y": "p"}, {"a.x": 2, "b.y": "q"}]
    base = {"output": {"stats_path": "/x.json"}, "chip": {"cores": 4, "pt_rows": 16}}
    config = grid.point_config(base, {"chip.cores": 8, "memory.bandwidth_gbps": 102.4})
    assert config == {"chip": {"cores": 8, "pt_rows": 16}, "memory": {"bandwidth_gbps": 102.4}}
    assert base["chip"]["cores"] == 4  # the base is not modified
    reordered = {"memory": {"bandwidth_gbps": 102.4}, "chip": {"pt_rows": 16, "cores": 8}}
    assert grid.config_key(reordered) == grid.config_key(config)
    assert grid.config_key(config) != grid.config_key({**config, "chip": {"cores": 8, "pt_rows": 8}})


def _slice(tid, name, ts, dur):
    return {"ph": "X", "pid": 0, "tid": tid, "name": name, "ts": ts, "dur": dur, "args": {}}


def test_core_utilisation_counts_instructions_not_the_program_around_them():
    events = [
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 4, "args": {"name": "core 00"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 5, "args": {"name": "core 01"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 9, "args": {"name": "queue 00"}},
        _slice(4, "program", 0, 100),
        _slice(4, "matmul", 0, 40),
        _slice(4, "wait", 60, 40),
        {**_slice(9, "mm", 0, 100), "args": {"op": "aten::mm"}},
        _slice(9, "copy", 100, 30),
        _slice(9, "copy", 130, 20),
    ]
    util = trace.core_utilisation({"traceEvents": events}, bins=2)
    assert util.edges == [0, 50, 100] and util.labels == ["core 00", "core 01"]
    assert util.busy == [pytest.approx([0.8, 0.8]), [0.0, 0.0]]
    assert trace.core_utilisation(events, bins=2, exclude=["wait"]).busy[0] == pytest.approx([0.8, 0.0])
    assert trace.op_breakdown(events) == [("aten::mm", 100.0, 1), ("copy", 50.0, 2)]


def test_a_cores_pt_arrays_count_in_its_busy_time_and_summary():
    # The MATMUL on the PT track overlaps the core's wait: busy is their union, 0..40 and 50..100.
    events = [
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 4, "args": {"name": "core 00"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 6, "args": {"name": "core 00 PT"}},
        _slice(4, "program", 0, 100),
        _slice(4, "binary", 0, 40),
        _slice(4, "wait", 60, 40),
        _slice(6, "matmul", 50, 30),
    ]
    util = trace.core_utilisation(events, bins=2)
    assert util.labels == ["core 00"]
    assert util.busy == [pytest.approx([0.8, 1.0])]
    summary = trace_cli.summarize(events)
    (core,) = summary["cores"]
    assert core["busy_us"] == pytest.approx(90.0)
    assert core["kinds"] == pytest.approx({"binary": 40.0, "wait": 40.0, "matmul": 30.0})


def test_roofline_points_and_stall_table_from_launches():
    config = {"chip": {"clock_mhz": 1000}}
    launch = {"name": "gemm", "start": 0, "end": 2000, "flops": 4e6, "bytes_loaded": 3000, "bytes_stored": 1000}
    stalls = {"stall": {"memory": 5, "compute": 7}}
    points, per_launch = analysis.roofline_points({"config": config, "cards": [{"launches": [{**launch, **stalls}]}]})
    assert per_launch and len(points) == 1
    assert points[0].intensity == pytest.approx(1000.0) and points[0].flops_per_second == pytest.approx(2e12)
    whole, per_launch = analysis.roofline_points(
        {"cards": [{"flops": 10, "seconds": 1.0, "cores": {"0": {"bytes_loaded": 4, "bytes_stored": 1}}}]}
    )
    assert not per_launch and whole[0].intensity == pytest.approx(2.0)
    table = analysis.stall_table({"cards": [{"launches": [{**launch, **stalls}] * 3}]}, max_bars=2)
    assert (table.what, table.labels, table.categories, table.cycles) == (
        "launch name",
        ["gemm"],
        ["compute", "memory"],
        [[21, 15]],
    )
