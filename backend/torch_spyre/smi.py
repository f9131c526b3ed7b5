"""The state of this process's spyre cards, as ``nvidia-smi`` shows a GPU's: identity, interface
version, clock, device time, memory used and free, and every hardware queue (open, enabled, in
error or halted, commands pending, resets).

``torch_spyre.smi.status(dev)`` returns it as a dict; ``print(torch_spyre.smi.report())`` prints a
table of the cards this process has opened; ``spyre-smi`` (or ``python -m torch_spyre.smi``) prints
card 0 of a fresh process (its identity and limits). With the in-process simulator (the default
transport) a card belongs to one process, so this is the tool for looking at your own run, from
inside it.

A card that spyre-simd serves to several processes (``SPYRE_TRANSPORT=socket``) is looked at from
outside: ``spyre-smi --daemon`` asks the daemon (``daemon_status()``) and prints its clients (pid,
queues, memory window), the free slots and memory, and every queue with its owner.
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


def daemon_status(socket_path: str = "") -> dict:
    """The state of the spyre-simd on `socket_path` (default: the one this process's config reaches)."""
    import json

    return json.loads(_C._daemon_status(socket_path))


def daemon_report(socket_path: str = "") -> str:
    """A table of a running spyre-simd: every card's slots and queues."""
    d = daemon_status(socket_path)
    used = [c for c in d["clients"] if c["client"]]
    free_bytes = sum(c["memory_bytes"] for c in d["clients"] if not c["client"])
    out = [
        f"spyre-simd pid {d['pid']} on {d['socket']}  config {d['config_hash']}  up {d['uptime_s']:.0f} s  "
        f"{len(used)} of {len(d['clients'])} card slots in use  {_gib(free_bytes)} free  "
        f"{d['scrubs']} window(s) scrubbed"
    ]
    out.append("  card  slot  client  pid      queues  memory window")
    for c in d["clients"]:
        who = (f"{c['client']:>6}  {c['pid']:<7}") if c["client"] else f"{'-':>6}  {'free':<7}"
        qs = f"{c['first_queue']}..{c['first_queue'] + c['queues'] - 1}"
        out.append(
            f"  {c['card']:>4}  {c['slot']:>4}  {who}  {qs:<6}  {c['memory_base']:#x} + {_gib(c['memory_bytes'])}"
        )
    for card in d["cards"]:
        health = "ok" if card["answers"] and card["firmware_ready"] else "not answering"
        out.append(
            f"card {card['index']}  {health}  interface v{card['interface_version']}  cycles {card['cycles']}  "
            f"memory {_gib(card['memory_bytes'])}"
        )
        out.append("  queue  client  state    pending  resets  error")
        for q in card["queues"]:
            state = "halted" if q["halted"] else ("error" if q["error"] else ("enabled" if q["enabled"] else "idle"))
            owner = q["client"] or "-"
            out.append(
                f"  {q['id']:>5}  {owner:>6}  {state:<8} {q['tail'] - q['head']:>7}  {q['resets']:>6}  "
                f"{q['last_error'] or '-'}"
            )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    import argparse
    import json

    from spyre_arch.commands import version

    parser = argparse.ArgumentParser(prog="spyre-smi", description="The state of simulated Spyre cards.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    parser.add_argument("--daemon", action="store_true", help="ask the running spyre-simd, not this process's card")
    parser.add_argument("--socket", default="", help="with --daemon: its socket (default: the config's)")
    parser.add_argument("--json", action="store_true", help="print the state as JSON")
    args = parser.parse_args(argv)
    if args.daemon:
        try:
            print(json.dumps(daemon_status(args.socket), indent=1) if args.json else daemon_report(args.socket))
        except RuntimeError as e:
            raise SystemExit(str(e)) from None
        return
    torch.ones(1, device="spyre")
    print(json.dumps(status(0), indent=1) if args.json else report())


if __name__ == "__main__":
    main()
