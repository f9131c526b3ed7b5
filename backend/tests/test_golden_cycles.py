"""Golden device-cycle counts: a change to the timing model shows up as a reviewed diff.

The counts are exact (simulated time is deterministic). After an intended timing change, rewrite
the file with `SPYRE_UPDATE_GOLDEN=1 .venv/bin/python -m pytest backend/tests/test_golden_cycles.py`
and commit the diff with the change that caused it.
"""

from __future__ import annotations

import json
import os
import pathlib

from conftest import run_python

GOLDEN = pathlib.Path(__file__).parent / "golden" / "cycles.json"

WORKLOADS = {
    # name: statements run after a warm-up of the same statements; the cycles of the second run count.
    "mm_f32_1024": "y = a1024 @ a1024",
    "mm_f16_512x768x256": "y = h512 @ h768",
    "mm_f32_129x257x130": "y = e129 @ e257",
    "h2d_4MiB": "y = host4m.to('spyre')",
    "d2d_4MiB": "y = a1024.clone()",
}

SETUP = (
    "import json, torch, torch_spyre\n"
    "torch_spyre.set_cpu_fallback('error')\n"
    "a1024 = torch.ones(1024, 1024).to('spyre')\n"
    "h512 = torch.ones(512, 768, dtype=torch.float16).to('spyre')\n"
    "h768 = torch.ones(768, 256, dtype=torch.float16).to('spyre')\n"
    "e129 = torch.ones(129, 257).to('spyre'); e257 = torch.ones(257, 130).to('spyre')\n"
    "host4m = torch.ones(1024, 1024)\n"
    "def measure(stmt):\n"
    "    exec(stmt, globals()); torch.spyre.synchronize()\n"
    "    c0 = torch_spyre.device_cycles(); exec(stmt, globals()); torch.spyre.synchronize()\n"
    "    return torch_spyre.device_cycles() - c0\n"
)


def test_cycle_counts_match_the_golden_file():
    code = SETUP + f"print(json.dumps({{k: measure(v) for k, v in {WORKLOADS!r}.items()}}))\n"
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    measured = json.loads(proc.stdout)
    if os.environ.get("SPYRE_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(measured, indent=2, sort_keys=True) + "\n")
    golden = json.loads(GOLDEN.read_text())
    assert measured == golden, f"device cycles changed: {measured} vs golden {golden}"
