"""Module.to("spyre") keeps tied parameters tied.

Torch converts a parameter in place (``param.data = converted``) only between backends whose
tensors it knows to be shallow-copy compatible (CPU, CUDA and a few others). For any other
backend, PrivateUse1 included, ``Module._apply`` makes a new ``Parameter`` for every place a
parameter appears, so a model whose input and output embeddings share one weight ends up with
two unrelated copies on the device. We wrap ``Module._apply`` so that, after the outermost call,
every place that held the same parameter before holds the same (first converted) parameter
again, exactly as on CUDA.

Torch's own remedy, ``torch.__future__.set_swap_module_params_on_conversion(True)``, keeps the
``Parameter`` objects, but it is process-wide and makes ``Module.to`` (to any device, CPU
included) fail while an autograd graph still holds a parameter, the common pattern of computing
a CPU reference and then moving the model. This wrapper changes nothing for tensors that torch
converts in place, and adds no failure.
"""

from __future__ import annotations

import functools
import threading

import torch

_state = threading.local()


def _occurrences(module: torch.nn.Module) -> list[tuple[torch.nn.Module, str, torch.nn.Parameter]]:
    return [
        (m, key, p) for m in module.modules(remove_duplicate=False) for key, p in m._parameters.items() if p is not None
    ]


def _retie(apply):
    @functools.wraps(apply)
    def _apply(self, fn, recurse=True):
        if not recurse or getattr(_state, "inside", False):
            return apply(self, fn, recurse)
        before = _occurrences(self)
        _state.inside = True
        try:
            result = apply(self, fn, recurse)
        finally:
            _state.inside = False
        first: dict[int, torch.nn.Parameter] = {}
        changed = set()
        for m, key, old in before:
            new = m._parameters.get(key)
            kept = first.setdefault(id(old), new)
            if new is not kept:
                m._parameters[key] = kept
                changed.add(m)
        for m in changed:  # modules that cache their parameters (the RNNs) rebuild the cache
            if isinstance(m, torch.nn.RNNBase):
                m._init_flat_weights()
        return result

    _apply._spyre_retie = True
    return _apply


def install() -> None:
    """Wraps Module._apply once (idempotent)."""
    if not getattr(torch.nn.Module._apply, "_spyre_retie", False):
        torch.nn.Module._apply = _retie(torch.nn.Module._apply)
