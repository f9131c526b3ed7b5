"""The caching device allocator: allocation plus free against the driver path, and fragmentation.

(a) Microseconds per allocation plus free, median over batches: in C++ (torch_spyre._C's timing
    helper: the c10 allocator, stream lookup included, against DeviceRuntime::alloc/free, the
    driver's first-fit map), and from Python (``torch.empty(n, device="spyre")`` then drop it), the
    latter once cached and once in a child process with TORCH_SPYRE_NO_MEMORY_CACHING=1, where
    every tensor is a driver allocation.
(b) Fragmentation after a long run of random allocations and frees shaped like a RAG server: many
    small embedding and KV-cache tensors, some activations, a few large batch buffers, with a
    bounded live set. Printed as peak reserved over peak allocated (1.0 would be no waste).

    python benchmarks/allocator.py [--ops 100000] [--batches 50] [--per-batch 1000]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import statistics
import subprocess
import sys
import time

import torch

SIZES = {"4 KiB": 4 << 10, "256 KiB": 256 << 10, "4 MiB": 4 << 20, "64 MiB": 64 << 20}


def python_path_us(nbytes: int, batches: int, per_batch: int) -> float:
    """Median microseconds of torch.empty(nbytes) on spyre and dropping it."""
    torch.empty(nbytes, dtype=torch.uint8, device="spyre")  # warm-up: open the device, fill the cache
    samples = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(per_batch):
            torch.empty(nbytes, dtype=torch.uint8, device="spyre")
        samples.append((time.perf_counter() - start) / per_batch * 1e6)
    return statistics.median(samples)


def cpp_path_us(nbytes: int, batches: int, per_batch: int, driver_path: bool, background: int = 0) -> float:
    """Median microseconds per allocation plus free in C++, over a heap of `background` blocks
    (half of them freed again, leaving holes)."""
    ext = importlib.import_module("torch_spyre._C")
    ext._time_alloc_free(0, nbytes, 1, 10, driver_path)  # warm-up
    return statistics.median(ext._time_alloc_free(0, nbytes, batches, per_batch, driver_path, background))


def uncached_python_us(batches: int, per_batch: int) -> dict[str, float]:
    """The Python figures in a child process without caching (the driver path end to end)."""
    env = dict(os.environ, TORCH_SPYRE_NO_MEMORY_CACHING="1")
    argv = [sys.executable, __file__, "--python-only", "--batches", str(batches), "--per-batch", str(per_batch)]
    out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def rag_size(rng: random.Random) -> int:
    """One tensor of the mix: 70% embeddings and small KV blocks (1-64 KiB), 20% KV pages and
    attention scratch (64 KiB-1 MiB), 8% activations (1-16 MiB), 2% batch buffers (16-128 MiB)."""
    r = rng.random()
    if r < 0.70:
        return rng.randint(1 << 10, 64 << 10)
    if r < 0.90:
        return rng.randint(64 << 10, 1 << 20)
    if r < 0.98:
        return rng.randint(1 << 20, 16 << 20)
    return rng.randint(16 << 20, 128 << 20)


def fragmentation(ops: int, live_cap: int, seed: int) -> dict[str, float]:
    """Runs `ops` random allocations and frees (at most `live_cap` live tensors) and returns the
    allocator's peak figures."""
    torch.spyre.synchronize()
    torch.spyre.empty_cache()
    torch.spyre.reset_peak_memory_stats()
    torch.spyre.reset_accumulated_memory_stats()
    rng = random.Random(seed)
    live: list[torch.Tensor] = []
    for _ in range(ops):
        if live and (len(live) >= live_cap or rng.random() < 0.45):
            live[rng.randrange(len(live))] = live[-1]
            live.pop()
        else:
            live.append(torch.empty(rag_size(rng), dtype=torch.uint8, device="spyre"))
    stats = torch.spyre.memory_stats()
    result = {
        "peak_allocated": stats["allocated_bytes.all.peak"],
        "peak_reserved": stats["reserved_bytes.all.peak"],
        "end_allocated": stats["allocated_bytes.all.current"],
        "end_reserved": stats["reserved_bytes.all.current"],
        "segments": stats["segment.all.peak"],
        "device_allocs": stats["num_device_alloc"],
    }
    live.clear()
    torch.spyre.empty_cache()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=100_000, help="allocations plus frees in the fragmentation run")
    parser.add_argument("--live", type=int, default=2_000, help="most tensors alive at once in that run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batches", type=int, default=50, help="timed batches (the median is printed)")
    parser.add_argument("--per-batch", type=int, default=1_000, help="allocations plus frees per batch")
    parser.add_argument("--background", type=int, default=2_000, help="blocks on the heap in the populated timing")
    parser.add_argument("--python-only", action="store_true", help=argparse.SUPPRESS)  # the uncached child
    args = parser.parse_args()

    if args.python_only:
        print(json.dumps({k: python_path_us(n, args.batches, args.per_batch) for k, n in SIZES.items()}))
        return

    print("(a) allocation plus free, microseconds (median of batches)")
    uncached = uncached_python_us(args.batches, args.per_batch)
    header = (
        f"{'size':>8} | {'C++ cached':>10} | {'C++ driver':>10} | {'C++ cached':>10} | {'C++ driver':>10} | "
        f"{'Python cached':>13} | {'Python driver':>13}"
    )
    print(f"{'':>8} | {'empty heap':>23} | {f'{args.background} blocks, half freed':>23} |")
    print(header)
    print("-" * len(header))
    for name, nbytes in SIZES.items():
        cached = cpp_path_us(nbytes, args.batches, args.per_batch, driver_path=False)
        driver = cpp_path_us(nbytes, args.batches, args.per_batch, driver_path=True)
        cached_bg = cpp_path_us(nbytes, args.batches, args.per_batch, False, args.background)
        driver_bg = cpp_path_us(nbytes, args.batches, args.per_batch, True, args.background)
        py_cached = python_path_us(nbytes, args.batches, args.per_batch)
        print(
            f"{name:>8} | {cached:10.3f} | {driver:10.3f} | {cached_bg:10.3f} | {driver_bg:10.3f} | "
            f"{py_cached:13.3f} | {uncached[name]:13.3f}"
        )
    print("C++ cached: the c10 allocator (current stream, cache); C++ driver: DeviceRuntime::alloc/free, the")
    print("driver's first-fit map (in process here; an ioctl on a real card). Python: torch.empty and drop")
    print("(Python driver: a process with TORCH_SPYRE_NO_MEMORY_CACHING=1). Goal: cached < 2 us.")
    print()

    start = time.perf_counter()
    f = fragmentation(args.ops, args.live, args.seed)
    took = time.perf_counter() - start
    mib = 1 << 20
    print(f"(b) fragmentation: {args.ops} random allocations and frees, RAG-style mix, <= {args.live} live")
    print(f"{'figure':>30} | {'value':>12}")
    print("-" * 45)
    print(f"{'peak allocated (MiB)':>30} | {f['peak_allocated'] / mib:12.1f}")
    print(f"{'peak reserved (MiB)':>30} | {f['peak_reserved'] / mib:12.1f}")
    print(f"{'reserved at end (MiB)':>30} | {f['end_reserved'] / mib:12.1f}")
    print(f"{'allocated at end (MiB)':>30} | {f['end_allocated'] / mib:12.1f}")
    print(f"{'segments at peak':>30} | {f['segments']:12d}")
    print(f"{'driver allocations':>30} | {f['device_allocs']:12d}")
    print(f"{'peak reserved / peak allocated':>30} | {f['peak_reserved'] / f['peak_allocated']:12.3f}")
    print(f"{'end reserved / peak allocated':>30} | {f['end_reserved'] / f['peak_allocated']:12.3f}")
    print(f"({took:.1f} s)")


if __name__ == "__main__":
    main()
