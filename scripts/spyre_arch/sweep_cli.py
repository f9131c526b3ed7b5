"""The spyre-sweep command line (the work is in spyre_arch.sweep)."""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

from spyre_arch import engines, grid
from spyre_arch.commands import missing_extra, version
from spyre_arch.grid import GridError
from spyre_arch.stats import load_json

_EPILOG = """\
values: a,b,c | lo:hi:step | lo:hi:*factor (e.g. 51.2:409.6:*2 = 51.2,102.4,204.8,409.6)
sweep file (JSON, or YAML): {"base": {config overrides}, "params": {"chip.cores": [8, 16], ...}}

example:
  spyre-sweep -o out/bw --param memory.bandwidth_gbps=51.2:204.8:*2 --param chip.cores=8,16,32 \\
      --plot -- .venv/bin/python my_workload.py
"""


def make_parser() -> argparse.ArgumentParser:
    """The parser of the options before `--` (the workload command comes after it)."""
    p = argparse.ArgumentParser(
        prog="spyre-sweep",
        usage="spyre-sweep [options] -- COMMAND [ARGS...]",
        description="Run a workload on every point of a grid of simulator configs; tabulate the stats.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-o", "--out", default="sweep_out", help="output folder, reused to resume (default: sweep_out)")
    p.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    p.add_argument("--config", metavar="JSON", help="base config: overrides under every point's values")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUES", help="a swept config key")
    p.add_argument("--sweep", metavar="FILE", help="a sweep file with base overrides and parameters")
    p.add_argument("-j", "--jobs", type=int, help="local points at once (default: the CPU count)")
    p.add_argument("--ray", metavar="ADDRESS", help="run the points as Ray tasks on this cluster (or 'auto')")
    p.add_argument(
        "--cpus-per-point", type=float, default=1, metavar="N", help="CPUs Ray reserves per point (default: 1)"
    )
    p.add_argument("--trace", action="store_true", help="also write each point's trace (points/<key>/trace.json)")
    p.add_argument("--timeout", type=float, metavar="SECONDS", help="kill a point's workload after this long")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="a variable for every workload")
    p.add_argument("--plot", action="store_true", help="write sweep curves of --plot-metric to OUT/plots/")
    p.add_argument(
        "--plot-metric",
        default="launch_cycles",
        metavar="COLUMN",
        help="the metric to plot (default: launch_cycles, the kernels' own; cycles is the whole run, copies included)",
    )
    p.add_argument("--dry-run", action="store_true", help="list the points and exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Runs spyre-sweep. Returns 0, 1 when a point failed, 2 on bad usage, 130 on Ctrl-C."""
    argv = list(sys.argv[1:] if argv is None else argv)
    options, command = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = make_parser()
    args = parser.parse_args(options)
    try:
        from spyre_arch import sweep  # pandas, pyarrow and tqdm: the arch extra
    except ModuleNotFoundError as e:
        parser.exit(2, missing_extra("spyre-sweep", e))
    try:
        base, params = _params(args)
        env = dict(_key_value(e) for e in args.env)
        if args.jobs is not None and args.jobs < 1:
            raise sweep.SweepError(f"sweep: --jobs must be at least 1 (got {args.jobs})")
        if args.dry_run:
            for values in grid.grid(params):
                print("  ".join(f"{k}={v}" for k, v in values.items()))
            return 0
        if not command:
            raise sweep.SweepError("sweep: give the workload command after --, e.g. -- .venv/bin/python work.py")
        result = sweep.run_sweep(
            params,
            command,
            args.out,
            base=base,
            jobs=args.jobs,
            ray_address=args.ray,
            cpus_per_point=args.cpus_per_point,
            trace=args.trace,
            timeout=args.timeout,
            env=env,
            progress=not args.no_progress,
        )
    except (GridError, sweep.SweepError, engines.EngineError) as e:
        parser.exit(2, f"spyre-sweep: {_strip(e)}\n")
    except KeyboardInterrupt:
        print(f"spyre-sweep: interrupted; rerun the same command to run the points that are missing in {args.out}")
        return 130
    table = result.table
    print(
        f"spyre-sweep: {result.points} point{'s' * (result.points != 1)}: {result.points - result.ran} already done, "
        f"{result.ran} run, {result.failed} failed; table {result.table_path}"
    )
    failures = table[table["status"] != "ok"]
    for error in failures["error"].drop_duplicates().head(5):
        print(f"  failed ({(failures['error'] == error).sum()}): {error}")
    if args.plot:
        _plot(table, [p.name for p in params], args.plot_metric, pathlib.Path(args.out) / "plots")
    return 1 if len(failures) else 0


def _params(args: argparse.Namespace) -> tuple[dict[str, Any], list[grid.Param]]:
    """The base config (--config, then the sweep file's base) and the parameters (file, then --param)."""
    base: dict[str, Any] = {}
    if args.config:
        try:
            base = load_json(args.config)
        except (OSError, ValueError) as e:
            raise GridError(f"sweep: cannot read --config '{args.config}' ({e})") from e
        if not isinstance(base, dict):
            raise GridError(f"sweep: --config '{args.config}' must hold a JSON object")
    params: list[grid.Param] = []
    if args.sweep:
        file_base, params = grid.load_sweep_file(args.sweep)
        _merge(base, file_base)
    params += [grid.parse_param(spec) for spec in args.param]
    return base, params


def _merge(into: dict[str, Any], overrides: dict[str, Any]) -> None:
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise GridError(f"sweep: --env takes KEY=VALUE (got '{text}')")
    return key, value


def _plot(table: Any, params: list[str], metric: str, folder: pathlib.Path) -> None:
    from spyre_arch import plots  # matplotlib only when plotting

    try:
        files = plots.sweep_curves(table, params, metric, folder)
    except plots.PlotError as e:
        print(f"spyre-sweep: no plots: {_strip(e)}", file=sys.stderr)
        return
    print(f"spyre-sweep: plots in {folder}{os.sep} ({len(files)} files)")


def _strip(error: Exception) -> str:
    """An error's message without the 'sweep: ' component tag the command name replaces."""
    text = str(error)
    return text.split(": ", 1)[1] if text.startswith(("sweep: ", "plot: ")) else text


if __name__ == "__main__":
    sys.exit(main())
