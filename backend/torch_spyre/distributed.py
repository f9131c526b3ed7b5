"""The ``spyre`` backend of ``torch.distributed``.

Importing ``torch_spyre`` registers it, so that any of these works::

    dist.init_process_group("cpu:gloo,spyre:spyre")  # CPU tensors on Gloo, spyre tensors here
    dist.init_process_group("spyre")                 # both on this backend (CPU tensors go to Gloo)

Each collective stages its spyre tensors in host memory and a Gloo process group, made here on
the same store, carries the bytes between the processes; the results are copied back to the cards
(``backend/csrc/process_group.cpp``). docs/user-guide.md, "Distributed", has the semantics and the
torchrun recipe.
"""

from __future__ import annotations

import datetime

import torch.distributed as dist

NAME = "spyre"


def _create(store, rank: int, size: int, timeout: datetime.timedelta):
    from . import _C

    host = dist.ProcessGroupGloo(store, rank, size, timeout)
    return _C._process_group(rank, size, host)


def register() -> None:
    """Registers the backend with ``torch.distributed`` (idempotent; a no-op without it)."""
    if not dist.is_available() or is_registered():
        return
    dist.Backend.register_backend(NAME, _create, devices=[NAME, "cpu"])


def is_registered() -> bool:
    return dist.is_available() and NAME in dist.Backend.backend_list


__all__ = ["NAME", "is_registered", "register"]
