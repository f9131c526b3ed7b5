"""What the benchmarks share: a warmed-up median of wall times."""

from __future__ import annotations

import statistics
import time


def median_seconds(fn, repeat: int) -> float:
    """Median wall time of `repeat` calls of `fn`, after one warm-up call (compile, load, caches)."""
    fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)
