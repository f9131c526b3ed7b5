"""The seed example on a simulated Spyre card, then a summary of what the card did.

Run with .venv/bin/python scripts/demo.py (after scripts/bootstrap.sh). Writes a Perfetto trace
and a stats file to out/ unless $SPYRE_TRACE / $SPYRE_STATS say otherwise.
"""

from __future__ import annotations

import json
import os
import pathlib
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The simulator reads these when the device is first used, which is after this point.
os.environ.setdefault("SPYRE_TRACE", str(ROOT / "out" / "spyre_trace.json"))
os.environ.setdefault("SPYRE_STATS", str(ROOT / "out" / "spyre_stats.json"))
for var in ("SPYRE_TRACE", "SPYRE_STATS"):
    pathlib.Path(os.environ[var]).parent.mkdir(parents=True, exist_ok=True)

import torch  # noqa: E402
import torch_spyre  # noqa: E402

# --- the seed example ----------------------------------------------------------------------------
device = torch.device("spyre:0")
tensor = torch.randn(1024, 1024, device="cpu")
tensor_spyre = tensor.to(device)
torch.spyre.synchronize()
cycles_before = torch_spyre.device_cycles()
wall_before = time.perf_counter()
result = torch.matmul(tensor_spyre, tensor_spyre)
torch.spyre.synchronize()
wall = time.perf_counter() - wall_before
cycles = torch_spyre.device_cycles() - cycles_before
print(f"Result computed on: {result.device}")
# --------------------------------------------------------------------------------------------------

expected = torch.matmul(tensor, tensor)
torch.testing.assert_close(result.cpu(), expected, rtol=1e-4, atol=1e-4)
total_cycles = torch_spyre.device_cycles()
trace_path, stats_path = torch_spyre.write_reports()

info = torch_spyre.device_info()
clock_hz = info["clock_mhz"] * 1e6
flops = 2 * 1024**3
config_hash = json.loads(pathlib.Path(stats_path).read_text())["config_hash"] if stats_path else "n/a"
print()
print("Summary")
print("  matches CPU torch.matmul:  yes (float32, rtol=1e-4, atol=1e-4)")
print(
    f"  device:                    {info['name']}, {info['cores']} cores @ {info['clock_mhz']} MHz, "
    f"{info['memory_bytes'] / 2**30:.0f} GiB, transport {info['transport']}, config {config_hash}"
)
print(
    f"  matmul 1024x1024x1024:     {cycles:,} device cycles = {cycles / clock_hz * 1e6:,.1f} us simulated "
    f"({flops / (cycles / clock_hz) / 1e12:.2f} TFLOPS); {wall * 1e3:.1f} ms wall, first call "
    "(includes compiling and loading the program; benchmarks/seed_matmul.py times warm calls)"
)
print(f"  whole run:                 {total_cycles:,} device cycles = {total_cycles / clock_hz * 1e6:,.1f} us")
print(f"  trace (open in ui.perfetto.dev): {trace_path or 'off'}")
print(f"  stats:                     {stats_path or 'off'}")
