"""A simulator stats file (`$SPYRE_STATS`) as one flat row of columns, and the card's roofs.

The stats file grows with the model, so every section is optional: a section that is missing gives
no column (a NaN in a table that has it from other rows), never an error. With several cards in one
run, times are the longest card's, counts and energies are summed, fractions are averaged.
"""

from __future__ import annotations

import json
import math
import pathlib
from collections.abc import Iterable, Mapping
from typing import Any

# The stall categories the model reports, in the order plots stack them; any other category the
# file names is kept too, after these.
STALL_CATEGORIES = ("compute", "memory", "ring", "sync", "issue", "idle")

Number = int | float


def load_json(path: str | pathlib.Path) -> dict[str, Any]:
    """Reads a JSON file (stats, trace or config).

    Args:
        path: the file.
    Returns:
        The parsed object.
    Raises:
        OSError: the file cannot be read. ValueError: it is not JSON.
    """
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def peak_flops(config: Mapping[str, Any]) -> float | None:
    """The card's fp16 PT-array peak in FLOP/s: cores x corelets x rows x cols x SIMD x 2 x clock.

    Args:
        config: the full config tree (a stats file's "config").
    Returns:
        FLOP/s, or None when the config lacks one of the figures.
    """
    chip = config.get("chip") or {}
    keys = ("cores", "corelets_per_core", "pt_rows", "pt_cols", "pt_simd", "clock_mhz")
    values = [as_number(chip.get(k)) for k in keys]
    if any(v is None for v in values):
        return None
    return math.prod(values) * 2 * 1e6


def memory_roof(config: Mapping[str, Any]) -> float | None:
    """The LPDDR5 bandwidth in bytes/s (memory.bandwidth_gbps x 1e9), or None when absent."""
    gbps = as_number((config.get("memory") or {}).get("bandwidth_gbps"))
    return None if gbps is None else gbps * 1e9


def flatten_stats(stats: Mapping[str, Any]) -> dict[str, Any]:
    """Flattens a parsed stats file into columns.

    Args:
        stats: the parsed stats JSON ({"config_hash", "config", "cards": [...], ...}).
    Returns:
        A flat dict. Always present when the file has them: config_hash, cards, cycles, seconds,
        flops; and as the sections appear: flops_per_second, pt_peak_fraction (of the fp16 PT
        peak), commands_<kind>, command_errors, bytes_<h2d|d2h|d2d>, msix, core_<counter> (every
        numeric per-core counter, summed over cores), cores_used, core_busy_max,
        core_busy_fraction, stall_<category>, launches, launches_dropped, launch_cycles,
        mem_channel_bytes, mem_channel_util_mean/max, ring_link_bytes, ring_link_util_mean/max,
        pcie_<path> (its numeric leaves, summed over cards), energy_<part>_j,
        trace_dropped_events. Column names have no dots, so they never clash with swept config
        keys.
    """
    row: dict[str, Any] = {}
    if isinstance(stats.get("config_hash"), str):
        row["config_hash"] = stats["config_hash"]
    cards = [c for c in stats.get("cards") or [] if isinstance(c, Mapping)]
    row["cards"] = len(cards)
    _put_max(row, "cycles", (c.get("cycles") for c in cards))
    _put_max(row, "seconds", (c.get("seconds") for c in cards))
    _put_sum(row, "flops", (c.get("flops") for c in cards))
    peak = peak_flops(stats.get("config") or {})
    if row.get("seconds") and "flops" in row:
        row["flops_per_second"] = row["flops"] / row["seconds"]
        if peak:
            row["pt_peak_fraction"] = row["flops_per_second"] / (peak * len(cards))
    for name in ("commands", "bytes"):
        _put_section_sums(row, name, (c.get(name) for c in cards))
    _put_sum(row, "command_errors", (c.get("command_errors") for c in cards))
    _put_sum(row, "msix", (c.get("msix") for c in cards))
    _put_cores(row, cards)
    _put_stalls(row, cards)
    _put_launches(row, cards)
    _put_links(row, "mem_channel", [m for c in cards for m in _records(c.get("memory_channels"))])
    _put_links(row, "ring_link", [r for c in cards for r in _records(c.get("ring_links"))])
    for card in cards:
        _put_leaves(row, "pcie", card.get("pcie"))
    energy: dict[str, float] = {}
    for card in cards:
        for part, joules in (card.get("energy_j") or {}).items():
            if (j := as_number(joules)) is not None:
                energy[part] = energy.get(part, 0.0) + j
    for part, joules in energy.items():
        row[f"energy_{part}_j"] = joules
    if (dropped := as_number(stats.get("trace_dropped_events"))) is not None:
        row["trace_dropped_events"] = dropped
    return row


