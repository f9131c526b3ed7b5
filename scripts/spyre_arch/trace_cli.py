"""spyre-trace: what a simulator trace (`$SPYRE_TRACE`, `--trace`) says, without opening Perfetto.

spyre-trace summarize out/spyre_trace.json                 top kernels, cores, DMA channels, idle gaps
spyre-trace summarize out/spyre_trace.json --stats out/spyre_stats.json --top 5 --json
spyre-trace convert out/spyre_trace.json -o out/spyre_trace.pftrace      Perfetto's protobuf format

The kernels are the launches on the queue tracks, by program name, with the host op that queued
them and their device time (the command's slice: from the firmware taking it to its completion).
Per core: busy time (the instructions' slices, its PT arrays' MATMULs with them) and where it
went, by instruction kind ("wait" is time waiting for transfers to land, "barrier" for other
cores); with the run's stats file, also the model's stall categories. Per DMA channel: the bytes
it moved and its rate while busy. Idle gaps: the time each queue had nothing running between its
first command and its last.
"""

from __future__ import annotations

import argparse
import bisect
import json
import re
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from spyre_arch import trace
from spyre_arch.commands import missing_extra, version
from spyre_arch.stats import STALL_CATEGORIES, load_json

# The queue commands that are not launches (hw/commands.h, opcode_name).
_COMMANDS = {"nop", "copy", "timestamp", "signal", "wait", "sanitize"}
_DMA_TRACK = re.compile(r"^dma channel (\d+)$")


def _command(e: Mapping[str, Any]) -> str:
    """A queue slice's command, without a failure suffix ("copy (failed: ...)" -> "copy")."""
    return str(e.get("name", "")).split(" (failed:")[0]


