"""What the plots show, computed from a stats file without drawing: roofline points and stalls.

Launch times ("start", "end") are in device cycles like every other time in the stats file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spyre_arch.stats import STALL_CATEGORIES, as_number, memory_roof, peak_flops, stall_cycles


@dataclass(frozen=True)
class KernelPoint:
    """One launch (or a whole run) on the roofline."""

    name: str
    flops: float
    bytes: float
    seconds: float

    @property
    def intensity(self) -> float:
        """FLOP per byte moved between LPDDR5 and the cores (loaded + stored)."""
        return self.flops / self.bytes if self.bytes else float("nan")

    @property
    def flops_per_second(self) -> float:
        """Achieved FLOP/s over the launch's span."""
        return self.flops / self.seconds if self.seconds else float("nan")


@dataclass(frozen=True)
class Roofs:
    """The card's roofs in FLOP/s and bytes/s; None where the config lacks a figure."""

    peak: float | None
    fp32_peak: float | None
    bandwidth: float | None


@dataclass
class StallTable:
    """Cycles per stall category (columns) for each launch, card or core (rows)."""

    what: str  # "launch", "launch name", "card" or "core"
    labels: list[str]
    categories: list[str]
    cycles: list[list[float]]


def roofs(config: Mapping[str, Any]) -> Roofs:
    """The fp16 peak, the fp32 matmul peak (x chip.fp32_rate) and the LPDDR5 bandwidth."""
    peak = peak_flops(config)
    rate = as_number((config.get("chip") or {}).get("fp32_rate"))
    return Roofs(peak, peak * rate if peak is not None and rate is not None else None, memory_roof(config))


def roofline_points(stats: Mapping[str, Any]) -> tuple[list[KernelPoint], bool]:
    """The roofline points of a stats file: one per launch, or one per card without "launches".

    Returns:
        (points, per_launch). A whole card's bytes are its cores' loads and stores.
    Raises:
        ValueError: the file has no cards, or launches but no clock to turn cycles into seconds.
    """
    cards = [c for c in stats.get("cards") or [] if isinstance(c, Mapping)]
    if not cards:
        raise ValueError("stats: no cards in the file")
    if any(isinstance(c.get("launches"), list) for c in cards):
        clock = as_number(((stats.get("config") or {}).get("chip") or {}).get("clock_mhz"))
        if not clock:
            raise ValueError("stats: launches but no chip.clock_mhz in the config")
        points = []
        for card in cards:
            for launch in card.get("launches") or []:
                if not isinstance(launch, Mapping):
                    continue
                start, end = as_number(launch.get("start")), as_number(launch.get("end"))
                seconds = (end - start) / (clock * 1e6) if start is not None and end is not None else 0.0
                moved = (as_number(launch.get("bytes_loaded")) or 0) + (as_number(launch.get("bytes_stored")) or 0)
                name = str(launch.get("name", "launch"))
                points.append(KernelPoint(name, float(as_number(launch.get("flops")) or 0), float(moved), seconds))
        return points, True
    points = []
    for i, card in enumerate(cards):
        cores = card.get("cores") if isinstance(card.get("cores"), Mapping) else {}
        moved = sum(
            (as_number(c.get("bytes_loaded")) or 0) + (as_number(c.get("bytes_stored")) or 0)
            for c in cores.values()
            if isinstance(c, Mapping)
        )
        seconds = float(as_number(card.get("seconds")) or 0)
        points.append(KernelPoint(f"spyre:{i} whole run", float(as_number(card.get("flops")) or 0), moved, seconds))
    return points, False


def stall_table(stats: Mapping[str, Any], max_bars: int = 40) -> StallTable:
    """Stall cycles per launch (by name when there are more than max_bars), else per card, else per core.

    A file without stall categories gives per-core compute, memory and other cycles (other: busy
    minus compute minus memory), which every stats file has.

    Raises:
        ValueError: the file has no cards or no cores with cycles.
    """
    cards = [c for c in stats.get("cards") or [] if isinstance(c, Mapping)]
    if not cards:
        raise ValueError("stats: no cards in the file")
    several = len(cards) > 1
    launches = [
        (f"spyre:{i} " if several else "", x)
        for i, c in enumerate(cards)
        for x in c.get("launches") or []
        if isinstance(x, Mapping) and isinstance(x.get("stall"), Mapping)
    ]
    if launches:
        if len(launches) <= max_bars:
            rows = [
                (f"{prefix}{n} {x.get('name', '?')}", stall_cycles(x["stall"]))
                for n, (prefix, x) in enumerate(launches)
            ]
            return _table("launch", rows)
        by_name: dict[str, dict[str, float]] = {}
        for _, x in launches:
            total = by_name.setdefault(str(x.get("name", "?")), {})
            for k, v in stall_cycles(x["stall"]).items():
                total[k] = total.get(k, 0) + v
        return _table("launch name", list(by_name.items()))
    if any(isinstance(c.get("stall"), Mapping) for c in cards):
        return _table("card", [(f"spyre:{i}", stall_cycles(c.get("stall"))) for i, c in enumerate(cards)])
    rows = []
    for i, card in enumerate(cards):
        cores = card.get("cores") if isinstance(card.get("cores"), Mapping) else {}
        for core_id, core in sorted(cores.items(), key=lambda kv: int(kv[0]) if str(kv[0]).isdigit() else 0):
            if not isinstance(core, Mapping) or not (as_number(core.get("busy_cycles")) or 0):
                continue
            number = f"{int(core_id):02d}" if str(core_id).isdigit() else str(core_id)
            label = (f"spyre:{i} " if several else "") + f"core {number}"
            if isinstance(core.get("stall"), Mapping):
                rows.append((label, stall_cycles(core["stall"])))
            else:
                busy, compute = as_number(core.get("busy_cycles")) or 0, as_number(core.get("compute_cycles")) or 0
                memory = as_number(core.get("memory_cycles")) or 0
                rows.append((label, {"compute": compute, "memory": memory, "other": busy - compute - memory}))
    if not rows:
        raise ValueError("stats: no core ran a program")
    return _table("core", rows)


def _table(what: str, rows: list[tuple[str, Mapping[str, float]]]) -> StallTable:
    names = {k for _, r in rows for k in r}
    categories = [k for k in STALL_CATEGORIES if k in names] + sorted(names - set(STALL_CATEGORIES))
    return StallTable(
        what, [label for label, _ in rows], categories, [[r.get(k, 0) for k in categories] for _, r in rows]
    )