def stall_cycles(section: Mapping[str, Any] | None) -> dict[str, Number]:
    """The numeric stall categories of one "stall" section, the known ones first."""
    section = section if isinstance(section, Mapping) else {}
    known = [k for k in STALL_CATEGORIES if k in section]
    names = known + sorted(k for k in section if k not in STALL_CATEGORIES)
    return {k: v for k in names if (v := as_number(section[k])) is not None}


def as_number(value: Any) -> Number | None:
    """The value if it is a real number (an int or a float, not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def _records(value: Any) -> list[Mapping[str, Any]]:
    return [r for r in value if isinstance(r, Mapping)] if isinstance(value, list) else []


def _put_sum(row: dict[str, Any], name: str, values: Iterable[Any]) -> None:
    numbers = [n for v in values if (n := as_number(v)) is not None]
    if numbers:
        row[name] = sum(numbers)


def _put_max(row: dict[str, Any], name: str, values: Iterable[Any]) -> None:
    numbers = [n for v in values if (n := as_number(v)) is not None]
    if numbers:
        row[name] = max(numbers)


def _put_section_sums(row: dict[str, Any], name: str, sections: Iterable[Any]) -> None:
    totals: dict[str, Number] = {}
    for section in sections:
        for key, value in (section or {}).items() if isinstance(section, Mapping) else ():
            if (n := as_number(value)) is not None:
                totals[key] = totals.get(key, 0) + n
    for key in sorted(totals):
        row[f"{name}_{key}"] = totals[key]


def _put_cores(row: dict[str, Any], cards: list[Mapping[str, Any]]) -> None:
    per_card = [c.get("cores") for c in cards]
    cores = [core for cs in per_card if isinstance(cs, Mapping) for core in cs.values() if isinstance(core, Mapping)]
    if not cores:
        return
    names = {k: None for core in cores for k, v in core.items() if as_number(v) is not None}
    for counter in names:  # programs, instructions, busy_cycles, bytes_loaded, ... whatever the model counts
        _put_sum(row, f"core_{counter}", (core.get(counter) for core in cores))
    busy = [as_number(core.get("busy_cycles")) or 0 for core in cores]
    row["cores_used"] = sum(1 for b in busy if b > 0)
    row["core_busy_max"] = max(busy)
    fractions = []
    for card, card_cores in zip(cards, per_card, strict=True):
        cycles = as_number(card.get("cycles"))
        if isinstance(card_cores, Mapping) and card_cores and cycles:
            total = sum(as_number(c.get("busy_cycles")) or 0 for c in card_cores.values() if isinstance(c, Mapping))
            fractions.append(total / (cycles * len(card_cores)))
    if fractions:
        row["core_busy_fraction"] = sum(fractions) / len(fractions)


def _put_stalls(row: dict[str, Any], cards: list[Mapping[str, Any]]) -> None:
    totals: dict[str, Number] = {}
    for card in cards:
        if isinstance(card.get("stall"), Mapping):
            sections = [card["stall"]]
        else:  # a file whose cards do not sum the stalls: the cores do
            cores = card.get("cores") if isinstance(card.get("cores"), Mapping) else {}
            sections = [c.get("stall") for c in cores.values() if isinstance(c, Mapping)]
        for section in sections:
            for key, value in stall_cycles(section).items():
                totals[key] = totals.get(key, 0) + value
    for key, value in totals.items():
        row[f"stall_{key}"] = value


def _put_launches(row: dict[str, Any], cards: list[Mapping[str, Any]]) -> None:
    if not any(isinstance(c.get("launches"), list) for c in cards):
        return
    launches = [launch for c in cards for launch in _records(c.get("launches"))]
    row["launches"] = len(launches)
    _put_sum(row, "launches_dropped", (c.get("launches_dropped") for c in cards))
    spans = [(as_number(x.get("start")), as_number(x.get("end"))) for x in launches]
    _put_sum(row, "launch_cycles", (end - start for start, end in spans if start is not None and end is not None))


def _put_links(row: dict[str, Any], prefix: str, records: list[Mapping[str, Any]]) -> None:
    _put_sum(row, f"{prefix}_bytes", (r.get("bytes") for r in records))
    utils = [u for r in records if (u := as_number(r.get("utilisation"))) is not None]
    if utils:
        row[f"{prefix}_util_mean"] = sum(utils) / len(utils)
        row[f"{prefix}_util_max"] = max(utils)


def _put_leaves(row: dict[str, Any], prefix: str, section: Any) -> None:
    """Sums the numeric leaves of a nested section into <prefix>_<path> columns."""
    if not isinstance(section, Mapping):
        return
    for key, value in section.items():
        name = f"{prefix}_{key}"
        if isinstance(value, Mapping):
            _put_leaves(row, name, value)
        elif (n := as_number(value)) is not None:
            row[name] = row.get(name, 0) + n
