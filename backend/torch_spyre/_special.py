"""Laguerre and Legendre polynomials on the device: CPU's three-term recurrences, run to the largest degree.

The other special functions are rows of the op library (backend/compiler/src/ops/special.cpp). These
two have no closed form to stand in for CPU's loop of n steps (their values stay finite for large
degrees, unlike Hermite's), so the kernel runs the same recurrence with device ops, all elements at
once, up to the largest degree asked for (one host read), and each element keeps the step of its own
degree. KERNELS maps ATen overload names to kernels; it is merged into _decomposed.OWN.
"""

from __future__ import annotations

import torch

from ._composite import with_out

# Past this degree the loop would take too long (CPU's loop runs n steps per element): the CPU runs it.
_MAX_DEGREE = 4096
_INT64_RANGE = 2.0**63


def _operands(x, n):
    """x and n as float32 spyre tensors of their broadcast shape, or None when the device does not take
    the call (a float64 or narrow-float result, which CPU computes in its own type, or no spyre tensor)."""
    tensors = [t for t in (x, n) if isinstance(t, torch.Tensor)]
    device = next((t.device for t in tensors if t.device.type == "spyre"), None)
    if device is None:
        return None
    dtype = torch.result_type(x, n)
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    if dtype != torch.float32 or any(t.dtype == torch.float64 or t.is_complex() for t in tensors):
        return None
    shape = torch.broadcast_shapes(*(t.shape for t in tensors))

    def as_tensor(v):
        if isinstance(v, torch.Tensor):
            return v.to(device=device, dtype=torch.float32).expand(shape)
        return torch.full(shape, v, dtype=torch.float32, device=device)

    return as_tensor(x), as_tensor(n)


def _degree(n):
    """CPU's int64 cast of n: the truncated degree, and where it is none (NaN, infinite, negative or past
    int64, which all read as a negative degree: the polynomial is then 0)."""
    degree = torch.trunc(n)
    invalid = torch.isnan(n) | (degree < 0) | (degree >= _INT64_RANGE)
    return degree, invalid


def _recurrence(first, step):
    """A kernel for p(0) = 1, p(1) = first(x), p(k+1) = step(x, k, p(k), p(k-1)), with CPU's answers
    for a degree that is none."""

    def kernel(x, n):
        operands = _operands(x, n)
        if operands is None:
            return NotImplemented
        x, n = operands
        degree, invalid = _degree(n)
        top = int(torch.where(invalid, 0, degree).amax().item()) if degree.numel() else 0
        if top > _MAX_DEGREE:
            return NotImplemented
        previous, current = torch.ones_like(x), first(x)
        result = torch.where(degree == 1, current, previous)
        for k in range(1, top):
            previous, current = current, step(x, k, current, previous)
            result = torch.where(degree == k + 1, current, result)
        return result, invalid, degree

    return kernel


# Laguerre: L(k+1) = ((2k + 1 - x) L(k) - k L(k-1)) / (k + 1), and 1 at x = 0.
_laguerre_steps = _recurrence(lambda x: 1 - x, lambda x, k, q, p: ((2 * k + (1 - x)) * q - k * p) / (k + 1))
# Legendre: P(k+1) = ((2k + 1) x P(k) - k P(k-1)) / (k + 1), and (+-1)^n at x = +-1.
_legendre_steps = _recurrence(lambda x: x, lambda x, k, q, p: ((2 * k + 1) * x * q - k * p) / (k + 1))


def laguerre_polynomial_l(x, n):
    """torch.special.laguerre_polynomial_l on the device (CPU's recurrence and special cases)."""
    done = _laguerre_steps(x, n)
    if done is NotImplemented:
        return NotImplemented
    result, invalid, _ = done
    x = _operands(x, n)[0]
    result = torch.where(x == 0, 1.0, result)
    return torch.where(invalid, 0.0, result)


def legendre_polynomial_p(x, n):
    """torch.special.legendre_polynomial_p on the device (CPU's recurrence and special cases)."""
    done = _legendre_steps(x, n)
    if done is NotImplemented:
        return NotImplemented
    result, invalid, degree = done
    x = _operands(x, n)[0]
    odd = torch.remainder(degree, 2) == 1
    edge = torch.where((x > 0) | ~odd, 1.0, -1.0)
    result = torch.where(x.abs() == 1, edge, result)
    return torch.where(invalid, 0.0, result)


KERNELS = {
    f"special_{name}{overload}": (with_out(fn) if overload.endswith("out") else fn)
    for name, fn in (("laguerre_polynomial_l", laguerre_polynomial_l), ("legendre_polynomial_p", legendre_polynomial_p))
    for overload in ("", ".x_scalar", ".n_scalar", ".out", ".x_scalar_out", ".n_scalar_out")
}
