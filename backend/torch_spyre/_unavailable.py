"""What ``import torch`` gets when torch_spyre's extension does not load (a partial install, a
library missing, a build for another torch): torch still imports, the ``spyre`` device says it is
unavailable, and one warning names the cause and the fix. Nothing here may import ``_C``."""

from __future__ import annotations

import types
import warnings

import torch

FIX = "rebuild it with scripts/bootstrap.sh in the checkout, or reinstall torch_spyre into this environment"


def install(cause: BaseException, name: str) -> None:
    """Registers a ``torch.spyre`` that reports no device, and warns once why."""
    why = f"torch_spyre: the {name} device is unavailable: its extension does not load ({cause}); {FIX}"
    warnings.warn(why, RuntimeWarning, stacklevel=2)
    if torch._C._get_privateuse1_backend_name() != name:
        torch.utils.rename_privateuse1_backend(name)
    if hasattr(torch, name):
        return
    module = types.ModuleType(f"torch.{name}", "The spyre device, unavailable: torch_spyre's extension does not load.")

    def is_available() -> bool:
        return False

    def device_count() -> int:
        return 0

    def _lazy_init() -> None:
        raise RuntimeError(
            f"torch_spyre: the {name} device is unavailable: its extension does not load ({cause}); {FIX}"
        )

    module.is_available = is_available
    module.device_count = device_count
    module._lazy_init = _lazy_init
    module.unavailable_because = str(cause)
    torch._register_device_module(name, module)
