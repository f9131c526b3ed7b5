"""The command path on both transports: inproc (the card in this process) and socket (the card in
spyre-simd, over a Unix socket with shared DMA memory).

For each transport, in a fresh process:
  empty command   median wall time of a NOP descriptor, submit to completion seen by the host
                  (torch_spyre.debug.empty_command_round_trips), after a warm-up
  seed matmul     median wall time of the seed program: both 1024 x 1024 fp32 operands .to("spyre"),
                  matmul, result .cpu()
The socket run starts its own daemon on a private socket and leaves it to exit when idle.
Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = """
import json, statistics, sys, time, torch, torch_spyre
from torch_spyre.debug import empty_command_round_trips
count, repeat = int(sys.argv[1]), int(sys.argv[2])
empty_command_round_trips(200)  # warm-up: the daemon, the queue, the pages
trips = empty_command_round_trips(count)
host = torch.randn(1024, 1024, generator=torch.Generator().manual_seed(0))
def seed():
    d = host.to("spyre")
    return torch.matmul(d, d).cpu()
seed()
walls = []
for _ in range(repeat):
    t = time.perf_counter()
    seed()
    walls.append(time.perf_counter() - t)
print(json.dumps({"trip": statistics.median(trips), "trip_p90": sorted(trips)[int(0.9 * len(trips))],
                  "seed": statistics.median(walls)}))
"""


def measure(transport: str, count: int, repeat: int, socket_dir: str) -> dict:
    env = dict(os.environ, SPYRE_TRANSPORT=transport, SPYRE_SIMD_SOCKET=os.path.join(socket_dir, "bench.sock"))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(count), str(repeat)], env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        sys.exit(f"{transport}: {proc.stderr.strip()}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=2000, help="empty commands per run")
    parser.add_argument("--repeat", type=int, default=10, help="seed matmuls per run")
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per transport; medians are printed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as socket_dir:
        for transport in ("inproc", "socket"):
            runs = [measure(transport, args.count, args.repeat, socket_dir) for _ in range(args.runs)]
            trip = statistics.median(r["trip"] for r in runs)
            p90 = statistics.median(r["trip_p90"] for r in runs)
            seed = statistics.median(r["seed"] for r in runs)
            print(
                f"{transport:<7} empty command round trip: median {trip * 1e6:7.1f} us (p90 {p90 * 1e6:7.1f} us)   "
                f"seed matmul wall: {seed * 1e3:6.1f} ms   ({args.runs} processes)"
            )


if __name__ == "__main__":
    main()
