"""spyre-sweep: run a workload on every point of a grid of hardware configs and tabulate the stats.

    spyre-sweep -o OUT --param memory.bandwidth_gbps=51.2:204.8:*2 --param chip.cores=8,16,32 \\
        -- .venv/bin/python my_workload.py

The output folder holds one folder per point (points/<key>/: config.json, stats.json, optionally
trace.json, the workload's output and row.json, its row) and the table of all rows, sweep.parquet,
sorted by the parameter values. A point whose row.json is there is not run again, so rerunning the
same command after an interruption (or with more values) runs only what is missing.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from spyre_arch import engines, grid
from spyre_arch.grid import Param
from spyre_arch.runner import PointSpec, project_env

TABLE_FILE = "sweep.parquet"
MANIFEST_FILE = "sweep.json"
POINTS_DIR = "points"
ROW_FILE = "row.json"
# Columns that depend on the host, not on the simulation: drop them to compare two sweeps.
HOST_COLUMNS = ("host_seconds",)
ID_COLUMNS = ("point_key", "config_hash", "status", "exit_status", "error")
_META_KEY = b"spyre_arch"


class SweepError(ValueError):
    """A sweep that cannot start (bad arguments, an output folder of another sweep)."""


@dataclass
class SweepResult:
    """What a sweep did: its table (all grid points with a row) and how many points ran."""

    table: pd.DataFrame
    table_path: pathlib.Path
    points: int
    ran: int
    failed: int


def run_sweep(
    params: Sequence[Param],
    command: Sequence[str],
    out_dir: str | pathlib.Path,
    *,
    base: Mapping[str, Any] | None = None,
    jobs: int | None = None,
    ray_address: str | None = None,
    cpus_per_point: float = 1,
    trace: bool = False,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    progress: bool = True,
) -> SweepResult:
    """Runs the points of the grid that have no row yet and writes the table.

    Args:
        params: the swept config keys and values (the grid is their cartesian product).
        command: the workload's argv, run in the current directory.
        out_dir: the output folder (created; reused to resume).
        base: config overrides under every point's values.
        jobs: local points at once (default: the CPU count); ignored with ray_address.
        ray_address: run the points as Ray tasks on this cluster.
        cpus_per_point: CPUs Ray reserves per point.
        trace: write each point's trace.
        timeout: seconds before a point's workload is killed.
        env: variables for every workload; the caller's SPYRE_* / TORCH_SPYRE_* variables (but
            SPYRE_CONFIG, SPYRE_STATS, SPYRE_TRACE) are passed on too, on either engine.
        progress: show a progress bar.
    Returns:
        The SweepResult; its table is also in out_dir/sweep.parquet.
    Raises:
        SweepError, GridError: bad parameters, or out_dir holds a sweep of another command.
        engines.EngineError: Ray cannot be used.
        KeyboardInterrupt: the table is written with the rows done so far first.
    """
    if not command:
        raise SweepError("sweep: no workload command (give it after --)")
    if not params:
        raise SweepError("sweep: nothing to sweep (give --param KEY=VALUES or --sweep FILE)")
    out = pathlib.Path(out_dir).resolve()
    names = [p.name for p in params]
    points = [(values, grid.point_config(base or {}, values)) for values in grid.grid(list(params))]
    keys = [grid.config_key(config) for _, config in points]
    if len(set(keys)) != len(keys):
        raise SweepError("sweep: two points have the same config (a value given twice in another form?)")
    _check_manifest(out, command, base or {}, params)

    passed_env = {**project_env(os.environ), **(env or {})}
    specs, rows = [], {}
    for (values, config), key in zip(points, keys, strict=True):
        row = _read_row(out, key)
        if row is not None and row.get("status") == "ok":
            rows[key] = row
            continue
        folder = str(out / POINTS_DIR / key[:16])
        specs.append((values, PointSpec(key, config, folder, tuple(command), os.getcwd(), passed_env, trace, timeout)))

    by_key = {spec.key: values for values, spec in specs}
    bar = tqdm(total=len(points), initial=len(rows), unit="point", desc="spyre-sweep", disable=not progress)
    failed = 0

    def on_result(spec: PointSpec, result: dict[str, Any]) -> None:
        nonlocal failed
        row = {**by_key[spec.key], "point_key": spec.key, **result}
        _write_row(out, spec.key, row)
        rows[spec.key] = row
        failed += row["status"] != "ok"
        bar.update(1)

    todo = [spec for _, spec in specs]
    try:
        if todo and ray_address:
            engines.run_ray(todo, ray_address, on_result, cpus_per_point)
        elif todo:
            engines.run_local(todo, jobs or os.cpu_count() or 1, on_result)
    finally:
        bar.close()
        table = build_table([rows[k] for k in keys if k in rows], names)
        write_table(table, out / TABLE_FILE, names, command)
    return SweepResult(table, out / TABLE_FILE, len(points), len(todo), failed)


def build_table(rows: list[dict[str, Any]], params: Sequence[str]) -> pd.DataFrame:
    """The tidy table: one row per point sorted by the parameter values, host columns last.

    Column order: the parameters, the id columns, the stats columns in the order the rows name
    them, then HOST_COLUMNS; so the same rows give the same table whatever order they came in.
    """
    rows = sorted(rows, key=lambda r: tuple(_sort_key(r.get(p)) for p in params))
    columns = [*params, *ID_COLUMNS]
    for row in rows:
        columns += [c for c in row if c not in columns and c not in HOST_COLUMNS]
    columns += list(HOST_COLUMNS)
    return pd.DataFrame(rows, columns=columns)


def write_table(table: pd.DataFrame, path: pathlib.Path, params: Sequence[str], command: Sequence[str]) -> None:
    """Writes the table as Parquet, with the parameter names and command in the schema metadata."""
    arrow = pa.Table.from_pandas(table, preserve_index=False)
    meta = json.dumps({"params": list(params), "command": list(command), "host_columns": list(HOST_COLUMNS)})
    arrow = arrow.replace_schema_metadata({**(arrow.schema.metadata or {}), _META_KEY: meta.encode()})
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(arrow, tmp)
    os.replace(tmp, path)


def read_table(path: str | pathlib.Path) -> tuple[pd.DataFrame, list[str]]:
    """Reads a sweep table.

    Returns:
        The table and its parameter names (from the metadata; else the columns with a dot).
    Raises:
        OSError, pyarrow.ArrowInvalid: not a readable Parquet file.
    """
    arrow = pq.read_table(path)
    meta = (arrow.schema.metadata or {}).get(_META_KEY)
    table = arrow.to_pandas()
    params = json.loads(meta)["params"] if meta else [c for c in table.columns if "." in c]
    return table, params


def _sort_key(value: Any) -> tuple[int, Any]:
    if isinstance(value, bool | int | float):
        return (0, value)
    return (1, str(value))


def _read_row(out: pathlib.Path, key: str) -> dict[str, Any] | None:
    path = out / POINTS_DIR / key[:16] / ROW_FILE
    try:
        row = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return row if isinstance(row, dict) and row.get("point_key") == key else None


def _write_row(out: pathlib.Path, key: str, row: dict[str, Any]) -> None:
    path = out / POINTS_DIR / key[:16] / ROW_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(row, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)  # a row is there whole or not at all


def _check_manifest(
    out: pathlib.Path, command: Sequence[str], base: Mapping[str, Any], params: Sequence[Param]
) -> None:
    """Refuses to mix two workloads' rows in one folder; records this sweep's parameters."""
    path = out / MANIFEST_FILE
    if path.exists():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            old = {}
        if old.get("command") not in (None, list(command)):
            raise SweepError(
                f"sweep: {out} holds a sweep of another workload ({' '.join(old['command'])}); "
                "choose another -o folder or delete it"
            )
    out.mkdir(parents=True, exist_ok=True)
    manifest = {"command": list(command), "base": base, "params": {p.name: list(p.values) for p in params}}
    path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
