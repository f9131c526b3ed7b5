"""Soak: does the host process stay the size of what it holds?

Runs random mixed work on the device for a while: GEMMs and elementwise ops of changing shapes,
allocations of up to 64 MiB, copies both ways, work on side streams, torch.compile'd functions
called with changing shapes. Prints the process RSS every interval, then drops every tensor,
calls torch.spyre.empty_cache() and prints the RSS again.

The goals (issue 19): the RSS at the end within 300 MiB of the RSS after the first minute, and
empty_cache giving the freed device memory back to the operating system (the simulated card's
memory lives in this process, so device memory that stays backed is host memory that stays used).

    python benchmarks/soak.py [--minutes 10] [--interval 30] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import time

import torch
import torch_spyre  # noqa: F401  (registers the device)


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def step(rng: random.Random, keep: list, compiled) -> None:
    """One random piece of work; `keep` is a bounded set of live tensors it adds to and drops from."""
    kind = rng.choice(["gemm", "pointwise", "alloc", "copy", "stream", "compile"])
    dev = "spyre"
    if kind == "gemm":
        m, k, n = (rng.choice([16, 64, 100, 128, 256, 384, 512]) for _ in range(3))
        dtype = rng.choice([torch.float32, torch.float16])
        a = torch.randn(m, k, device=dev, dtype=dtype)
        b = torch.randn(k, n, device=dev, dtype=dtype)
        keep.append(a @ b)
    elif kind == "pointwise":
        n = rng.choice([1, 1000, 65536, 1 << 20, 3 << 20])
        x = torch.randn(n, device=dev)
        keep.append(torch.nn.functional.gelu(x * 2 + 1).sum(0, keepdim=True))
    elif kind == "alloc":
        nbytes = rng.choice([4 << 10, 1 << 20, 16 << 20, 64 << 20])
        t = torch.empty(nbytes // 4, device=dev)
        t.fill_(1.0)
        keep.append(t)
    elif kind == "copy":
        n = rng.choice([1000, 1 << 18, 4 << 20])
        host = torch.randn(n)
        back = host.to(dev).mul_(3).cpu()
        assert torch.equal(back, host * 3)
    elif kind == "stream":
        s = torch.spyre.Stream()
        with torch.spyre.stream(s):
            x = torch.randn(rng.choice([1024, 1 << 20]), device=dev)
            y = (x * x).sum()
        torch.spyre.current_stream().wait_stream(s)
        x.record_stream(torch.spyre.current_stream())
        keep.append(y)
    else:
        rows = rng.choice([8, 16, 24, 32, 40, 48, 64, 96, 128])
        keep.append(compiled(torch.randn(rows, 64, device=dev)))
    while len(keep) > 24 or sum(t.numel() * t.element_size() for t in keep) > (256 << 20):
        keep.pop(rng.randrange(len(keep)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--interval", type=float, default=30.0, help="seconds between RSS lines")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)

    weight = torch.randn(64, 64, device="spyre")

    @torch.compile(backend="spyre")
    def mlp(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ weight).softmax(-1) * 2

    keep: list = []
    start = time.monotonic()
    end = start + args.minutes * 60
    next_print = start
    after_first_minute = None
    steps = 0
    print(f"{'seconds':>8} {'steps':>7} {'rss MiB':>8} {'device MiB':>10}")
    while True:
        now = time.monotonic()
        if now >= next_print or now >= end:
            torch.spyre.synchronize()
            rss = rss_mib()
            print(f"{now - start:8.0f} {steps:7d} {rss:8.0f} {torch.spyre.memory_reserved() / 2**20:10.0f}", flush=True)
            if after_first_minute is None and now - start >= 60:
                after_first_minute = rss
            next_print += args.interval
        if now >= end:
            break
        step(rng, keep, mlp)
        steps += 1
    final = rss_mib()
    keep.clear()
    torch.spyre.synchronize()
    before_empty = rss_mib()
    torch.spyre.empty_cache()
    emptied = rss_mib()
    reference = after_first_minute if after_first_minute is not None else final
    print(f"after the first minute: {reference:.0f} MiB; at the end: {final:.0f} MiB ({final - reference:+.0f} MiB)")
    print(
        f"tensors dropped: {before_empty:.0f} MiB; after empty_cache: {emptied:.0f} MiB "
        f"({emptied - before_empty:+.0f} MiB; device reserved {torch.spyre.memory_reserved() / 2**20:.0f} MiB)"
    )


if __name__ == "__main__":
    main()
