"""The program cache: an eager op compiles once per signature, and the cache stays bounded."""

from __future__ import annotations

import torch
import torch_spyre.debug
from conftest import run_python


def test_second_call_hits_the_cache():
    x = torch.randn(33, 17).to("spyre")
    before = torch_spyre.debug.program_cache_info()
    torch.sigmoid(x)
    first = torch_spyre.debug.program_cache_info()
    torch.sigmoid(x)
    second = torch_spyre.debug.program_cache_info()
    assert first["misses"] == before["misses"] + 1
    assert second["misses"] == first["misses"]
    assert second["hits"] == first["hits"] + 1


def test_cache_is_bounded_and_eviction_frees_device_memory():
    # Device memory held (driver figures, programs included) after 20 and after 60 new shapes:
    # with 8 programs cached, more shapes must not hold more memory.
    code = """
import torch, torch_spyre.debug
x = torch.randn(64, 64).to("spyre")
held = []
for n in range(1, 61):
    (x[:n] + 1).sum()                      # two new programs per n
    if n in (20, 60):
        torch.spyre.synchronize()
        held.append(torch_spyre.debug.driver_memory_info()["allocated"])
info = torch_spyre.debug.program_cache_info()
print(info["entries"], info["evictions"], held[0], held[1])
"""
    proc = run_python(code, env={"TORCH_SPYRE_PROGRAM_CACHE": "8"})
    assert proc.returncode == 0, proc.stderr
    entries, evictions, held_20, held_60 = (int(v) for v in proc.stdout.split())
    assert entries == 8
    assert evictions == 120 - 8
    assert held_60 <= held_20


def test_bad_cache_size_is_a_clear_error():
    proc = run_python("import torch; torch.ones(2).to('spyre') + 1", env={"TORCH_SPYRE_PROGRAM_CACHE": "lots"})
    assert proc.returncode != 0
    assert "TORCH_SPYRE_PROGRAM_CACHE must be a positive count" in proc.stderr
