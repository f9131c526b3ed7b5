"""The simulator's trace and stats files, checked against an analytical count of the work, and the
profiler's view of the device."""

from __future__ import annotations

import collections
import json
import pathlib
import re
import subprocess
import sys
import time

import torch
import torch_spyre
from conftest import run_python


def test_trace_and_stats_describe_the_run(tmp_path):
    trace, stats = tmp_path / "trace.json", tmp_path / "stats.json"
    code = (
        "import torch, torch_spyre\n"
        "a = torch.ones(256, 384); b = torch.ones(384, 128)\n"
        "c = (a.to('spyre') @ b.to('spyre')).cpu()\n"
        "assert torch.equal(c, torch.full((256, 128), 384.0))\n"
        "print(*torch_spyre.write_reports())\n"
    )
    proc = run_python(code, env={"SPYRE_TRACE": str(trace), "SPYRE_STATS": str(stats)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(trace), str(stats)]

    s = json.loads(stats.read_text())
    t = json.loads(trace.read_text())
    assert s["config_hash"] == t["otherData"]["config_hash"]
    card = s["cards"][0]
    assert card["flops"] == 2 * 256 * 384 * 128
    launches = card["commands"]["launch"]
    assert card["command_errors"] == 0
    assert card["bytes"]["h2d"] >= (256 * 384 + 384 * 128) * 4
    assert card["bytes"]["d2h"] == 256 * 128 * 4
    # The compiler divides the 256 x 128 output into one equal block per core, so every core
    # stores the same bytes and they add up to the output. A and B cross the memory at least once:
    # exactly once when the cores share them (the resident-B plan multicasts each byte once), more
    # when each core loads the strips of its own block.
    cores = list(card["cores"].values())
    assert sum(c["bytes_stored"] for c in cores) == 256 * 128 * 4
    assert len({c["bytes_stored"] for c in cores}) == 1
    assert sum(c["bytes_loaded"] for c in cores) >= (256 * 384 + 384 * 128) * 4

    names = {e["args"]["name"] for e in t["traceEvents"] if e.get("name") == "thread_name"}
    assert {"core 00", "core 01", "dma channel 0", "queue 00"} <= names
    slices = [e for e in t["traceEvents"] if e["ph"] == "X"]
    kinds = {e["name"] for e in slices}
    assert {"matmul", "wait", "store issue", "copy h2d", "copy d2h"} <= kinds
    assert {"load issue", "load multicast issue"} & kinds
    assert all(e["dur"] >= 0 and isinstance(e["args"], dict) for e in slices)
    # Each launch on a queue track is named by its program and tagged with the ATen op.
    queue_tids = {e["tid"] for e in t["traceEvents"] if e.get("name") == "thread_name" and "queue" in e["args"]["name"]}
    named = [(e["name"], e["args"].get("op")) for e in slices if e["tid"] in queue_tids and "op" in e["args"]]
    assert len(named) == launches
    assert ("mm f32 256x384x128", "aten::mm") in named


def test_trace_is_identical_run_to_run(tmp_path):
    # Host timing differs between runs (threads, load); device time and the trace must not.
    code = (
        "import torch, torch_spyre\n"
        "x = torch.ones(300, 200).to('spyre'); w = torch.ones(200, 150, dtype=torch.float16).to('spyre')\n"
        "for _ in range(3):\n"
        "    y = x @ x.t(); z = w.t() @ w; x.clone()\n"
        "print(y.cpu().sum().item(), z.cpu().sum().item())\n"
    )
    traces = []
    for run in range(2):
        path = tmp_path / f"trace{run}.json"
        proc = run_python(code, env={"SPYRE_TRACE": str(path)})
        assert proc.returncode == 0, proc.stderr
        traces.append(path.read_bytes())
    assert traces[0] == traces[1]
    assert b'"matmul"' in traces[0]


def test_legacy_profiler_with_the_spyre_device_reports_sane_times():
    """torch.autograd.profiler.profile(use_device="spyre") once printed CPU times near -7e16 us (no
    PrivateUse1 profiler hooks). Every time is now between zero and the wall time, and the op that
    waits for the card (item) sees the card's clock advance while it waits."""
    m = torch.nn.Linear(512, 512).to("spyre")
    x = torch.randn(256, 512).to("spyre")
    m(x).sum().item()
    start = time.perf_counter()
    with torch.autograd.profiler.profile(use_device="spyre") as prof:
        for _ in range(3):
            m(x).sum().item()
    wall_us = (time.perf_counter() - start) * 1e6
    events = prof.key_averages()
    assert events
    for e in events:
        assert 0 <= e.cpu_time_total <= wall_us, (e.key, e.cpu_time_total)
        assert e.self_device_time_total >= 0, (e.key, e.self_device_time_total)
    item = next(e for e in events if e.key == "aten::item")
    assert item.count == 3 and item.device_time_total > 0


def test_torch_profiler_shows_device_kernels_and_copies_with_device_time(tmp_path):
    """torch.profiler with ProfilerActivity.PrivateUse1: each kernel and copy is a device event
    timed by the card, linked to the op that queued it, and the exported trace has device tracks."""
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(512, 512, device="spyre")
    (x @ x).cpu()  # warm up: the program is loaded
    torch.spyre.synchronize()
    c0 = torch_spyre.device_cycles()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        y = x @ x
        out = y.cpu()
    cycles = torch_spyre.device_cycles() - c0
    torch.testing.assert_close(out, x.cpu() @ x.cpu(), rtol=1e-3, atol=1e-3)
    clock_mhz = torch_spyre.device_info()["clock_mhz"]

    mm = next(e for e in prof.key_averages() if e.key == "aten::mm" and e.device_time_total > 0)
    # The kernel's device time is part of the card's time over the whole profiled region, and at
    # least the PT array's time for the 2 * 512^3 flops at its fp32 peak (a quarter of the fp16
    # peak of 32 cores x 2 corelets x 8 x 8 PEs x 8 lanes, two flops each).
    fp32_flops_per_cycle = 32 * 2 * 8 * 8 * 8 * 2 * 0.25
    assert 2 * 512**3 / fp32_flops_per_cycle / clock_mhz <= mm.device_time_total <= cycles / clock_mhz

    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    copies = [e for e in events if e.get("cat") == "gpu_memcpy"]
    assert [k["name"] for k in kernels] == ["mm f32 512x512x512"]  # the program's name
    assert kernels[0]["args"]["stream"] == 0 and kernels[0]["args"]["device"] == 0
    mm_op = next(e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::mm")
    assert kernels[0]["args"]["External id"] == mm_op["args"]["External id"]  # linked to its op
    assert any(c["name"] == "Memcpy DtoH" and c["args"]["bytes"] == 512 * 512 * 4 for c in copies)
    # DtoH from the card: the modelled link moves 64 GB/s, so 1 MiB takes at least 16 us.
    d2h = next(c for c in copies if c["name"] == "Memcpy DtoH")
    assert d2h["dur"] >= 512 * 512 * 4 / 64e9 * 1e6
    # Without PrivateUse1 activity, no device events.
    with profile(activities=[ProfilerActivity.CPU]) as cpu_only:
        x @ x
    assert all(e.device_time_total == 0 for e in cpu_only.key_averages())


def _run_traced(code: str, tmp_path) -> tuple[str, list[dict]]:
    """Runs `code` in a fresh process with a trace; its stdout and the trace's events."""
    trace = tmp_path / "trace.json"
    proc = run_python(code, env={"SPYRE_TRACE": str(trace)})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, json.loads(trace.read_text())["traceEvents"]


def test_every_instruction_slice_is_a_line_of_its_launchs_listing(tmp_path):
    # A matmul then a softmax: loads, multicasts, waits, matmuls, SFP passes, stores and barriers.
    code = (
        "import torch, torch_spyre.debug\n"
        "a = torch.randn(96, 64).to('spyre'); b = torch.randn(64, 80).to('spyre')\n"
        "torch.softmax(a @ b, dim=-1).cpu()\n"
        "for op in ('aten::mm', 'aten::_softmax'):\n"
        "    print('@@', op); print(torch_spyre.debug.listing(op))\n"
    )
    stdout, events = _run_traced(code, tmp_path)
    listings: dict[str, dict[int, str]] = {}
    for block in stdout.split("@@ ")[1:]:
        op, *lines = block.splitlines()
        instructions = (line.split(maxsplit=1) for line in lines if line and not line.startswith(";"))
        listings[op] = {int(n): text for n, text in instructions}
    slices = [e for e in events if e["ph"] == "X"]
    # Each launch's window on the queue track, and its op: the core slices inside it are its.
    queue_tids = {e["tid"] for e in events if e.get("name") == "thread_name" and "queue" in e["args"]["name"]}
    launches = [
        (e["ts"], e["ts"] + e["dur"], e["args"]["op"]) for e in slices if e["tid"] in queue_tids and "op" in e["args"]
    ]
    mnemonic = {
        "load": "LOAD",
        "store": "STORE",
        "gather": "GATHER",
        "scatter": "SCATTER",
        "load multicast": "LOAD_MC",
        "wait": "WAIT",
        "barrier": "BARRIER",
        "matmul": "MATMUL",
        "convert": "CONVERT",
        "unary": "UNARY",
        "binary": "BINARY",
        "select": "SELECT",
        "fma": "FMA",
        "reduce": "REDUCE",
        "fill": "FILL",
        "iota": "IOTA",
        "transpose": "TRANSP",
        "scan": "SCAN",
        "random": "RANDOM",
    }
    checked, operands = set(), set()
    for e in slices:
        if "instruction" not in e["args"]:
            continue
        op = next(op for start, end, op in launches if start <= e["ts"] <= end)
        if op not in listings:
            continue
        kind = e["name"].removesuffix(" issue")
        line = listings[op][e["args"]["instruction"]]
        assert line.split()[0] == mnemonic[kind], (op, e)
        checked.add((op, kind))
        # The operands as the core resolved them: where the listing's first scratchpad address
        # (the destination, or a store's source) has no register added, the slice carries it.
        first = re.search(r"lx\[(r\d+\+)?(0x[0-9a-f]+)\]", line)
        key = "lx" if "lx" in e["args"] else "dst" if "dst" in e["args"] else None
        if first and key and not first.group(1):
            assert e["args"][key] == int(first.group(2), 16), (op, line, e["args"])
            operands.add(kind)
        if kind == "matmul":
            m, k, n = (int(x) for x in re.search(r"M=(\d+) K=(\d+) N=(\d+)", line).groups())
            assert (e["args"]["m"], e["args"]["k"], e["args"]["n"]) == (m, k, n), (line, e["args"])
    assert {("aten::mm", "matmul"), ("aten::_softmax", "reduce"), ("aten::_softmax", "unary")} <= checked, checked
    assert {"matmul", "load"} <= operands, operands


def test_a_pointwise_or_reduction_kernel_is_named_by_the_op_that_launched_it(tmp_path):
    # "reduce +7 f32 [64,1]" said how a layer norm runs, not what it is.
    code = (
        "import torch, torch_spyre\n"
        "x = torch.randn(64, 64).to('spyre'); y = torch.empty_like(x)\n"
        "torch.nn.functional.layer_norm(x, (64,)).cpu(); torch.softmax(x, -1).cpu()\n"
        "x.add_(1); y.copy_(x.t()); (x @ x).cpu()\n"
    )
    _, events = _run_traced(code, tmp_path)
    names = {e["args"]["op"]: e["name"] for e in events if e["ph"] == "X" and "op" in e["args"]}
    assert names["aten::native_layer_norm"].startswith("native_layer_norm (reduce +")
    assert names["aten::_softmax"].startswith("softmax (reduce +")
    assert names["aten::add_.Tensor"] == "add (pointwise f32 [64,64])"
    assert names["aten::copy_"] == "copy (pointwise f32 [64,64])"  # a transposing copy is a kernel
    assert names["aten::mm"] == "mm f32 64x64x64"  # a matmul's own name says what it is


def test_spyre_trace_summarizes_a_gpt_forward_as_the_stats_count_it(tmp_path):
    # A GPT-2-style forward with its trace and stats; `spyre-trace summarize` reads the trace alone
    # (and the stats for the stall table): its kernels must be the launches the card counted, by
    # program name and op, and its DMA bytes the card's host copies.
    trace, stats = tmp_path / "trace.json", tmp_path / "stats.json"
    code = (
        "import torch, torch_spyre, transformers as T\n"
        "torch.manual_seed(0)\n"
        "cfg = T.GPT2Config(vocab_size=128, n_positions=64, n_embd=64, n_layer=2, n_head=4)\n"
        "m = T.GPT2LMHeadModel(cfg).eval().to('spyre')\n"
        "with torch.no_grad():\n"
        "    m(torch.randint(0, 128, (2, 16)).to('spyre')).logits.cpu()\n"
    )
    proc = run_python(code, env={"SPYRE_TRACE": str(trace), "SPYRE_STATS": str(stats)})
    assert proc.returncode == 0, proc.stderr
    tool = pathlib.Path(sys.executable).parent / "spyre-trace"
    args = ["summarize", str(trace), "--stats", str(stats), "--top", "1000"]
    out = subprocess.run([str(tool), *args, "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    card = json.loads(stats.read_text())["cards"][0]
    counted = collections.Counter(launch["name"] for launch in card["launches"])
    assert {k["kernel"]: k["launches"] for k in s["kernels"]} == dict(counted)
    for k in s["kernels"]:
        assert set(k["ops"]) == {launch["op"] for launch in card["launches"] if launch["name"] == k["kernel"]}
    assert [k["us"] for k in s["kernels"]] == sorted((k["us"] for k in s["kernels"]), reverse=True)
    assert abs(sum(k["share"] for k in s["kernels"]) - 1) < 1e-9
    assert sum(d["bytes"] for d in s["dma"]) == card["bytes"]["h2d"] + card["bytes"]["d2h"] + card["bytes"]["d2d"]
    stall = {(r["card"], r["core"]): r for r in s["stall"]}
    for core, c in card["cores"].items():
        if any(c["stall"].values()):
            assert all(stall[(0, int(core))][k] == v for k, v in c["stall"].items())
    assert sum(c["programs"] for c in s["cores"]) == sum(c["programs"] for c in card["cores"].values())
    text = subprocess.run([str(tool), *args], capture_output=True, text=True, timeout=120).stdout
    assert text.startswith(f"kernels: {len(card['launches'])} launches of {len(counted)} kernels")
    assert "native_layer_norm" in text and "idle gaps" in text

    # `convert`: the same trace in Perfetto's protobuf format, read back with Perfetto's own schema:
    # every slice on its track with its name, start and end to the nanosecond, and every flow
    # from a launch to a program.
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    out_pf = tmp_path / "trace.pftrace"
    done = subprocess.run([str(tool), "convert", str(trace), "-o", str(out_pf)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    packets = Trace.FromString(out_pf.read_bytes()).packet
    events = json.loads(trace.read_text())["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    track_name = {p.track_descriptor.uuid: p.track_descriptor.name for p in packets if p.HasField("track_descriptor")}
    got, open_ = collections.Counter(), collections.defaultdict(list)
    for p in packets:
        if not p.HasField("track_event"):
            continue
        ev = p.track_event
        if ev.type == TrackEvent.TYPE_SLICE_BEGIN:
            open_[ev.track_uuid].append((p.timestamp, ev.name))
        else:
            start, name = open_[ev.track_uuid].pop()
            got[(track_name[ev.track_uuid], name, start, p.timestamp)] += 1
    assert not any(open_.values())
    want = collections.Counter(
        (names[(e["pid"], e["tid"])], e["name"], round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000))
        for e in events
        if e.get("ph") == "X"
    )
    assert got == want
    flows = [i for p in packets for i in p.track_event.flow_ids]
    ends = [(i, p.track_event.name) for p in packets for i in p.track_event.terminating_flow_ids]
    assert sorted(flows) == sorted(i for i, _ in ends) == sorted(e["id"] for e in events if e.get("ph") == "s")
    assert {name for _, name in ends} == {"program"}


def test_each_launch_has_a_flow_to_each_of_its_cores_programs(tmp_path):
    # In the simulator's trace an arrow leads from each launch on its queue's track to the program
    # of every core it ran on: as many as the stats count cores per launch, one into each program.
    trace, stats = tmp_path / "trace.json", tmp_path / "stats.json"
    code = (
        "import torch, torch_spyre\n"
        "a = torch.randn(96, 64).to('spyre'); b = torch.randn(64, 80).to('spyre')\n"
        "torch.softmax(a @ b, dim=-1).cpu(); (a[:4] + 1).cpu()\n"
    )
    proc = run_python(code, env={"SPYRE_TRACE": str(trace), "SPYRE_STATS": str(stats)})
    assert proc.returncode == 0, proc.stderr
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    starts = {e["id"]: e for e in events if e.get("ph") == "s"}
    ends = {e["id"]: e for e in events if e.get("ph") == "f"}
    assert starts.keys() == ends.keys()
    launches = [e for e in events if e.get("ph") == "X" and names[e["tid"]].startswith("queue") and "op" in e["args"]]
    programs = [e for e in events if e.get("ph") == "X" and e["name"] == "program"]
    card = json.loads(stats.read_text())["cards"][0]
    assert len(starts) == sum(launch["cores"] for launch in card["launches"]) == len(programs)
    into = collections.Counter()
    for fid, s in starts.items():
        f = ends[fid]
        assert names[s["tid"]].startswith("queue") and names[f["tid"]].startswith("core")
        assert any(x["tid"] == s["tid"] and x["ts"] <= s["ts"] <= x["ts"] + x["dur"] for x in launches)
        (program,) = [p for p in programs if p["tid"] == f["tid"] and p["ts"] == f["ts"]]
        into[(program["tid"], program["ts"])] += 1
    assert set(into.values()) == {1}


def test_a_gpt_forward_profiled_links_each_kernel_to_its_op_by_a_flow(tmp_path):
    # torch.profiler over a GPT-2-style forward: the exported trace has the host's ops and the
    # card's kernels on device tracks, and every kernel is the end of an ac2g flow that starts at
    # the ATen op (same External id) that queued it.
    import transformers as T
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    cfg = T.GPT2Config(vocab_size=128, n_positions=64, n_embd=64, n_layer=2, n_head=4)
    model = T.GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 128, (2, 16))
    dev = model.to("spyre")
    with torch.no_grad():
        dev(ids.to("spyre")).logits.cpu()  # warm up: programs loaded
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            dev(ids.to("spyre")).logits.cpu()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op" and "External id" in e["args"]}
    assert len(kernels) > 20
    assert {"native_layer_norm", "mm", "add"} <= {k["name"].split(" ")[0] for k in kernels}
    flows = collections.defaultdict(dict)
    for e in events:
        if e.get("cat") == "ac2g" and e.get("ph") in ("s", "f"):
            flows[e["id"]][e["ph"]] = e
    device_tracks = {(k["pid"], k["tid"]) for k in kernels}
    for k in kernels:
        op = ops[k["args"]["External id"]]
        assert op["name"].startswith("aten::")
        (flow,) = [
            f
            for f in flows.values()
            if "f" in f and f["f"]["ts"] == k["ts"] and (f["f"]["pid"], f["f"]["tid"]) in device_tracks
        ]
        start = flow["s"]
        assert (start["pid"], start["tid"]) == (op["pid"], op["tid"])
        assert op["ts"] <= start["ts"] <= op["ts"] + op["dur"]


def test_a_listing_heads_each_op_of_its_graph_and_names_each_argument_s_tensor():
    x = torch.randn(64, 48).to("spyre")
    torch.nn.functional.layer_norm(x, (48,)).cpu()
    listing = torch_spyre.debug.listing("aten::native_layer_norm")
    heads = [line for line in listing.splitlines() if line.startswith("; op ")]
    # The mean, the variance and the normalisation: reductions to one value per row, then the rows;
    # every op of the graph once, in order.
    assert heads[0] == "; op 0: reduce f32 [64,1]" and "; op 2: pointwise f32 [64,48]" in heads, heads
    assert [int(h.split()[2].rstrip(":")) for h in heads] == list(range(len(heads)))
    args = {line.split("; ")[-1] for line in listing.splitlines() if " ARG " in line}
    assert "in f32 [64, 48]" in args and "out f32 [64, 48]" in args, args
