"""One sweep point: write its config, run the workload on it, and read back what the card did.

`run_point` is what both engines run (a local thread, or a Ray task on any node), so everything
it needs travels in the PointSpec, and it never raises for a failure of the workload: a point that
fails is a result with its error.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spyre_arch.stats import flatten_stats, load_json

CONFIG_FILE = "config.json"
STATS_FILE = "stats.json"
TRACE_FILE = "trace.json"
STDOUT_FILE = "workload.out"
STDERR_FILE = "workload.err"

# Variables that steer the simulator or torch_spyre: a point gets exactly the ones the sweep hands
# it, never whatever the worker process happens to have (a Ray worker inherits `ray start`'s).
_PROJECT_PREFIXES = ("SPYRE_", "TORCH_SPYRE_")


@dataclass(frozen=True)
class PointSpec:
    """Everything one point's run needs.

    Attributes:
        key: the point key (grid.config_key of `config`).
        config: the merged config, written to the point folder as $SPYRE_CONFIG.
        point_dir: the folder for its config, stats, trace and workload output (created if needed).
        command: the workload's argv.
        cwd: the folder the workload runs in.
        env: variables set for the workload on top of the worker's (project ones included).
        trace: also write a trace ($SPYRE_TRACE).
        timeout: seconds before the workload is killed, or None.
    """

    key: str
    config: dict[str, Any]
    point_dir: str
    command: tuple[str, ...]
    cwd: str
    env: dict[str, str] = field(default_factory=dict)
    trace: bool = False
    timeout: float | None = None


def project_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The project's variables of an environment, minus the three a sweep sets per point."""
    own = ("SPYRE_CONFIG", "SPYRE_STATS", "SPYRE_TRACE")
    return {k: v for k, v in environ.items() if k.startswith(_PROJECT_PREFIXES) and k not in own}


def workload_env(spec: PointSpec) -> dict[str, str]:
    """The workload's environment: the worker's without project variables, the spec's, the point's files."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_PROJECT_PREFIXES)}
    env.update(spec.env)
    folder = pathlib.Path(spec.point_dir)
    env["SPYRE_CONFIG"] = str(folder / CONFIG_FILE)
    env["SPYRE_STATS"] = str(folder / STATS_FILE)
    if spec.trace:
        env["SPYRE_TRACE"] = str(folder / TRACE_FILE)
    return env


def run_point(spec: PointSpec, on_start: Callable[[subprocess.Popen], None] | None = None) -> dict[str, Any]:
    """Runs the workload on one point and returns its result columns.

    Args:
        spec: the point.
        on_start: called with the workload's process once it runs (the local engine keeps it to
            stop it on Ctrl-C); it may raise to refuse the start, which kills the process.
    Returns:
        {"status": "ok" | "failed", "exit_status": int | None, "error": str | None,
        **flatten_stats(...), "host_seconds": float}. A point fails when the workload cannot
        start, exits non-zero, times out, or leaves no readable stats file; whatever stats it did
        leave are still flattened. The error names the point folder "<point>".
    Raises:
        BaseException: only an interruption (KeyboardInterrupt, a Ray cancel), after killing the
        workload.
    """
    folder = pathlib.Path(spec.point_dir)
    folder.mkdir(parents=True, exist_ok=True)
    stats_path = folder / STATS_FILE
    for stale in (stats_path, folder / TRACE_FILE):  # from an interrupted earlier run
        stale.unlink(missing_ok=True)
    (folder / CONFIG_FILE).write_text(json.dumps(spec.config, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    exit_status: int | None = None
    error: str | None = None
    started = time.perf_counter()
    try:
        exit_status, error = _run_workload(spec, folder, on_start)
    except OSError as e:  # the command cannot be started
        error = f"cannot run {spec.command[0]!r} ({e.strerror or e})"
    host_seconds = time.perf_counter() - started

    flat: dict[str, Any] = {}
    if stats_path.exists():
        try:
            flat = flatten_stats(load_json(stats_path))
        except (OSError, ValueError) as e:
            error = error or f"unreadable {STATS_FILE} ({e})"
    elif error is None:
        error = f"no {STATS_FILE} written: the workload must use the simulated card"
    if error:  # the same failure reads the same in every point and every output folder
        error = error.replace(str(folder), "<point>")
    result: dict[str, Any] = {"status": "failed" if error else "ok", "exit_status": exit_status, "error": error}
    result.update(flat)
    result["host_seconds"] = host_seconds
    return result


def _run_workload(
    spec: PointSpec, folder: pathlib.Path, on_start: Callable[[subprocess.Popen], None] | None
) -> tuple[int | None, str | None]:
    """Runs the command to completion; returns (exit status, error or None)."""
    with open(folder / STDOUT_FILE, "wb") as out, open(folder / STDERR_FILE, "wb") as err:
        proc = subprocess.Popen(
            list(spec.command), cwd=spec.cwd, env=workload_env(spec), stdin=subprocess.DEVNULL, stdout=out, stderr=err
        )
        try:
            if on_start is not None:
                on_start(proc)
            proc.wait(timeout=spec.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return proc.returncode, f"timed out after {spec.timeout:g} s"
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    if proc.returncode != 0:
        return proc.returncode, f"exit status {proc.returncode}: {_last_line(folder / STDERR_FILE)}"
    return 0, None


def _last_line(path: pathlib.Path) -> str:
    """The last non-empty line of a text file (a Python traceback's message), or a placeholder."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no output)"
    lines = [line.strip() for line in lines if line.strip()]
    return lines[-1][:500] if lines else "(no output)"
