"""Full-size models without weights: a HuggingFace LLM's inference simulated on the card.

`predict` runs one workload (prefill length, decode steps, batch) of a model given by its
HuggingFace config in a fresh process (`spyre_arch.model_run`) on the card in timing mode, and
returns what the card would do: time to first token, per-token decode latency, tokens per second,
per layer kind its time, utilisation and stall breakdown, and an independent roofline
(`spyre_arch.model_roofline`) to hold the times against. `spyre-sim model` is its command line
(`spyre_arch.model_cli`). Nothing here imports torch; the child process does.
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from typing import Any

from spyre_arch import model_roofline as roofline
from spyre_arch.grid import set_dotted
from spyre_arch.model_configs import CONFIGS
from spyre_arch.stats import load_json, memory_roof, peak_flops

REFUSED = 3  # model_run's exit status for a job it refused (kept in step with model_run.REFUSED)


class ModelError(RuntimeError):
    """The prediction could not run or was refused; the message says why."""


def predict(
    source: Mapping[str, Any] | str,
    *,
    prefill: int = 2048,
    decode: int = 128,
    batch: int = 1,
    card: Mapping[str, Any] | None = None,
    dtype: str = "bfloat16",
    stats: str | None = None,
    trace: str | None = None,
    timeout: float | None = None,
    mode: str = "timing",
    weights: str = "none",
    progress: bool = False,
) -> dict[str, Any]:
    """Simulates one inference workload of a weightless model on the card.

    Args:
        source: the model's HuggingFace config: a dict with "model_type", a config.json, a model
            folder, a model id whose config is in the local HuggingFace cache, or a name of
            `model_configs.CONFIGS` ("llama3-8b", "llama3-70b", "mixtral-8x7b").
        prefill: prompt tokens per sequence; decode: decode steps after it; batch: sequences.
        card: simulator config overrides (as in $SPYRE_CONFIG); `sim.mode` is set to `mode`.
        dtype: the weights' and activations' torch dtype name.
        stats, trace: where to write the run's stats and Perfetto trace (none by default).
        timeout: seconds of wall time before the run is stopped.
        progress: show the run's progress lines on stderr.
        mode, weights: "timing" and "none" predict. "timed" and "random" run the same model with
            its own random initialization uploaded and every value computed, for checking on a
            small model that the prediction's cycles are the timed simulator's.
    Returns:
        The figures (see `figures`), the roofline, the measured cycles and the host's cost.
    Raises:
        ModelError: bad arguments, a model too large for the card, or a failed run.
    """
    for name, value, least in (("prefill", prefill, 1), ("decode", decode, 0), ("batch", batch, 1)):
        if not isinstance(value, int) or value < least:
            raise ModelError(f"{name} must be an integer of at least {least} (got {value!r})")
    if isinstance(source, str) and source in CONFIGS:
        source = CONFIGS[source]
    config = copy.deepcopy(dict(card or {}))
    set_dotted(config, "sim.mode", mode)
    job = {"source": source, "prefill": prefill, "decode": decode, "batch": batch, "dtype": dtype, "weights": weights}
    with tempfile.TemporaryDirectory(prefix="spyre-model-") as tmp:
        config_path = pathlib.Path(tmp) / "config.json"
        config_path.write_text(json.dumps(config), encoding="utf-8")
        stats_path = stats or str(pathlib.Path(tmp) / "stats.json")
        # Its own in-process card, configured here: none of the caller's card variables (a
        # $SPYRE_TRANSPORT=socket would hand it a daemon's slot, on the daemon's config).
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPYRE_")}
        env.update({"SPYRE_CONFIG": str(config_path), "SPYRE_STATS": stats_path, "SPYRE_TRACE": trace or ""})
        returncode, out, err = _run_child(job, env, timeout, progress)
        lines = out.strip().splitlines()
        answer = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
        if returncode == REFUSED and "refused" in answer:
            raise ModelError(answer["refused"])
        if returncode != 0 or not answer:
            tail = "\n".join(err[-15:])
            raise ModelError(f"the simulation failed (exit status {returncode}):\n{tail}")
        run_stats = load_json(stats_path)
    return summarize(answer, run_stats, prefill=prefill, decode=decode, batch=batch) | {"stats": stats, "trace": trace}


def _run_child(
    job: dict[str, Any], env: dict[str, str], timeout: float | None, progress: bool
) -> tuple[int, str, list[str]]:
    """Runs model_run on the job; returns (exit status, stdout, stderr lines). With `progress`,
    its progress lines go to this process's stderr as they come."""
    with (
        tempfile.TemporaryFile("w+") as out,
        subprocess.Popen(
            [sys.executable, "-m", "spyre_arch.model_run"],
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        ) as proc,
    ):
        expired = threading.Event()

        def stop() -> None:
            expired.set()
            proc.kill()

        timer = threading.Timer(timeout, stop) if timeout else None
        if timer:
            timer.start()
        try:
            assert proc.stdin is not None and proc.stderr is not None
            proc.stdin.write(json.dumps(job))
            proc.stdin.close()
            err = []
            for line in proc.stderr:
                err.append(line.rstrip("\n"))
                if progress and line.startswith("spyre-sim model: "):
                    print(line, end="", file=sys.stderr, flush=True)
            proc.wait()
        finally:
            if timer:
                timer.cancel()
        if expired.is_set():
            raise ModelError(f"the simulation took longer than {timeout:g} s")
        out.seek(0)
        return proc.returncode, out.read(), err


