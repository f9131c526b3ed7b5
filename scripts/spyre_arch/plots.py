"""The architect's figures, drawn with matplotlib's Agg canvas and saved as PNG and SVG.

Figures are built on matplotlib.figure.Figure directly, never through pyplot, so importing this
module changes no global backend and works without a display. SVGs keep their text as text.
"""

from __future__ import annotations

import math
import pathlib
from collections.abc import Sequence
from typing import Any

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from spyre_arch.analysis import KernelPoint, Roofs, StallTable
from spyre_arch.trace import Utilisation

_MAX_PANELS = 12


class PlotError(ValueError):
    """A plot that cannot be drawn from the data given; the message says what is missing."""


def save(fig: Figure, folder: str | pathlib.Path, name: str) -> list[pathlib.Path]:
    """Writes NAME.png and NAME.svg into folder (created).

    Returns:
        The two paths.
    """
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    paths = [folder / f"{name}.png", folder / f"{name}.svg"]
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "spyre_arch"}):
        fig.savefig(paths[0], dpi=150)
        fig.savefig(paths[1], metadata={"Date": None})
    return paths


def roofline_figure(points: Sequence[KernelPoint], roofs: Roofs, title: str = "") -> Figure:
    """Achieved FLOP/s against arithmetic intensity, under the compute and memory roofs.

    Points without flops, bytes or time cannot sit on log axes and are counted in the title.

    Raises:
        PlotError: no point can be placed.
    """
    usable = [p for p in points if p.flops > 0 and p.bytes > 0 and p.seconds > 0]
    if not usable:
        raise PlotError(f"plot: none of the {len(points)} launches has flops, bytes and time to place on a roofline")
    fig = Figure(figsize=(7.5, 5), layout="constrained")
    ax = fig.add_subplot()
    xs = [p.intensity for p in usable]
    ridge = roofs.peak / roofs.bandwidth if roofs.peak and roofs.bandwidth else None
    lo = min(xs + ([ridge] if ridge else [])) / 4
    hi = max(xs + ([ridge] if ridge else [])) * 4
    grid_x = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    for peak, label, style in ((roofs.peak, "fp16", "-"), (roofs.fp32_peak, "fp32 matmul", "--")):
        if peak and roofs.bandwidth:
            ys = [min(peak, roofs.bandwidth * x) for x in grid_x]
            ax.plot(grid_x, ys, style, color="black", lw=1.2, label=f"{label} peak {peak / 1e12:.1f} TFLOP/s")
    if roofs.bandwidth:
        ax.text(lo * 1.2, roofs.bandwidth * lo * 1.6, f"LPDDR5 {roofs.bandwidth / 1e9:.1f} GB/s", rotation=0)
    names = sorted({p.name for p in usable})
    if len(names) <= 10:
        for name in names:
            mine = [p for p in usable if p.name == name]
            ax.scatter([p.intensity for p in mine], [p.flops_per_second for p in mine], label=name, zorder=3)
    else:
        ax.scatter(xs, [p.flops_per_second for p in usable], zorder=3, label=f"{len(usable)} launches")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte loaded + stored)")
    ax.set_ylabel("achieved FLOP/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    left_out = len(points) - len(usable)
    ax.set_title(title + (f" ({left_out} without flops or bytes not shown)" if left_out else ""))
    return fig


def utilisation_figure(util: Utilisation, title: str = "") -> Figure:
    """A heat map of each core's busy fraction over time, and the mean over cores below it."""
    fig = Figure(figsize=(9, 2 + 0.18 * len(util.labels)), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[4, 1])
    t0, t1 = util.edges[0], util.edges[-1]
    image = top.imshow(
        util.busy, aspect="auto", interpolation="nearest", cmap="viridis", vmin=0, vmax=1,
        extent=(t0, t1, len(util.labels) - 0.5, -0.5),
    )  # fmt: skip
    step = max(1, math.ceil(len(util.labels) / 32))
    top.set_yticks(range(0, len(util.labels), step), util.labels[::step], fontsize="x-small")
    top.set_title(title)
    fig.colorbar(image, ax=top, label="busy fraction")
    centres = [(a + b) / 2 for a, b in zip(util.edges[:-1], util.edges[1:], strict=True)]
    mean = [sum(col) / len(col) for col in zip(*util.busy, strict=True)]
    bottom.plot(centres, mean, color="black", lw=1)
    bottom.set_ylim(0, 1.05)
    bottom.set_ylabel("mean")
    bottom.set_xlabel("time (us)")
    return fig


def op_breakdown_figure(ops: Sequence[tuple[str, float, int]], title: str = "", top_n: int = 20) -> Figure:
    """Horizontal bars of time per host op (from the queue tracks), the longest first."""
    shown = list(ops[:top_n])
    if len(ops) > top_n:
        rest = ops[top_n:]
        shown.append((f"{len(rest)} others", sum(t for _, t, _ in rest), sum(n for _, _, n in rest)))
    fig = Figure(figsize=(8, 1.5 + 0.3 * len(shown)), layout="constrained")
    ax = fig.add_subplot()
    names = [name for name, _, _ in shown][::-1]
    times = [t for _, t, _ in shown][::-1]
    bars = ax.barh(names, times, color="tab:blue")
    ax.bar_label(bars, labels=[f"{n}x" for _, _, n in shown][::-1], padding=3, fontsize="small")
    ax.set_xlabel("time on the card's queues (us)")
    ax.set_title(title)
    return fig


def stall_figure(table: StallTable, title: str = "") -> Figure:
    """Stacked bars of cycles per stall category for each launch, card or core."""
    fig = Figure(figsize=(max(6, 0.35 * len(table.labels) + 3), 5), layout="constrained")
    ax = fig.add_subplot()
    bottoms = [0.0] * len(table.labels)
    positions = range(len(table.labels))
    for j, category in enumerate(table.categories):
        heights = [row[j] for row in table.cycles]
        ax.bar(positions, heights, bottom=bottoms, label=category)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    ax.set_xticks(positions, table.labels, rotation=60, ha="right", fontsize="small")
    ax.set_ylabel("cycles")
    ax.set_xlabel(table.what)
    ax.legend(fontsize="small")
    ax.set_title(title)
    return fig


def sweep_figure(
    table: Any,
    x: str,
    y: str,
    hue: str | None = None,
    params: Sequence[str] = (),
    logx: bool = False,
    logy: bool = False,
) -> Figure:
    """y against x, one line per value of hue, one panel per combination of the other varying params.

    Args:
        table: a sweep table (pandas DataFrame); rows whose status is not "ok" are left out.
        x, y, hue: column names.
        params: the swept parameters (those besides x and hue that vary make the panels).
        logx, logy: log-scaled axes.
    Raises:
        PlotError: a column is missing, y is not numeric, or there would be too many panels.
    """
    import pandas as pd  # only for sweep tables

    rows = table[table["status"] == "ok"] if "status" in table.columns else table
    for column in (x, y, hue):
        if column is not None and column not in rows.columns:
            raise PlotError(f"plot: no column '{column}' (the table has: {', '.join(map(str, rows.columns))})")
    if not pd.api.types.is_numeric_dtype(rows[y]):
        raise PlotError(f"plot: '{y}' is not numeric")
    if rows.empty:
        raise PlotError("plot: the table has no successful point")
    others = [p for p in params if p not in (x, hue) and p in rows.columns and rows[p].nunique() > 1]
    groups = list(rows.groupby(others, sort=True)) if others else [((), rows)]
    if len(groups) > _MAX_PANELS:
        raise PlotError(f"plot: {len(groups)} panels ({', '.join(others)} vary); fix some with --where KEY=VALUE")
    ncols = min(3, len(groups))
    nrows = math.ceil(len(groups) / ncols)
    fig = Figure(figsize=(5 * ncols, 3.6 * nrows), layout="constrained")
    axes = list(fig.subplots(nrows, ncols, squeeze=False).flat)
    for ax, (key, group) in zip(axes, groups, strict=False):
        for value in sorted(group[hue].unique()) if hue else [None]:
            line = (group if value is None else group[group[hue] == value]).sort_values(x)
            ax.plot(line[x], line[y], marker="o", label=None if value is None else f"{hue} = {value}")
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.set_xscale("log" if logx else "linear")
        ax.set_yscale("log" if logy else "linear")
        ax.grid(True, alpha=0.3)
        ax.set_title(", ".join(f"{k} = {v}" for k, v in zip(others, key, strict=True)), fontsize="small")
        if hue:
            ax.legend(fontsize="small")
    for ax in axes[len(groups) :]:
        ax.set_visible(False)
    left_out = len(table) - len(rows)
    fig.suptitle(f"{y} against {x}" + (f" ({left_out} failed points left out)" if left_out else ""))
    return fig


def sweep_curves(table: Any, params: Sequence[str], metric: str, folder: str | pathlib.Path) -> list[pathlib.Path]:
    """One sweep figure of metric against each parameter, lines by the next varying parameter.

    Returns:
        The files written (sweep_<metric>_vs_<param>.png and .svg for each parameter).
    Raises:
        PlotError: as sweep_figure.
    """
    files: list[pathlib.Path] = []
    for x in params:
        varying = [p for p in params if p != x and table[p].nunique() > 1]
        fig = sweep_figure(table, x, metric, varying[0] if varying else None, params)
        files += save(fig, folder, f"sweep_{metric}_vs_{x}")
    return files
