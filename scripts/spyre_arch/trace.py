"""Reading the simulator's Chrome/Perfetto trace: tracks, busy time per core, time per host op.

The trace is {"traceEvents": [...]} (a bare event list is accepted too). "M" thread_name events
name the tracks ("core 00", "queue 00", "dma channel 0", ...), "X" events are slices with ts and
dur in microseconds; a card is one pid. On a core track a program's slice encloses its
instructions' slices, and its MATMULs are on the track of its PT arrays ("core 00 PT"); on a
queue track each command's slice carries args.op, the host op that issued it, when there was one.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_CORE_TRACK = re.compile(r"^core (\d+)$")
# A core's PT arrays: its MATMULs, which run beside its other instructions (chip.pt_queue_depth).
_PT_SUFFIX = " PT"

Track = tuple[Any, Any]  # (pid, tid)


@dataclass
class Utilisation:
    """Busy fraction per core and time bin.

    Attributes:
        edges: bin edges in microseconds (len(bins) + 1).
        labels: one per row ("core 00", or "spyre:1 core 00" with several cards).
        busy: rows of busy fractions (0..1), one row per label, one value per bin.
    """

    edges: list[float]
    labels: list[str]
    busy: list[list[float]]


def events_of(trace: Mapping[str, Any] | Sequence[Any]) -> list[dict[str, Any]]:
    """The event list of a parsed trace, in either Chrome JSON form."""
    events = trace.get("traceEvents", []) if isinstance(trace, Mapping) else trace
    return [e for e in events if isinstance(e, dict)]


def track_names(events: Iterable[Mapping[str, Any]]) -> dict[Track, str]:
    """{(pid, tid): name} from the thread_name metadata events."""
    return {
        (e.get("pid"), e.get("tid")): str(e.get("args", {}).get("name", ""))
        for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name"
    }


def process_names(events: Iterable[Mapping[str, Any]]) -> dict[Any, str]:
    """{pid: name} from the process_name metadata events ("spyre:0 (config ...)")."""
    return {
        e.get("pid"): str(e.get("args", {}).get("name", ""))
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }


def slices_by_track(events: Iterable[Mapping[str, Any]]) -> dict[Track, list[Mapping[str, Any]]]:
    """The complete ("X") slices of each track, in time order."""
    tracks: dict[Track, list[Mapping[str, Any]]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and isinstance(e.get("ts"), int | float):
            tracks[(e.get("pid"), e.get("tid"))].append(e)
    for slices in tracks.values():
        slices.sort(key=lambda e: (e["ts"], -float(e.get("dur", 0))))
    return dict(tracks)


def leaf_intervals(slices: Sequence[Mapping[str, Any]], exclude: Iterable[str] = ()) -> list[tuple[float, float]]:
    """The [start, end) of the slices that enclose no other slice, minus the excluded names.

    A program slice around its instructions is left out when the instructions are there (a trace
    with output.trace_instructions off has only the program slices, which then count).

    Args:
        slices: one track's slices in time order (as slices_by_track gives them).
        exclude: slice names to leave out (e.g. "wait", "barrier").
    """
    spans = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), str(e.get("name", ""))) for e in slices]
    parent = [False] * len(spans)
    open_: list[int] = []
    for i, (start, end, _) in enumerate(spans):
        while open_ and spans[open_[-1]][1] <= start:
            open_.pop()
        if open_ and end <= spans[open_[-1]][1]:
            parent[open_[-1]] = True
        open_.append(i)
    skip = set(exclude)
    return [(s, e) for (s, e, name), p in zip(spans, parent, strict=True) if not p and name not in skip and e > s]


def pt_track(names: Mapping[Track, str], core: Track) -> Track | None:
    """The track of `core`'s PT arrays (its MATMULs), if the trace has one."""
    want = names.get(core, "") + _PT_SUFFIX
    return next((t for t, n in names.items() if t[0] == core[0] and n == want), None)


