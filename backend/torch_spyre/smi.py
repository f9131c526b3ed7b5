"""The state of this process's spyre cards, as ``nvidia-smi`` shows a GPU's: identity, interface
version, clock, device time, memory used and free, and every hardware queue (open, enabled, in
error or halted, commands pending, resets).

``torch_spyre.smi.status(dev)`` returns it as a dict; ``print(torch_spyre.smi.report())`` prints a
table of the cards this process has opened; ``python -m torch_spyre.smi`` prints card 0 of a fresh
process (its identity and limits). With the in-process simulator (the default transport) a card
belongs to one process, so this is the tool for looking at your own run, from inside it.
"""

from __future__ import annotations

import torch

from . import _C
from .device_module import _index


def status(device: torch.device | str | int | None = None) -> dict:
    """The card's state from its registers and the driver's books (see the module's doc)."""
    return _C._device_status(_index(device))


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def report(devices: list[int] | None = None) -> str:
    """A table per card: the cards given, or every card this process has opened."""
    if devices is None:
        devices = [i for i in range(_C._device_count()) if _C._device_opened(i)]
    out = []
    for i in devices:
        s = status(i)
        health = (
            "ok" if s["answers"] and s["firmware_ready"] else ("not answering" if not s["answers"] else "no firmware")
        )
        out.append(
            f"spyre:{i}  {health}  transport {s['transport']}  interface v{s['interface_version']}  "
            f"{s['cores']} cores @ {s['clock_mhz']} MHz  device time {s['cycles'] / (s['clock_mhz'] * 1e3):.3f} ms"
        )
        out.append(
            f"  memory: {_gib(s['memory_used'])} used, {_gib(s['memory_free'])} free of {_gib(s['memory_total'])}"
            f" (peak {_gib(s['memory_peak'])})   interrupts {s['interrupts']}"
        )
        out.append("  queue  state    priority  pending  resets  error")
        for q in s["queues"]:
            if not (q["open"] or q["enabled"] or q["error"]):
                continue
            state = "halted" if q["halted"] else ("error" if q["error"] else ("open" if q["open"] else "enabled"))
            error = q["error"] or "-"
            out.append(f"  {q['id']:>5}  {state:<8} {q['priority']:<9} {q['pending']:>7}  {q['resets']:>6}  {error}")
    return "\n".join(out)


def main() -> None:
    torch.ones(1, device="spyre")
    print(report())


if __name__ == "__main__":
    main()