def summarize(
    run: dict[str, Any], stats: Mapping[str, Any], *, prefill: int, decode: int, batch: int
) -> dict[str, Any]:
    """The figures of a finished run (model_run's answer and its stats file) beside the roofline."""
    card_config = stats["config"]
    hz = card_config["chip"]["clock_mhz"] * 1e6
    peak, bandwidth = peak_flops(card_config), memory_roof(card_config)
    try:
        shape = roofline.Shape.from_config(run["config"])
    except roofline.RooflineError:
        shape = None  # a model that is not a Llama-style decoder: measured, not bounded
    stalls = _stalls_by_kind(run, stats)
    phases: dict[str, Any] = {}
    for phase, measured in run["phases"].items():
        steps = decode if phase == "decode" else 1
        if steps == 0:
            continue
        seconds = measured["cycles"] / hz / steps  # per step for decode
        bound = None
        if shape is not None:
            if phase == "prefill":
                bound = roofline.bound(roofline.prefill(shape, batch, prefill), peak, bandwidth)
            else:  # the mean step: its context grows from prefill to prefill + decode - 1
                mean = [roofline.decode_step(shape, batch, prefill + i) for i in range(decode)]
                bound = _mean_bound(mean, peak, bandwidth)
        kinds = {}
        accounted = 0.0
        for kind, k in sorted(run["kinds"].get(phase, {}).items()):
            kind_s = k["cycles"] / hz / steps
            accounted += kind_s
            row: dict[str, Any] = {"seconds": kind_s, "share": kind_s / seconds if seconds else 0.0}
            if bound is not None and kind in bound["kinds"]:
                b = bound["kinds"][kind]
                row["roofline_seconds"] = b["seconds"]
                row["utilisation"] = b["flops"] / (kind_s * peak) if kind_s else 0.0
            row["stall"] = stalls.get((phase, kind))
            kinds[kind] = row
        kinds["other"] = {
            "seconds": max(seconds - accounted, 0.0),
            "share": max(1 - accounted / seconds, 0.0) if seconds else 0.0,
        }
        phases[phase] = {"seconds": seconds, "roofline": bound, "kinds": kinds}
        if bound is not None:
            phases[phase]["over_roofline"] = seconds / bound["seconds"]
            phases[phase]["utilisation"] = bound["flops"] / (seconds * peak)
    figures = {"time_to_first_token_s": phases["prefill"]["seconds"]}
    if decode:
        steps = run["phases"]["decode"]["step_cycles"]
        per_token = phases["decode"]["seconds"]
        figures |= {
            "decode_latency_s": per_token,
            "decode_latency_first_last_s": [steps[0] / hz, steps[-1] / hz],
            "decode_tokens_per_s": batch / per_token,
            "tokens_per_s": batch * decode / (phases["prefill"]["seconds"] + per_token * decode),
        }
    stalls_kept = bool(stalls) or not run["launch_ranges"]
    return {
        "model": run["model_type"],
        "stalls_attributed": stalls_kept,
        "parameters": run["parameters"],
        "dtype": run["dtype"],
        "workload": {"prefill": prefill, "decode": decode, "batch": batch},
        "card": {
            "name": run["device"]["name"],
            "cores": card_config["chip"]["cores"],
            "clock_mhz": card_config["chip"]["clock_mhz"],
            "peak_tflops": peak / 1e12,
            "memory_bandwidth_gbps": bandwidth / 1e9,
            "memory_bytes": run["device"]["memory_bytes"],
        },
        "memory": {"weight_bytes": run["weight_bytes"], "kv_cache_bytes": run["kv_cache_bytes"]},
        "figures": figures,
        "phases": phases,
        "launches": run["launches"],
        "host": {
            "cpu_seconds": run["host_cpu_seconds"],
            "phase_cpu_seconds": {phase: p["host_cpu_seconds"] for phase, p in run["phases"].items()},
            "peak_rss_bytes": run["host_peak_rss_bytes"],
            "compiled_graphs": run["compile"].get("graphs"),
        },
    }


def _mean_bound(steps: list[roofline.Work], peak: float, bandwidth: float) -> dict[str, Any]:
    """The roofline of the mean decode step (each step bounded alone, then averaged)."""
    bounds = [roofline.bound(w, peak, bandwidth) for w in steps]
    n = len(bounds)
    mean = {
        k: sum(b[k] for b in bounds) / n for k in ("flops", "bytes", "compute_seconds", "memory_seconds", "seconds")
    }
    mean["limit"] = "compute" if mean["compute_seconds"] >= mean["memory_seconds"] else "memory"
    mean["kinds"] = {
        kind: {f: sum(b["kinds"][kind][f] for b in bounds) / n for f in ("flops", "bytes", "seconds")}
        for kind in bounds[0]["kinds"]
    }
    return mean


def _stalls_by_kind(run: Mapping[str, Any], stats: Mapping[str, Any]) -> dict[tuple[str, str], dict[str, float]]:
    """Core-cycle stall categories per (phase, kind): the stats file's launches, in queue order,
    attributed by the launch numbers the run read around each module. Empty when the file's
    launch list does not line up with the run's launch count (the list is capped)."""
    card = stats["cards"][0]
    launches = sorted(card.get("launches", []), key=lambda launch: launch["start"])
    if card.get("launches_dropped", 0) or len(launches) != run["launches"]:
        return {}
    out: dict[tuple[str, str], dict[str, float]] = {}
    for phase, kind, first, last in run["launch_ranges"]:
        into = out.setdefault((phase, kind), {})
        for launch in launches[first:last]:
            for category, cycles in launch.get("stall", {}).items():
                into[category] = into.get(category, 0) + cycles
    return {key: _fractions(value) for key, value in out.items()}


def _fractions(cycles: Mapping[str, float]) -> dict[str, float]:
    total = sum(cycles.values())
    return {k: v / total for k, v in cycles.items()} if total else {}
