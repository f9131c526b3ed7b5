"""Policy for operators that have no Spyre kernel: run them on the CPU, warn, or refuse."""

from __future__ import annotations

from . import _C

_MODES = ("allow", "warn", "error")


def set_cpu_fallback(mode: str) -> None:
    """Sets what happens when an operator has no Spyre kernel.

    ``"warn"`` (default) runs it on the CPU and warns once per operator; ``"allow"`` runs it on the
    CPU silently; ``"error"`` raises ``NotImplementedError`` naming the operator, so that a test
    suite can prove that everything it runs is native. The environment variable
    ``TORCH_SPYRE_CPU_FALLBACK`` sets the initial mode.
    """
    if mode not in _MODES:
        raise ValueError(f"torch_spyre: CPU fallback mode must be one of {_MODES}, not {mode!r}")
    _C._set_cpu_fallback(mode)


def get_cpu_fallback() -> str:
    """Returns the current CPU fallback mode: ``"allow"``, ``"warn"`` or ``"error"``."""
    return _C._get_cpu_fallback()


def fallback_counts(reset: bool = False) -> dict[str, int]:
    """Calls per ATen operator that ran on the CPU fallback in this process (since the last reset).

    An empty dict means everything ran natively. ``reset=True`` clears the counts after reading.
    The test suite prints them at its end, so that what still falls back is visible.
    """
    return dict(_C._fallback_counts(reset))
