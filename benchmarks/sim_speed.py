"""The simulator's own speed, for architects (issue: the architect's simulator).

Prints:
- spyre-sim's host wall time for a 512-cube fp16 GEMM, the whole process (goal: under 1 s);
- the simulator's own cost per tile instruction apart from its arithmetic: a program of a million
  tiny SFP instructions (16 fp32 elements each) in a loop, on one core and on 32 (goal: at most
  0.5 us each);
- the functional mode's speed-up over timed mode on a transformer forward (a 4-layer Llama-style
  decoder through PyTorch), and on the replay of its capture;
- timing mode's host CPU time against the timed mode's, with the same cycles: spyre-sim's
  4096-cube fp16 GEMM (goal: at most 0.1 s), and the replays of a captured Llama forward and of a
  captured Llama training step (goal: at least 20x cheaper).

Run it alone on the machine: `.venv/bin/python benchmarks/sim_speed.py` (after scripts/bootstrap.sh).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
SPYRE_SIM = ROOT / "build" / "tools" / "spyre_sim" / "spyre-sim"
LLAMA = ROOT / "scripts" / "workloads" / "llama_forward.py"


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPYRE_", "TORCH_SPYRE_"))}
    env.update(extra)
    return env


def wall(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    start = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, env=env or clean_env(), check=True)
    return time.perf_counter() - start, p.stdout


def gemm_wall(repeat: int = 5) -> None:
    argv = [str(SPYRE_SIM), "gemm", "--m", "512", "--k", "512", "--n", "512", "--dtype", "f16"]
    times = [wall(argv)[0] for _ in range(repeat)]
    print(
        f"spyre-sim gemm 512^3 f16      process wall time: median {statistics.median(times) * 1e3:6.0f} ms"
        f"  (min {min(times) * 1e3:.0f}, max {max(times) * 1e3:.0f}, {repeat} runs; goal < 1000 ms)"
    )


def per_instruction(cores: int, count: int = 1_000_000, repeat: int = 3) -> None:
    costs = []
    for _ in range(repeat):
        _, out = wall([str(SPYRE_SIM), "instructions", "--count", str(count), "--cores", str(cores), "--json"])
        s = json.loads(out)
        assert s["check"]["status"] == "passed", s["check"]
        costs.append(s["host"]["launch_seconds"] / s["shape"]["count"])  # the loop's instructions
    print(
        f"tiny instructions, {cores:2d} core(s)  {statistics.median(costs) * 1e6:5.3f} us each"
        f"  (median of {repeat} runs of {count:,}; goal <= 0.5 us)"
    )


def functional_speedup() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        timed_cfg, func_cfg = pathlib.Path(tmp) / "timed.json", pathlib.Path(tmp) / "func.json"
        timed_cfg.write_text("{}")
        func_cfg.write_text(json.dumps({"sim": {"mode": "functional"}}))
        forward = {}
        for name, cfg in (("timed", timed_cfg), ("functional", func_cfg)):
            _, out = wall([sys.executable, str(LLAMA), "--time", "5"], clean_env(SPYRE_CONFIG=str(cfg)))
            forward[name] = float(re.search(r"forward ms ([0-9.]+)", out).group(1))
        print(
            f"llama forward (4 x 256, 2 x 128 tokens) host time: timed {forward['timed']:6.1f} ms,"
            f" functional {forward['functional']:6.1f} ms: {forward['timed'] / forward['functional']:.2f}x"
        )
        capture = pathlib.Path(tmp) / "llama.cap"
        wall([sys.executable, str(LLAMA)], clean_env(SPYRE_CAPTURE=str(capture)))
        replay = {}
        for name, extra in (("timed", []), ("functional", ["--set", "sim.mode=functional"])):
            runs = [wall([str(SPYRE_SIM), "replay", str(capture), *extra])[0] for _ in range(3)]
            replay[name] = statistics.median(runs)
        print(
            f"llama forward replay, process wall time:   timed {replay['timed'] * 1e3:6.1f} ms,"
            f" functional {replay['functional'] * 1e3:6.1f} ms: {replay['timed'] / replay['functional']:.2f}x"
        )


def cpu(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    """The user + system CPU seconds of one child process, and its output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    _, out = wall(argv, env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), out


TIMING = ["--set", "sim.mode=timing"]


def cycles(out: str) -> float:
    s = json.loads(out)
    return s["cycles"] if isinstance(s["cycles"], float) else sum(s["cycles"])


# One AdamW step of the Llama-style decoder of benchmarks/compute_figures.py (4 layers of 256).
TRAINING_STEP = f"""
import sys
sys.path.insert(0, {str(ROOT / "benchmarks")!r})
from compute_figures import llama_calls, llama_model
llama_calls(*llama_model(), "spyre")[0]()
"""


def timed_and_timing(argv: list[str], repeat: int) -> tuple[float, float]:
    """Median host CPU seconds of `argv` (a spyre-sim command with --json) timed and in timing mode,
    which must take the same cycles."""
    runs = {n: [cpu(argv + extra) for _ in range(repeat)] for n, extra in (("timed", []), ("timing", TIMING))}
    assert cycles(runs["timed"][0][1]) == cycles(runs["timing"][0][1]), "timing mode changed the cycles"
    return statistics.median(c for c, _ in runs["timed"]), statistics.median(c for c, _ in runs["timing"])


def timing_mode(repeat: int = 3) -> None:
    gemm = [str(SPYRE_SIM), "gemm", "--m", "4096", "--k", "4096", "--n", "4096", "--dtype", "f16", "--json"]
    t, f = timed_and_timing(gemm, repeat)
    print(
        f"spyre-sim gemm 4096^3 f16, host CPU:        timed {t:6.2f} s, timing {f:6.3f} s: {t / f:5.1f}x"
        f"  (same cycles; goal <= 0.1 s)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        forward, step = pathlib.Path(tmp) / "forward.cap", pathlib.Path(tmp) / "step.cap"
        wall([sys.executable, str(LLAMA)], clean_env(SPYRE_CAPTURE=str(forward)))
        wall([sys.executable, "-c", TRAINING_STEP], clean_env(SPYRE_CAPTURE=str(step)))
        for what, capture in (("forward", forward), ("training step", step)):
            t, f = timed_and_timing([str(SPYRE_SIM), "replay", str(capture), "--json"], repeat)
            print(
                f"llama {what + ' replay,':24s} host CPU: timed {t:6.2f} s, timing {f:6.3f} s: {t / f:5.1f}x"
                f"  (same cycles; goal >= 20x)"
            )


def main() -> None:
    if not SPYRE_SIM.exists():
        sys.exit(f"{SPYRE_SIM} is missing: run scripts/bootstrap.sh first")
    gemm_wall()
    per_instruction(1)
    per_instruction(32)
    functional_speedup()
    timing_mode()


if __name__ == "__main__":
    main()