def summarize(events: Sequence[Mapping[str, Any]], stats: Mapping[str, Any] | None = None, top: int = 10) -> dict:
    """The summary of a trace's events (and, optionally, of the same run's stats) as a dict."""
    names = trace.track_names(events)
    tracks = trace.slices_by_track(events)
    queues = {t: n for t, n in names.items() if n.startswith("queue") and tracks.get(t)}
    cores = {t: n for t, n in names.items() if trace._CORE_TRACK.match(n) and tracks.get(t)}
    dmas = {t: n for t, n in names.items() if _DMA_TRACK.match(n) and tracks.get(t)}

    kernels: dict[str, dict[str, Any]] = {}
    failed = 0
    for t in queues:
        for e in tracks[t]:
            name = _command(e)
            if name in _COMMANDS:
                continue
            k = kernels.setdefault(name, {"kernel": name, "launches": 0, "us": 0.0, "ops": set()})
            k["launches"] += 1
            k["us"] += float(e.get("dur", 0))
            if op := (e.get("args") or {}).get("op"):
                k["ops"].add(op)
            failed += "(failed:" in str(e.get("name", ""))
    total = sum(k["us"] for k in kernels.values())
    table = sorted(kernels.values(), key=lambda k: (-k["us"], k["kernel"]))
    for k in table:
        k["ops"] = sorted(k["ops"])
        k["share"] = k["us"] / total if total else 0.0

    core_rows = []
    for t, name in sorted(cores.items(), key=lambda x: (str(x[0][0]), x[1])):
        pt = trace.pt_track(names, t)
        slices = [*tracks[t], *(tracks.get(pt, []) if pt is not None else [])]
        leaf_spans = trace.core_busy(tracks, names, t)
        busy = sum(b - a for a, b in trace.union(leaf_spans))
        kinds: dict[str, float] = defaultdict(float)
        leaves = set(leaf_spans)
        for e in slices:
            a = float(e["ts"])
            b = a + float(e.get("dur", 0))
            if (a, b) in leaves:
                kinds[str(e.get("name", "")).removesuffix(" issue")] += b - a
        programs = sum(1 for e in slices if e.get("name") == "program")
        core_rows.append(
            {
                "core": name,
                "programs": programs,
                "busy_us": busy,
                "kinds": dict(sorted(kinds.items(), key=lambda x: -x[1])),
            }
        )

    dma_rows = []
    for t, name in sorted(dmas.items(), key=lambda x: int(_DMA_TRACK.match(x[1]).group(1))):
        moved = sum(int((e.get("args") or {}).get("bytes", 0)) for e in tracks[t])
        busy = sum(b - a for a, b in trace.union(trace.leaf_intervals(tracks[t])))
        rate = moved / busy / 1e3 if busy else 0.0  # bytes per microsecond / 1e3 = GB/s
        dma_rows.append({"channel": name, "bytes": moved, "busy_us": busy, "gb_per_s": rate})

    gaps = []
    for t, name in sorted(queues.items(), key=lambda x: x[1]):
        spans = trace.union((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in tracks[t])
        holes = [(a1, b0) for (_, a1), (b0, _) in zip(spans, spans[1:], strict=False) if b0 > a1]
        span = spans[-1][1] - spans[0][0] if spans else 0.0
        idle = sum(b - a for a, b in holes)
        largest = sorted(holes, key=lambda h: -(h[1] - h[0]))[:3]
        gaps.append(
            {
                "queue": name,
                "span_us": span,
                "idle_us": idle,
                "idle_share": idle / span if span else 0.0,
                "largest": [{"from_us": a, "us": b - a} for a, b in largest],
            }
        )

    out: dict[str, Any] = {
        "kernels": table[:top],
        "kernels_total": {"kernels": len(table), "launches": sum(k["launches"] for k in table), "us": total},
        "failed_launches": failed,
        "cores": core_rows,
        "dma": dma_rows,
        "queues": gaps,
    }
    if stats is not None:
        out["stall"] = _stalls(stats)
    return out


def _stalls(stats: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The stats file's stall cycles per core of each card: [{"card", "core", category: cycles}]."""
    rows = []
    for c, card in enumerate(stats.get("cards", [])):
        cores = card.get("cores") or {}
        for i, core in sorted(((int(k), v) for k, v in cores.items()) if isinstance(cores, dict) else enumerate(cores)):
            stall = core.get("stall") or {}
            if not any(stall.values()):
                continue
            row = {"card": c, "core": i}
            row.update({k: stall.get(k, 0) for k in (*STALL_CATEGORIES, *sorted(set(stall) - set(STALL_CATEGORIES)))})
            rows.append(row)
    return rows


def _us(x: float) -> str:
    return f"{x / 1e3:.3f} ms" if x >= 1e3 else f"{x:.2f} us"


def format_summary(s: Mapping[str, Any]) -> str:
    """The summary as text."""
    lines = []
    t = s["kernels_total"]
    lines.append(f"kernels: {t['launches']} launches of {t['kernels']} kernels, {_us(t['us'])} on the queues")
    if s["failed_launches"]:
        lines.append(f"  {s['failed_launches']} launch(es) failed")
    for k in s["kernels"]:
        ops = ", ".join(k["ops"]) or "-"
        lines.append(f"  {k['share']:6.1%}  {_us(k['us']):>11}  x{k['launches']:<5} {k['kernel']}  [{ops}]")
    lines.append("cores (busy time, and its largest parts):")
    for c in s["cores"]:
        parts = ", ".join(f"{k} {_us(v)}" for k, v in list(c["kinds"].items())[:4])
        lines.append(f"  {c['core']}: {c['programs']} programs, busy {_us(c['busy_us'])}: {parts}")
    if "stall" in s:
        lines.append("stall cycles per core (stats):")
        for r in s["stall"]:
            cats = ", ".join(f"{k} {v}" for k, v in r.items() if k not in ("card", "core") and v)
            lines.append(f"  card {r['card']} core {r['core']:02}: {cats}")
    lines.append("DMA channels:")
    for d in s["dma"]:
        lines.append(f"  {d['channel']}: {d['bytes']} bytes, busy {_us(d['busy_us'])}, {d['gb_per_s']:.1f} GB/s busy")
    lines.append("queues (idle gaps between their first and last command):")
    for q in s["queues"]:
        big = ", ".join(f"{_us(g['us'])} at {_us(g['from_us'])}" for g in q["largest"]) or "none"
        idle = f"idle {_us(q['idle_us'])} of {_us(q['span_us'])} ({q['idle_share']:.1%})"
        lines.append(f"  {q['queue']}: {idle}; largest {big}")
    return "\n".join(lines) + "\n"


def to_perfetto(events: Sequence[Mapping[str, Any]]) -> bytes:
    """The trace in Perfetto's protobuf format (perfetto.trace_builder): a track per card and per
    queue, core and DMA channel; each slice with its arguments as debug annotations; each flow
    attached to the slices that enclose its two ends."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent
    from perfetto.trace_builder.proto_builder import TraceProtoBuilder

    builder = TraceProtoBuilder()
    seq = 1
    cards = trace.process_names(events)
    names = trace.track_names(events)
    tracks = trace.slices_by_track(events)
    uuid: dict[Any, int] = {}
    for pid, name in sorted(cards.items(), key=lambda x: str(x[0])):
        uuid[("card", pid)] = len(uuid) + 1
        p = builder.add_packet()
        p.track_descriptor.uuid = uuid[("card", pid)]
        p.track_descriptor.process.pid = int(pid) + 1
        p.track_descriptor.process.process_name = name
    for t, name in sorted(names.items(), key=lambda x: (str(x[0][0]), x[0][1])):
        uuid[t] = len(uuid) + 1
        p = builder.add_packet()
        p.track_descriptor.uuid = uuid[t]
        p.track_descriptor.name = name
        if ("card", t[0]) in uuid:
            p.track_descriptor.parent_uuid = uuid[("card", t[0])]

    def ns(us: float) -> int:
        return round(float(us) * 1000)

    # The slice each flow end lands in: the outermost slice of its track that encloses it (on a
    # core's track, the program rather than its first instruction).
    starts = {t: [float(e["ts"]) for e in slices] for t, slices in tracks.items()}
    longest = {t: max((float(e.get("dur", 0)) for e in slices), default=0.0) for t, slices in tracks.items()}

    def enclosing(t, at: float) -> Mapping[str, Any] | None:
        best = None
        i = bisect.bisect_right(starts.get(t, []), at) - 1
        while i >= 0 and starts[t][i] >= at - longest[t]:
            e = tracks[t][i]
            dur = float(e.get("dur", 0))
            if at <= float(e["ts"]) + dur and (best is None or dur >= float(best.get("dur", 0))):
                best = e
            i -= 1
        return best

    flows_out: dict[int, list[int]] = defaultdict(list)
    flows_in: dict[int, list[int]] = defaultdict(list)
    for e in events:
        if e.get("ph") in ("s", "f"):
            host = enclosing((e.get("pid"), e.get("tid")), float(e["ts"]))
            if host is not None:
                (flows_out if e["ph"] == "s" else flows_in)[id(host)].append(int(e["id"]))

    # Slices nest by their times in whole nanoseconds (the JSON's microseconds carry float noise
    # that makes adjacent slices overlap by a hair). A slice that would outlast the one around it
    # (the simulator writes none) is cut at its end, so that every end closes the slice it should.
    timeline = []  # (ns, order, track, slice or None for an end)
    order = 0
    for t, slices in tracks.items():
        stack: list[int] = []  # end times of the open slices of this track
        spans = sorted(
            ((ns(e["ts"]), ns(float(e["ts"]) + float(e.get("dur", 0))), e) for e in slices), key=lambda x: (x[0], -x[1])
        )
        for start, end, e in spans:
            while stack and stack[-1] <= start:
                timeline.append((stack.pop(), order, t, None))
                order += 1
            timeline.append((start, order, t, e))
            order += 1
            stack.append(min(end, stack[-1]) if stack else end)
        while stack:
            timeline.append((stack.pop(), order, t, None))
            order += 1
    timeline.sort(key=lambda x: (x[0], x[1]))
    for at, _, t, e in timeline:
        p = builder.add_packet()
        p.timestamp = at
        p.trusted_packet_sequence_id = seq
        p.track_event.track_uuid = uuid[t]
        if e is None:
            p.track_event.type = TrackEvent.TYPE_SLICE_END
            continue
        p.track_event.type = TrackEvent.TYPE_SLICE_BEGIN
        p.track_event.name = str(e.get("name", ""))
        for k, v in (e.get("args") or {}).items():
            a = p.track_event.debug_annotations.add()
            a.name = str(k)
            if isinstance(v, bool) or not isinstance(v, int | float):
                a.string_value = str(v)
            elif isinstance(v, int):
                a.int_value = v
            else:
                a.double_value = v
        p.track_event.flow_ids.extend(flows_out.get(id(e), []))
        p.track_event.terminating_flow_ids.extend(flows_in.get(id(e), []))
    return builder.serialize()


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="spyre-trace", description="Summaries of a simulator trace.")
    p.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    s = sub.add_parser("summarize", help="top kernels, cores, DMA channels and idle gaps of a trace")
    s.add_argument("trace", help="TRACE.json ($SPYRE_TRACE of a run)")
    s.add_argument("--stats", help="the same run's STATS.json: adds the model's stall cycles per core")
    s.add_argument("--top", type=int, default=10, help="kernels listed (default: 10)")
    s.add_argument("--json", action="store_true", help="print the summary as JSON")
    c = sub.add_parser("convert", help="the trace in Perfetto's protobuf format")
    c.add_argument("trace", help="TRACE.json")
    c.add_argument("-o", "--out", required=True, help="the .pftrace file to write")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        events = trace.events_of(load_json(args.trace))
        stats = load_json(args.stats) if getattr(args, "stats", None) else None
    except (OSError, ValueError) as e:
        print(f"spyre-trace: {e}", file=sys.stderr)
        return 1
    if args.command == "convert":
        try:
            data = to_perfetto(events)
        except ModuleNotFoundError as e:  # perfetto: the arch extra
            sys.stderr.write(missing_extra("spyre-trace", e))
            return 2
        with open(args.out, "wb") as f:
            f.write(data)
        return 0
    s = summarize(events, stats, top=max(1, args.top))
    sys.stdout.write(json.dumps(s, indent=1) + "\n" if args.json else format_summary(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
