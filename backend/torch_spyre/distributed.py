"""The ``spyre`` backend of ``torch.distributed``.

Importing ``torch_spyre`` registers it, so that any of these works::

    dist.init_process_group("cpu:gloo,spyre:spyre")  # CPU tensors on Gloo, spyre tensors here
    dist.init_process_group("spyre")                 # both on this backend (CPU tensors go to Gloo)

When the ranks' cards are cards of one simulated server (every rank a client of one spyre-simd),
the collectives run on the cards: peer-to-peer DMA across the server's switch and reductions on
the cores (``_group_comm.py``). Otherwise, and for send and recv, (ranks on separate
servers, in-process cards, a call the cards cannot take) a collective stages its spyre
tensors in host memory and a Gloo process group, made here on the same store, carries the bytes
between the processes; the results are copied back to the cards (``backend/csrc/process_group.cpp``).
``TORCH_SPYRE_DEVICE_COLLECTIVES=0`` sends those through Gloo too. docs/user-guide.md,
"Distributed", has the semantics and the torchrun recipe.
"""

from __future__ import annotations

import datetime
import os

import torch.distributed as dist

NAME = "spyre"
DEVICE_COLLECTIVES = "TORCH_SPYRE_DEVICE_COLLECTIVES"


def _create(store, rank: int, size: int, timeout: datetime.timedelta):
    from . import _C
    from ._group_comm import Group

    host = dist.ProcessGroupGloo(store, rank, size, timeout)
    if os.environ.get(DEVICE_COLLECTIVES, "1") == "0":
        return _C._process_group(rank, size, host)
    group = Group(host, rank, size)
    return _C._process_group(rank, size, host, group.run, group.ready)


def register() -> None:
    """Registers the backend with ``torch.distributed`` (idempotent; a no-op without it)."""
    if not dist.is_available() or is_registered():
        return
    dist.Backend.register_backend(NAME, _create, devices=[NAME, "cpu"])


def device_collectives() -> int:
    """How many collectives of this process the cards ran themselves (peer-to-peer
    DMA across the server's switch) rather than Gloo, when the ranks drive cards of one spyre-simd."""
    from . import _group_comm

    return _group_comm.calls()


def is_registered() -> bool:
    return dist.is_available() and NAME in dist.Backend.backend_list


__all__ = ["DEVICE_COLLECTIVES", "NAME", "device_collectives", "is_registered", "register"]
