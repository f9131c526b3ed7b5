"""spyre-plot: figures of a run (stats, trace) or a sweep (table), as NAME.png and NAME.svg.

spyre-plot roofline out/spyre_stats.json -o figures
spyre-plot utilisation out/spyre_trace.json --bins 200 -o figures
spyre-plot breakdown out/spyre_trace.json -o figures      (or a stats file: stall categories)
spyre-plot sweep sweep_out/sweep.parquet --x memory.bandwidth_gbps --y cycles --hue chip.cores
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from spyre_arch import analysis, trace
from spyre_arch.commands import missing_extra, version
from spyre_arch.grid import parse_value
from spyre_arch.stats import load_json


def make_parser() -> argparse.ArgumentParser:
    """The spyre-plot parser: one subcommand per figure."""
    p = argparse.ArgumentParser(prog="spyre-plot", description="Figures of a simulated run or a sweep.")
    p.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = p.add_subparsers(dest="figure", required=True, metavar="FIGURE")

    def add(name: str, help_text: str, input_help: str) -> argparse.ArgumentParser:
        s = sub.add_parser(name, help=help_text, description=help_text)
        s.add_argument("input", help=input_help)
        s.add_argument("-o", "--out", default=".", help="output folder (default: .)")
        s.add_argument("--name", default=name, help=f"file name without extension (default: {name})")
        s.add_argument("--title", default="", help="figure title")
        return s

    add("roofline", "per launch: achieved FLOP/s against arithmetic intensity, under the roofs", "STATS.json")
    u = add("utilisation", "per core over time: busy fraction in time bins", "TRACE.json")
    u.add_argument("--bins", type=int, default=100, help="time bins (default: 100)")
    u.add_argument("--exclude", default="", metavar="NAMES", help="slice names that are not busy, e.g. wait,barrier")
    b = add("breakdown", "time per host op (trace) or stall cycles per launch (stats)", "STATS.json or TRACE.json")
    b.add_argument("--top", type=int, default=20, help="ops shown before the rest are summed (default: 20)")
    s = add("sweep", "a metric against a swept parameter, one line per value of another", "TABLE.parquet")
    s.add_argument("--x", required=True, metavar="PARAM", help="the parameter on the x axis")
    s.add_argument(
        "--y", default="launch_cycles", metavar="METRIC", help="the column on the y axis (default: launch_cycles)"
    )
    s.add_argument("--hue", metavar="PARAM", help="one line per value of this parameter")
    s.add_argument("--where", action="append", default=[], metavar="KEY=VALUE", help="keep only these rows")
    s.add_argument("--logx", action="store_true", help="log x axis")
    s.add_argument("--logy", action="store_true", help="log y axis")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Runs spyre-plot. Returns 0, or 2 with a message when the input cannot be plotted."""
    parser = make_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        from spyre_arch import plots  # matplotlib: the arch extra
    except ModuleNotFoundError as e:
        parser.exit(2, missing_extra("spyre-plot", e))
    try:
        fig = _figure(args, plots)
        files = plots.save(fig, args.out, args.name)
    except ModuleNotFoundError as e:  # pandas and pyarrow, for a sweep's table
        parser.exit(2, missing_extra("spyre-plot", e))
    except (OSError, ValueError) as e:  # unreadable input, PlotError, a trace or stats file without the data
        parser.exit(2, f"spyre-plot: {e}\n")
    print(" ".join(str(f) for f in files))
    return 0


def _figure(args: argparse.Namespace, plots):
    if args.figure == "sweep":
        return _sweep(args, plots)
    data = load_json(args.input)
    if args.figure == "roofline":
        points, per_launch = analysis.roofline_points(data)
        title = args.title or f"roofline, {'per launch' if per_launch else 'whole run (no launches in the stats)'}"
        return plots.roofline_figure(points, analysis.roofs(data.get("config") or {}), title)
    if args.figure == "utilisation":
        exclude = [n.strip() for n in args.exclude.split(",") if n.strip()]
        util = trace.core_utilisation(data, max(1, args.bins), exclude)
        return plots.utilisation_figure(util, args.title or "core busy fraction")
    if isinstance(data, dict) and "cards" in data:
        table = analysis.stall_table(data)
        return plots.stall_figure(table, args.title or f"cycles per {table.what}")
    return plots.op_breakdown_figure(trace.op_breakdown(data), args.title or "time per op", max(1, args.top))


def _sweep(args: argparse.Namespace, plots):
    from spyre_arch.sweep import read_table  # pandas and pyarrow only for tables

    table, params = read_table(args.input)
    for condition in args.where:
        key, sep, text = condition.partition("=")
        if not sep or key not in table.columns:
            raise plots.PlotError(f"plot: --where takes KEY=VALUE with a column of the table (got '{condition}')")
        table = table[table[key] == parse_value(text)]
    return plots.sweep_figure(table, args.x, args.y, args.hue, params, args.logx, args.logy)


if __name__ == "__main__":
    sys.exit(main())
