"""Several host threads share one device: results stay right and nothing deadlocks."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch


def test_concurrent_matmuls_and_copies():
    inputs = [torch.randn(96 + 8 * i, 64, generator=torch.Generator().manual_seed(i)) for i in range(8)]

    def work(x: torch.Tensor) -> torch.Tensor:
        d = x.to("spyre")
        return (d @ d.t()).cpu()

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(work, inputs * 3))
    for x, r in zip(inputs * 3, results, strict=True):
        torch.testing.assert_close(r, x @ x.t(), rtol=1e-4, atol=1e-4)
