"""Collectives among the cards of one server (torch_spyre.comm): peer-to-peer DMA across the
server's PCIe switch and reductions on the cards.

Results are compared with CPU torch reducing the same inputs. Times are compared with the ring
algorithm's analytical time for the configured links, computed here from the config's figures:
each card sends and receives 2(N-1)/N of the buffer, each byte on the wire with its share of the
packet overhead (pcie.max_payload_bytes, pcie.packet_overhead_bytes).
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

PAYLOAD, OVERHEAD = 256, 24  # the default pcie.max_payload_bytes and pcie.packet_overhead_bytes


def run(tmp_path, config: dict, code: str, timeout: int = 600) -> str:
    cfg = tmp_path / "server.json"
    cfg.write_text(json.dumps(config))
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    env = {
        **os.environ,
        "SPYRE_CONFIG": str(cfg),
        "TORCH_SPYRE_CPU_FALLBACK": "error",
        "TORCH_SPYRE_WAIT_TIMEOUT": "60",
    }
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_all_reduce_matches_cpu_for_every_op_dtype_size_and_algorithm(tmp_path):
    """Every card ends with the same bits, which match CPU torch's reduction of the inputs. Three
    cards exercise a ring whose waits cross cards while the awaited signal is in flight (such a
    wait once slept for good: the signal came during the semaphore's read across PCIe)."""
    out = run(
        tmp_path,
        {"sim": {"devices": 4}},
        """
        import torch, torch_spyre
        import torch_spyre.comm as comm
        torch.manual_seed(0)
        REF = {"sum": lambda s: s.sum(0), "avg": lambda s: s.mean(0), "product": lambda s: s.prod(0),
               "max": lambda s: s.max(0).values, "min": lambda s: s.min(0).values}
        checks = 0
        for cards in ([0, 1, 2, 3], [0, 1, 2], [1, 3]):
            for dtype in (torch.float32, torch.bfloat16, torch.int64):
                for numel in (0, 1, 3, 17, 1000, 12297):
                    for op in REF:
                        if op == "avg" and dtype == torch.int64:
                            continue
                        for algorithm in ("ring", "tree", None):
                            if dtype == torch.int64:
                                cpu = [torch.randint(-3, 4, (numel,)) for _ in cards]
                            else:
                                cpu = [(torch.rand(numel) + 0.5).to(dtype) for _ in cards]
                            # Made by a kernel on each card's current stream: the collective waits for it.
                            xs = [(c.to(f"spyre:{d}") * 1).view(-1) for c, d in zip(cpu, cards)]
                            comm.all_reduce(xs, op=op, algorithm=algorithm)
                            # Read on the current streams: ordered after the collective, no synchronize.
                            got = [(x + 0).cpu() for x in xs]
                            for g in got[1:]:
                                assert torch.equal(g, got[0]), (cards, dtype, numel, op, algorithm)
                            want = REF[op](torch.stack(cpu).double()).to(dtype)
                            tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.int64: 0}[dtype]
                            torch.testing.assert_close(got[0], want, rtol=tol, atol=tol)
                            checks += 1
        # A 2-D tensor, reduced in place and still the caller's tensor; a parameter (a leaf that
        # requires grad) reduces as data, as DDP reduces gradients.
        w = [torch.nn.Parameter(torch.ones(3, device=f"spyre:{i}")) for i in range(2)]
        comm.all_reduce(w)
        assert torch.equal(w[1].detach().cpu(), torch.full((3,), 2.0)) and w[1].requires_grad
        xs = [torch.full((5, 7), float(i + 1), device=f"spyre:{i}") for i in range(4)]
        ptrs = [x.data_ptr() for x in xs]
        comm.all_reduce(xs, slices=3)
        assert [x.data_ptr() for x in xs] == ptrs and all(x.shape == (5, 7) for x in xs)
        assert all(torch.equal(x.cpu(), torch.full((5, 7), 10.0)) for x in xs)
        print(checks)
        """,
    )
    assert int(out) == 3 * (3 * 6 * 5 - 6) * 3


def test_broadcast_all_gather_and_reduce_scatter_match_cpu(tmp_path):
    """Each against CPU torch on the same inputs, on 4, 3 and 2 cards, sizes that take the tree
    and the ring (several slices), uneven and empty; the inputs of all_gather and reduce_scatter
    are left as they were."""
    out = run(
        tmp_path,
        {"sim": {"devices": 4}},
        """
        import torch, torch_spyre
        import torch_spyre.comm as comm
        torch.manual_seed(0)
        REF = {"sum": lambda s: s.sum(0), "avg": lambda s: s.mean(0), "product": lambda s: s.prod(0),
               "max": lambda s: s.max(0).values, "min": lambda s: s.min(0).values}
        TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.int64: 0}
        def inputs(n, numel, dtype):
            if dtype == torch.int64:
                return [torch.randint(-3, 4, (numel,)) for _ in range(n)]
            return [(torch.rand(numel) + 0.5).to(dtype) for _ in range(n)]
        checks = 0
        for cards in ([0, 1, 2, 3], [2, 0, 1], [3, 1]):
            n = len(cards)
            for dtype in (torch.float32, torch.bfloat16, torch.int64):
                for numel in (0, 5, 1001, 300_000):  # 300000 fp32 per card: the ring, 1 MiB+ slices
                    for root in range(n):
                        for algorithm in ("tree", "ring", None):
                            cpu = inputs(n, numel, dtype)
                            xs = [(c.to(f"spyre:{d}") * 1) for c, d in zip(cpu, cards)]
                            comm.broadcast(xs, root=root, algorithm=algorithm)
                            for x in xs:
                                assert torch.equal((x + 0).cpu(), cpu[root]), ("broadcast", cards, numel, root)
                            checks += 1
                    cpu = inputs(n, numel, dtype)
                    ins = [(c.to(f"spyre:{d}") * 1) for c, d in zip(cpu, cards)]
                    outs = [torch.full((n * numel,), 9, dtype=dtype, device=f"spyre:{d}") for d in cards]
                    comm.all_gather(outs, ins)
                    for o in outs:
                        assert torch.equal((o + 0).cpu(), torch.cat(cpu)), ("all_gather", cards, numel)
                    for i, c in zip(ins, cpu):
                        assert torch.equal(i.cpu(), c)
                    checks += 1
                    for op in REF:
                        if op == "avg" and dtype == torch.int64:
                            continue
                        cpu = inputs(n, n * numel, dtype)
                        ins = [(c.to(f"spyre:{d}") * 1) for c, d in zip(cpu, cards)]
                        outs = [torch.full((numel,), 9, dtype=dtype, device=f"spyre:{d}") for d in cards]
                        comm.reduce_scatter(outs, ins, op=op)
                        want = REF[op](torch.stack(cpu).double()).to(dtype)
                        for r, o in enumerate(outs):
                            got = (o + 0).cpu()
                            part = want[r * numel : (r + 1) * numel]
                            torch.testing.assert_close(got, part, rtol=TOL[dtype], atol=TOL[dtype])
                        for i, c in zip(ins, cpu):
                            assert torch.equal(i.cpu(), c)
                        checks += 1
        print(checks)
        """,
        timeout=1200,
    )
    # per card set and dtype: 4 sizes x (n roots x 3 algorithms + 1 all_gather + ops)
    per = lambda n, ops: 4 * (3 * n + 1 + ops)  # noqa: E731
    assert int(out) == sum(per(n, 5) * 2 + per(n, 4) for n in (4, 3, 2))


def test_all_reduce_refuses_what_it_cannot_do(tmp_path):
    run(
        tmp_path,
        {"sim": {"devices": 2}},
        """
        import pytest, torch, torch_spyre
        import torch_spyre.comm as comm
        a, b = torch.ones(4, device="spyre:0"), torch.ones(4, device="spyre:1")
        cases = [
            (ValueError, "op must be", lambda: comm.all_reduce([a, b], op="xor")),
            (ValueError, "algorithm must be", lambda: comm.all_reduce([a, b], algorithm="mesh")),
            (ValueError, "slices must be", lambda: comm.all_reduce([a, b], slices=0)),
            (ValueError, "one tensor per card", lambda: comm.all_reduce([a, a])),
            (ValueError, "one dtype and shape", lambda: comm.all_reduce([a, torch.ones(5, device="spyre:1")])),
            (ValueError, "one dtype and shape", lambda: comm.all_reduce([a, b.long()])),
            (ValueError, "contiguous", lambda: comm.all_reduce([a.view(2, 2).t(), b.view(2, 2)])),
            (ValueError, "floating-point", lambda: comm.all_reduce([a.long(), b.long()], op="avg")),
            (TypeError, "spyre device", lambda: comm.all_reduce([a, torch.ones(4)])),
            (ValueError, "got none", lambda: comm.all_reduce([])),
        ]
        for kind, message, call in cases:
            with pytest.raises(kind, match=message):
                call()
        assert torch.equal(a.cpu(), torch.ones(4)) and torch.equal(b.cpu(), torch.ones(4))  # untouched
        """,
    )


RING = """
import json, sys, torch, torch_spyre
import torch_spyre.comm as comm
n, nbytes = {cards}, {nbytes}
xs = [torch.full((nbytes // 4,), float(i + 1), device=f"spyre:{{i}}") for i in range(n)]
for i in range(n):
    torch.spyre.synchronize(i)
start = torch_spyre.device_cycles(0)
comm.all_reduce(xs, algorithm="ring")
for i in range(n):
    torch.spyre.synchronize(i)
cycles = torch_spyre.device_cycles(0) - start
for x in xs:
    assert torch.equal(x[:: nbytes // 64].cpu(), torch.full((16,), n * (n + 1) / 2))
torch_spyre.write_reports()
print(cycles)
"""


def ring_all_reduce(tmp_path, cards: int, nbytes: int, link_gbps: float) -> tuple[float, dict, dict]:
    """Seconds of device time, the stats and the trace of one ring all-reduce on `cards` cards."""
    stats, trace = tmp_path / f"stats_{link_gbps}.json", tmp_path / f"trace_{link_gbps}.json"
    output = {"stats_path": str(stats), "trace_path": str(trace)}
    config = {"sim": {"devices": cards}, "pcie": {"bandwidth_gbps": link_gbps}, "output": output}
    cycles = int(run(tmp_path, config, RING.format(cards=cards, nbytes=nbytes)))
    # chip.clock_mhz: 1500
    return cycles / 1.5e9, json.loads(stats.read_text()), json.loads(trace.read_text())


def collective_tracks(trace: dict) -> dict[tuple[int, str], float]:
    """Per (card, track name): the microseconds of the trace's slices that are a collective's copies
    (named by their step: "all_reduce ring reduce-scatter 1/7 -> spyre:1")."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    busy: dict[tuple[int, str], float] = {}
    for e in events:
        if e.get("ph") == "X" and e["name"].startswith("all_reduce ring "):
            key = (e["pid"], names[e["pid"], e["tid"]])
            busy[key] = busy.get(key, 0.0) + e["dur"]
    return busy


def test_an_8_card_ring_all_reduce_of_256_mib_takes_the_rings_analytical_time(tmp_path):
    """Links of 32 and 16 GB/s (PCIe Gen4 x16 and x8), where the links, not device memory, bound
    the ring (each card's memory moves 5 bytes per byte its link carries in the reduce-scatter:
    within 204.8 GB/s). The time is within 10 % of 2(N-1)/N * size / link data rate, and halving
    the links doubles it. The switch carries every byte each card sends: 2(N-1) times the size."""
    n, nbytes = 8, 256 << 20
    seconds, tracks = {}, {}
    for gbps in (32.0, 16.0):
        seconds[gbps], stats, trace = ring_all_reduce(tmp_path, n, nbytes, gbps)
        tracks[gbps] = collective_tracks(trace)
        analytical = 2 * (n - 1) / n * nbytes / (gbps * 1e9 * PAYLOAD / (PAYLOAD + OVERHEAD))
        assert analytical <= seconds[gbps] <= 1.1 * analytical, (gbps, seconds[gbps], analytical)
        wire = 2 * (n - 1) * nbytes * (PAYLOAD + OVERHEAD) / PAYLOAD
        assert stats["server"]["switch"]["bytes"] == pytest.approx(wire, rel=1e-3)
        for card in stats["cards"]:  # every link carried its share, each way
            assert card["pcie"]["to_host"]["bytes"] == pytest.approx(wire / n, rel=1e-3)
            assert card["pcie"]["from_host"]["bytes"] == pytest.approx(wire / n, rel=1e-3)
    assert 1.9 <= seconds[16.0] / seconds[32.0] <= 2.1
    # In the trace, each card's collective copies are on a queue track of their own (the collective's
    # send stream), named by their step; the time they take follows the links.
    for gbps in (32.0, 16.0):
        assert sorted(card for card, _ in tracks[gbps]) == list(range(n))  # one track per card
        for (_, name), us in tracks[gbps].items():
            # Not queue 00, the default stream's, where the script's own kernels run.
            assert name.startswith("queue ") and name != "queue 00" and us <= seconds[gbps] * 1e6
    for key, us in tracks[32.0].items():
        assert 1.8 <= tracks[16.0][key] / us <= 2.2, key


def test_a_captured_all_reduce_replays_to_the_same_cycles(tmp_path):
    """A capture records where each card's DMA crossed the switch to another card, so that the
    replay sends the same bytes across it: the cycles of all three cards come back exactly."""
    capture, stats = tmp_path / "ring.cap", tmp_path / "stats.json"
    config = {"sim": {"devices": 3}, "output": {"capture_path": str(capture), "stats_path": str(stats)}}
    run(
        tmp_path,
        config,
        """
        import torch, torch_spyre
        import torch_spyre.comm as comm
        xs = [torch.arange(6000.0, device=f"spyre:{i}") * (i + 1) for i in range(3)]
        comm.all_reduce(xs, algorithm="ring", slices=2)
        comm.all_reduce(xs, algorithm="tree")
        assert torch.equal(xs[2].cpu(), torch.arange(6000.0) * 18)
        for i in range(3):  # a run that exits with work queued ends short of where a replay does
            torch.spyre.synchronize(i)
        """,
    )
    live = [card["cycles"] for card in json.loads(stats.read_text())["cards"]]
    spyre_sim = os.path.join(os.path.dirname(__file__), "..", "..", "build", "tools", "spyre_sim", "spyre-sim")
    proc = subprocess.run([spyre_sim, "replay", str(capture), "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["cycles"] == live == summary["captured_cycles"]
    assert summary["missing_reads"] == 0 and summary["diverged_writes"] == 0


def test_a_collective_writes_no_card_memory_that_work_queued_before_it_still_reads(tmp_path):
    """Card 0's current stream still has a long chain queued, and after it a kernel that reads
    `tmp`, freed at once on the host. The tree's staging on card 0 takes tmp's block back from the
    allocator; card 1's copy into it must wait for card 0's queued work, or the kernel reads card
    1's bytes instead of tmp's (it did: each card's sends waited for their own card only)."""
    run(
        tmp_path,
        {"sim": {"devices": 2}},
        """
        import torch, torch_spyre
        import torch_spyre.comm as comm
        n = 1 << 16
        host_tmp = torch.arange(float(n))
        a = torch.randn(1024, 1024, device="spyre:0")
        xs = [torch.full((n,), 5.0, device="spyre:0"), torch.full((n,), 7.0, device="spyre:1")]
        tmp = host_tmp.to("spyre:0")
        # Every kernel below runs once first: loading a program waits on the host, and a wait lets
        # the cards run what is queued, which would close the window.
        w = a
        for _ in range(6):
            w = w @ w * 1e-3
        _ = (tmp + w[0, 0] * 0) * 2
        comm.all_reduce([torch.ones(n, device="spyre:0"), torch.ones(n, device="spyre:1")], algorithm="tree")
        torch.spyre.synchronize(0)
        torch.spyre.synchronize(1)
        for _ in range(6):  # some 200 us of work on card 0's current stream
            a = a @ a * 1e-3
        r = (tmp + a[0, 0] * 0) * 2  # reads tmp after the chain
        del tmp  # its block goes back to card 0's current stream at once
        comm.all_reduce(xs, algorithm="tree")
        assert torch.equal(r.cpu(), host_tmp * 2)
        assert torch.equal(xs[0].cpu(), torch.full((n,), 12.0))
        """,
    )
