"""GradScaler's two kernels on spyre: unscaling the gradients, and updating the scale.

``torch.amp.GradScaler("spyre")`` calls ``_amp_foreach_non_finite_check_and_unscale_`` once per
optimizer step over every gradient, and ``_amp_update_scale_`` once per ``update()``. Without a
spyre kernel the first went through the CPU fallback: every gradient copied to the host and back
on every step of a mixed-precision training loop.

- **Unscaling** is device ops: each gradient multiplied in place by ``inv_scale``, in float32 for
  float16 and bfloat16 gradients and rounded once, as CPU's kernel computes (a factor of exactly 1
  leaves every value as it was, which ``x * 1`` does too); ``found_inf`` is set to 1 when any
  gradient holds an inf or a NaN, and is otherwise left as it was (zeroing it is the caller's).
- **The scale's update** reads its three numbers back (one wait) and computes on the host, in
  double, as CPU's kernel does: the scale is a float32 and the growth and backoff factors are
  doubles, so ``float(scale * factor)`` rounds once, which float32 arithmetic on the card cannot
  promise for a factor such as 1.1. GradScaler already waits for ``found_inf`` in ``step()``.

Both check their arguments as CPU's kernels do, with the device in place of "CPU".
"""

from __future__ import annotations

import math

import torch


def _check_one(t: torch.Tensor, name: str, dtype: torch.dtype, device: torch.device | None) -> None:
    what = {torch.float32: "a float", torch.int32: "an int"}[dtype]
    if t.device.type != "spyre" or (device is not None and t.device != device):
        raise RuntimeError(f"{name} must be a tensor on {device or 'a spyre device'}, not {t.device}.")
    if t.numel() != 1:
        raise RuntimeError(f"{name} must be a 1-element tensor.")
    if t.dtype != dtype:
        raise RuntimeError(f"{name} must be {what} tensor.")


def _unscale_(scaled_grads, found_inf, inv_scale):
    if len(scaled_grads) == 0:
        return
    _check_one(inv_scale, "inv_scale", torch.float32, None)
    _check_one(found_inf, "found_inf", torch.float32, inv_scale.device)
    for t in scaled_grads:
        if t.device != inv_scale.device:
            raise RuntimeError(f"one of scaled_grads was on {t.device}, not on {inv_scale.device}.")
        if t.layout != torch.strided:
            raise RuntimeError("one of scaled_grads was not a strided tensor.")
        if not t.is_floating_point():
            # CPU's kernel is defined for floating types only, and refuses others as well.
            raise RuntimeError(f"one of scaled_grads is {t.dtype}: gradients to unscale must be floating point.")
    non_finite = [~torch.isfinite(t).all() for t in scaled_grads if t.numel() > 0]
    if non_finite:
        found_inf.masked_fill_(torch.stack(non_finite).any().reshape(found_inf.shape), 1.0)
    for t in scaled_grads:
        # A (1,)-shaped float32 factor: the product is float32, rounded once into a narrower t.
        t.mul_(inv_scale.reshape(()) if t.dim() == 0 else inv_scale.reshape(1))


def _update_scale_(current_scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    _check_one(current_scale, "current_scale", torch.float32, None)
    _check_one(growth_tracker, "growth_tracker", torch.int32, current_scale.device)
    _check_one(found_inf, "found_inf", torch.float32, current_scale.device)
    # One read for all three; the tracker is below 2**24 (growth_interval is an int32's count).
    scale, tracker, found = torch.stack(
        [current_scale.reshape(()), growth_tracker.reshape(()).float(), found_inf.reshape(())]
    ).tolist()
    tracker = int(tracker)
    if found:
        scale, tracker = float(torch.tensor(scale * backoff_factor, dtype=torch.float32)), 0
    elif tracker + 1 == growth_interval:
        grown = float(torch.tensor(scale * growth_factor, dtype=torch.float32))
        scale, tracker = (grown if math.isfinite(grown) else scale), 0
    else:
        tracker += 1
    current_scale.fill_(scale)
    growth_tracker.fill_(tracker)
    return current_scale


KERNELS = {
    "_amp_foreach_non_finite_check_and_unscale_": _unscale_,
    "_amp_update_scale_": _update_scale_,
}
