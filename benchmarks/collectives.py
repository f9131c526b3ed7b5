"""All-reduce bus bandwidth among the cards of one simulated server, as nccl-tests reports it.

For 2, 4 and 8 cards and sizes from 4 KiB to 1 GiB (float32), times torch_spyre.comm.all_reduce
in device time (the simulated cards' clock) and prints, per size: the algorithm the size chose,
the time, the algorithm bandwidth (size / time) and the bus bandwidth (algorithm bandwidth *
2(N-1)/N: what each card's link carries, comparable across card counts). Each size runs twice and
the second run is reported (the first also loads the reduction's program onto the cards).

    .venv/bin/python benchmarks/collectives.py [--cards 2 4 8] [--max-bytes 1073741824] [--config FILE]
    .venv/bin/python benchmarks/collectives.py --processes [--cards 2 4] [--max-bytes 268435456]

`--processes` times torch.distributed's all_reduce instead: one process per card (torchrun), each
a client of one spyre-simd, so the `spyre` backend runs it on the cards; it also prints the host
time per call, which holds the backend's per-call exchange through Gloo.

`--config` takes a config whose keys override the defaults (pcie.bandwidth_gbps, server.*); the
card count is set here. Run it alone on the machine; it needs about 10 GB of host memory at 1 GiB
on 8 cards.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

WORKER = """
import json, sys, torch, torch_spyre
import torch_spyre.comm as comm
n, sizes = int(sys.argv[1]), json.loads(sys.argv[2])
for nbytes in sizes:
    xs = [torch.full((nbytes // 4,), float(i + 1), device=f"spyre:{i}") for i in range(n)]
    for _ in range(2):
        for x, i in zip(xs, range(n)):
            x.fill_(float(i + 1))
        for i in range(n):
            torch.spyre.synchronize(i)
        start = torch_spyre.device_cycles(0)
        comm.all_reduce(xs)
        for i in range(n):
            torch.spyre.synchronize(i)
        cycles = torch_spyre.device_cycles(0) - start
    assert torch.equal(xs[-1][-1:].cpu(), torch.tensor([n * (n + 1) / 2]))
    algorithm = "tree" if nbytes < comm.TREE_BELOW_BYTES else "ring"
    print(json.dumps({"bytes": nbytes, "cycles": cycles, "algorithm": algorithm}), flush=True)
    del xs
"""


# One rank of --processes: rank 0 prints, per size, the device time from the earliest start to the
# latest end over every card (one simulated clock) and its own host time for the call.
RANK_WORKER = """
import json, os, sys, time, torch, torch.distributed as dist, torch_spyre
sizes = json.loads(sys.argv[1])
rank, n, card = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
torch.spyre.set_device(card)
dist.init_process_group("spyre")
host = dist.new_group(backend="gloo")
for nbytes in sizes:
    x = torch.full((nbytes // 4,), float(rank + 1), device="spyre")
    for _ in range(2):
        x.fill_(float(rank + 1))
        torch.spyre.synchronize()
        dist.barrier(group=host)
        start, wall = torch_spyre.device_cycles(card), time.perf_counter()
        dist.all_reduce(x)
        torch.spyre.synchronize()
        wall, end = time.perf_counter() - wall, torch_spyre.device_cycles(card)
        marks = [torch.zeros(2, dtype=torch.int64) for _ in range(n)]
        dist.all_gather(marks, torch.tensor([start, end]), group=host)
    assert torch.equal(x[-1:].cpu(), torch.tensor([n * (n + 1) / 2]))
    if rank == 0:
        cycles = max(int(m[1]) for m in marks) - min(int(m[0]) for m in marks)
        algorithm = "tree" if nbytes < 512 * 1024 else "ring"
        print(json.dumps({"bytes": nbytes, "cycles": cycles, "algorithm": algorithm, "wall": wall}), flush=True)
    del x
assert torch_spyre.distributed.device_collectives() > 0  # the cards ran them, not Gloo
dist.destroy_process_group()
"""

ROOT = pathlib.Path(__file__).resolve().parents[1]


def ranks_on_one_daemon(
    n: int, config: pathlib.Path, sizes: list[int], env: dict, tmp: str
) -> tuple[subprocess.Popen, subprocess.Popen]:
    """torchrun of RANK_WORKER on n processes, each a client of one spyre-simd: (the daemon, to stop
    when the ranks are done; the torchrun)."""
    worker = pathlib.Path(tmp) / "rank_worker.py"
    worker.write_text(RANK_WORKER)
    sock = pathlib.Path(tmp) / f"simd{n}.sock"
    env = {**env, "SPYRE_CONFIG": str(config), "SPYRE_SIMD_SOCKET": str(sock)}
    simd = [str(ROOT / "build" / "simd" / "spyre-simd"), "--socket", str(sock), "--slots", "1"]
    daemon = subprocess.Popen(simd, env=env, stdout=subprocess.DEVNULL)
    for _ in range(500):
        if sock.exists() or daemon.poll() is not None:
            break
        time.sleep(0.02)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", str(worker)]
    ranks = subprocess.Popen(
        [*argv, json.dumps(sizes)], stdout=subprocess.PIPE, text=True, env={**env, "SPYRE_TRANSPORT": "socket"}
    )
    return daemon, ranks


def human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}"
        n //= 1024
    return str(n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cards", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--max-bytes", type=int, default=1 << 30)
    parser.add_argument("--config", type=pathlib.Path, help="a config of overrides (JSON)")
    parser.add_argument("--processes", action="store_true", help="torch.distributed ranks on one spyre-simd")
    args = parser.parse_args()
    sizes = [4096 * 4**k for k in range(11) if 4096 * 4**k <= args.max_bytes]
    base = json.loads(args.config.read_text()) if args.config else {}
    clock_mhz = base.get("chip", {}).get("clock_mhz", 1500)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPYRE_", "TORCH_SPYRE_"))}
    host = " host time per call (ms) |" if args.processes else ""
    print("| cards | size | algorithm | time (us) | algbw (GB/s) | busbw (GB/s) |" + host)
    print("|---|---|---|---|---|---|" + ("---|" if args.processes else ""))
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.cards:
            config = pathlib.Path(tmp) / f"server{n}.json"
            config.write_text(json.dumps({**base, "sim": {**base.get("sim", {}), "devices": n}}))
            daemon = None
            if args.processes:
                daemon, proc = ranks_on_one_daemon(n, config, sizes, env, tmp)
            else:
                proc = subprocess.Popen(
                    [sys.executable, "-c", WORKER, str(n), json.dumps(sizes)],
                    stdout=subprocess.PIPE,
                    text=True,
                    env={**env, "SPYRE_CONFIG": str(config)},
                )
            assert proc.stdout is not None
            for line in proc.stdout:
                r = json.loads(line)
                seconds = r["cycles"] / (clock_mhz * 1e6)
                algbw = r["bytes"] / seconds / 1e9
                busbw = algbw * 2 * (n - 1) / n
                size, micros = human(r["bytes"]), f"{seconds * 1e6:.1f}"
                row = [str(n), size, r["algorithm"], micros, f"{algbw:.2f}", f"{busbw:.2f}"]
                if "wall" in r:
                    row.append(f"{r['wall'] * 1e3:.1f}")
                print("| " + " | ".join(row) + " |", flush=True)
            if daemon is not None:
                daemon.terminate()
                daemon.wait()
            if proc.wait() != 0:
                sys.exit(f"collectives: the {n}-card run failed (exit {proc.returncode})")


if __name__ == "__main__":
    main()