def core_busy(
    tracks: Mapping[Track, Sequence[Mapping[str, Any]]],
    names: Mapping[Track, str],
    core: Track,
    exclude: Iterable[str] = (),
) -> list[tuple[float, float]]:
    """The leaf slices of a core's track and of its PT arrays' track: when any of its units worked."""
    spans = leaf_intervals(tracks.get(core, []), exclude)
    if (pt := pt_track(names, core)) is not None:
        spans += leaf_intervals(tracks.get(pt, []), exclude)
    return spans


def union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Merges overlapping intervals; the result is sorted and disjoint."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def binned_fraction(intervals: Sequence[tuple[float, float]], edges: Sequence[float]) -> list[float]:
    """The fraction of each bin [edges[i], edges[i+1]) that disjoint intervals cover.

    Args:
        intervals: disjoint [start, end) intervals (as union gives them).
        edges: increasing bin edges.
    """
    covered = [0.0] * (len(edges) - 1)
    for start, end in intervals:
        i = max(0, bisect.bisect_right(edges, start) - 1)
        while i < len(covered) and edges[i] < end:
            covered[i] += max(0.0, min(end, edges[i + 1]) - max(start, edges[i]))
            i += 1
    return [c / (hi - lo) if hi > lo else 0.0 for c, lo, hi in zip(covered, edges[:-1], edges[1:], strict=True)]


def core_utilisation(
    trace: Mapping[str, Any] | Sequence[Any], bins: int = 100, exclude: Iterable[str] = ()
) -> Utilisation:
    """Busy fraction of every core track in `bins` equal time bins over the cores' active span.

    Cores without slices are rows of zeros: they show how much of the chip a workload used.

    Args:
        trace: the parsed trace.
        bins: number of time bins (at least 1).
        exclude: slice names that do not count as busy.
    Returns:
        The Utilisation, rows in card then core order.
    Raises:
        ValueError: the trace has no core tracks with slices.
    """
    events = events_of(trace)
    names, cards = track_names(events), process_names(events)
    tracks = slices_by_track(events)
    cores = sorted(
        (str(track[0]), int(m.group(1)), track, name) for track, name in names.items() if (m := _CORE_TRACK.match(name))
    )
    used = [e for c in cores for e in tracks.get(c[2], [])]
    if not used:
        raise ValueError("trace: no 'core NN' track with slices (did the workload run anything on the card?)")
    busy_spans = {c[2]: union(core_busy(tracks, names, c[2], exclude)) for c in cores}
    t0 = min(float(e["ts"]) for e in used)
    t1 = max(float(e["ts"]) + float(e.get("dur", 0)) for e in used)
    t1 = t1 if t1 > t0 else t0 + 1.0
    edges = [t0 + (t1 - t0) * i / max(1, bins) for i in range(max(1, bins) + 1)]
    several = len({c[0] for c in cores}) > 1
    labels = [f"{cards.get(c[2][0], c[0]).split(' ')[0]} {c[3]}" if several else c[3] for c in cores]
    return Utilisation(edges, labels, [binned_fraction(busy_spans[c[2]], edges) for c in cores])


def op_breakdown(trace: Mapping[str, Any] | Sequence[Any]) -> list[tuple[str, float, int]]:
    """Time on the queue tracks per host op (args.op, else the command's slice name).

    Returns:
        [(op, total microseconds, commands)], longest first (ties by name).
    Raises:
        ValueError: the trace has no queue track with slices.
    """
    events = events_of(trace)
    tracks = slices_by_track(events)
    queues = [t for t, name in track_names(events).items() if name.startswith("queue") and tracks.get(t)]
    if not queues:
        raise ValueError("trace: no 'queue NN' track with slices")
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for track in queues:
        for e in tracks[track]:
            op = (e.get("args") or {}).get("op") or str(e.get("name", "?"))
            totals[op][0] += float(e.get("dur", 0))
            totals[op][1] += 1
    return sorted(((op, t, int(n)) for op, (t, n) in totals.items()), key=lambda x: (-x[1], x[0]))
