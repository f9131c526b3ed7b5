"""A clean process exit after backward passes on spyre.

Torch 2.13's ``backward()`` stashes a Python object (a ``contextvars.Context``) in the
thread-local state that each autograd graph task copies. For a device other than the CPU the
graph task runs on the device's autograd thread, which often drops the task's last reference a
moment after ``backward()`` has returned. When that falls after Python has begun to finalize,
the thread's attempt to take the GIL ends it with ``pthread_exit`` through a ``noexcept`` frame
and the process aborts ("terminate called without an active exception"): a script that ended
right after ``loss.backward()`` hit it about one run in six.

At exit, while Python is still whole, we run an empty backward through the autograd thread of
each spyre device, straight on the engine (nothing stashed): the thread drops the previous graph
task before it takes this one, and this one holds no Python object. No kernel runs.
"""

from __future__ import annotations

import atexit

import torch

_MAX_CARDS = 16  # sim.devices is at most 16


def _drain_device_threads() -> None:
    from . import _C, device_module

    if device_module._is_in_bad_fork():  # the parent's card is not this process's
        return
    # Only the cards this process opened (asking for the device count would start the simulator).
    for index in range(_MAX_CARDS):
        if not _C._device_opened(index):
            continue
        leaf = torch.empty(0, device=f"spyre:{index}", requires_grad=True)
        out = leaf.view(-1)  # a view node: its backward runs on the device's thread, launches nothing
        grad = torch.empty(0, device=f"spyre:{index}")
        torch.autograd.Variable._execution_engine.run_backward((out,), (grad,), False, False, (), True, True)


_installed = False


def install() -> None:
    global _installed
    if not _installed:
        atexit.register(_drain_device_threads)
        _installed = True
