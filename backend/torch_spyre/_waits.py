"""How long the host waits on the card: a timeout for every wait, and Ctrl-C."""

from __future__ import annotations

from . import _C


def set_wait_timeout(seconds: float | None) -> None:
    """Bounds every host wait on a spyre device (``synchronize``, a copy to the CPU, a full
    command ring, an event) to ``seconds`` of wall time; ``None`` or 0 waits as long as the card
    takes (the default, or ``$TORCH_SPYRE_WAIT_TIMEOUT`` seconds when set).

    A wait that times out raises ``RuntimeError`` naming the queue and the command; the command
    stays queued or running on the card. Ctrl-C ends a wait the same way, with ``KeyboardInterrupt``.
    A program that never ends is stopped by the card's watchdog instead (the config key
    ``firmware.watchdog_cycles``), which fails only its own queue.
    """
    _C._set_wait_timeout(0.0 if seconds is None else float(seconds))


def get_wait_timeout() -> float | None:
    """The wait timeout in seconds, or ``None`` when waits are unbounded."""
    t = _C._get_wait_timeout()
    return t or None
