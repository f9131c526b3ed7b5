"""The IBM Spyre accelerator as a PyTorch device, backed by a simulated card.

Importing this package (or just ``import torch``, through the ``torch.backends`` entry point)
registers the ``spyre`` device::

    x = torch.randn(4, 4).to("spyre")
    y = x @ x                      # runs on the simulated card's cores

See docs/user-guide.md for the environment variables and the simulator reports.
"""

from __future__ import annotations


def _autoload() -> None:
    """Entry point of the ``torch.backends`` group: importing the package has done the work."""


# `import torch_spyre` before torch: torch's autoload re-enters this half-imported module and looks
# up `_autoload`, so it must exist before `import torch`.
import importlib.metadata as _metadata  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402

import torch  # noqa: E402

logger = logging.getLogger("torch_spyre")
BACKEND_NAME = "spyre"
try:  # the installed release (pyproject.toml's version; spyre-smi --version prints it too)
    __version__ = _metadata.version("torch_spyre")
except _metadata.PackageNotFoundError:
    __version__ = "unknown (torch_spyre is not installed)"

# A partial or broken install must not break `import torch` (which imports this package through
# its entry point): without the extension the device reports itself unavailable, with one warning.
try:
    from . import _C  # noqa: E402
except ImportError as _cause:
    # Only a library that is missing or does not load (the loader names its file); an error the
    # extension raises as it starts (a bad TORCH_SPYRE_* setting) is the user's to see.
    if not (isinstance(_cause, ModuleNotFoundError) and _cause.name == f"{__name__}._C") and _cause.path is None:
        raise
    _C = None
    from . import _unavailable  # noqa: E402

    _unavailable.install(_cause, BACKEND_NAME)

if _C is not None:
    from . import _decomposed, _exit, _printing, _save, distributed, ktir, smi  # noqa: E402
    from . import device_module as _device_module  # noqa: E402
    from ._fallback import fallback_counts, get_cpu_fallback, set_cpu_fallback  # noqa: E402
    from ._waits import get_wait_timeout, set_wait_timeout  # noqa: E402
    from .sim import device_cycles, device_info, write_reports  # noqa: E402

__all__ = [
    "compile_stats",
    "device_cycles",
    "device_info",
    "fallback_counts",
    "get_cpu_fallback",
    "get_wait_timeout",
    "ktir",
    "launch_count",
    "set_cpu_fallback",
    "set_wait_timeout",
    "smi",
    "write_reports",
]


def compile_stats(reset: bool = False) -> dict:
    """What ``torch.compile(..., backend="spyre")`` has done in this process (docs/user-guide.md)."""
    from ._compile import compile_stats as stats

    return stats(reset)


def launch_count(device=None) -> int:
    """Kernel launches this process has queued on a spyre device so far."""
    from ._compile import launch_count as count

    return count(device)


def _register() -> None:
    # Every step is idempotent so that autoload followed by an explicit import is harmless.
    if torch._C._get_privateuse1_backend_name() != BACKEND_NAME:
        torch.utils.rename_privateuse1_backend(BACKEND_NAME)
    from . import _C as ext  # the module deletes its own _C name below

    ext._register_graph_impl()  # torch.accelerator.Graph; keyed by the device's name: after the rename
    if not hasattr(torch, BACKEND_NAME):
        torch._register_device_module(BACKEND_NAME, _device_module)
    if not hasattr(torch.Tensor, "is_" + BACKEND_NAME):
        torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    _exit.install()  # an exit right after backward() must not abort (see _exit.py)
    _printing.install()  # print(tensor) formats a host copy (see _printing.py)
    _save.install()  # torch.save of fp16 on a DLFloat16 card writes IEEE half (see _save.py)
    _decomposed.install()  # batch norm, pooling, interpolation, ...: PyTorch's decompositions (see _decomposed.py)
    distributed.register()  # init_process_group("spyre") (see distributed.py)
    # Quiet by default: torch.profiler's libkineto writes lines of its own (USDT ... profiler_start)
    # on stderr for every profile; KINETO_LOG_LEVEL set by the user wins.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    # Nothing here may touch the driver: the simulator starts on first use, not on `import torch`.
    logger.debug("registered device %r", BACKEND_NAME)


if _C is not None:
    _register()
del _C  # reach the extension through the modules that wrap it
