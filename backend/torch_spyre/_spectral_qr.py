"""Householder QR on the device (geqrf, householder_product, ormqr, linalg.qr), with LAPACK's
conventions, and the matrix helpers the spectral kernels share; listed in _spectral.KERNELS.

Reflections one column at a time: ``geqrf``'s packed reflectors and tau, ``dlarfg``'s sign for R's
diagonal, tau = 0 where a column is already reduced, so that geqrf, householder_product, ormqr and
linalg.qr give CPU's very numbers. float32 only: other dtypes return ``NotImplemented``.
"""

from __future__ import annotations

import math

import torch

from ._composite import computable, meta, scalar_name


def _fortran(t):
    """t with column-major matrices, as LAPACK (and so CPU) returns them."""
    return t.mT.contiguous().mT


def _batched(t):
    """t as one batch dim and its matrix: [B, m, n]."""
    return t.reshape(math.prod(t.shape[:-2]), *t.shape[-2:])


def _eye(batch: int, m: int, n: int, device):
    """[batch, m, n] identity matrices (ones on the main diagonal)."""
    return torch.eye(m, n, device=device).expand(batch, m, n).clone()


# ---- Householder QR -------------------------------------------------------------------------------


def _reflect(a):
    """LAPACK's geqr2 in place on a [B, m, n] float32 tensor: R on and above the diagonal, each
    reflector's vector below it (its leading 1 implied); returns tau [B, min(m, n)].

    Column j's reflector is dlarfg's: for x = [alpha, rest], beta = -sign(alpha) * |x|,
    tau = (beta - alpha) / beta, v = rest / (alpha - beta); a column whose rest is zero is left
    as it is, with tau = 0 (so R's diagonal keeps alpha's sign there, as LAPACK's does)."""
    b, m, n = a.shape
    k = min(m, n)
    taus = []
    for j in range(k):
        alpha = a[:, j, j]
        rest = a[:, j + 1 :, j]
        xnorm = torch.linalg.vector_norm(rest, dim=-1)
        beta = -torch.copysign(torch.hypot(alpha, xnorm), alpha)
        reduced = xnorm == 0
        tau = torch.where(reduced, 0.0, (beta - alpha) / beta)
        scale = torch.where(reduced, 0.0, 1.0 / (alpha - beta))
        rest.mul_(scale.unsqueeze(-1))
        if j + 1 < n:  # H = I - tau v v^T on the trailing columns
            v = torch.cat([torch.ones(b, 1, device=a.device), rest], dim=-1)
            trailing = a[:, j:, j + 1 :]
            w = v.unsqueeze(-2) @ trailing
            trailing.sub_((tau.unsqueeze(-1) * v).unsqueeze(-1) * w)
        alpha.copy_(torch.where(reduced, alpha, beta))
        taus.append(tau)
    return torch.stack(taus, dim=-1) if taus else a.new_zeros(b, 0)


def _reflector(a, j: int):
    """Reflector j's vector [B, m - j] from packed reflectors a [B, m, *]: 1, then the column."""
    return torch.cat([torch.ones(a.shape[0], 1, device=a.device), a[:, j + 1 :, j]], dim=-1)


def _apply_left(c, v, tau, j: int):
    """c[:, j:, :] = (I - tau v v^T) c[:, j:, :], in place."""
    rows = c[:, j:, :]
    w = v.unsqueeze(-2) @ rows
    rows.sub_((tau.unsqueeze(-1) * v).unsqueeze(-1) * w)


def _apply_right(c, v, tau, j: int):
    """c[:, :, j:] = c[:, :, j:] (I - tau v v^T), in place."""
    cols = c[:, :, j:]
    w = cols @ v.unsqueeze(-1)
    cols.sub_(w * (tau.unsqueeze(-1) * v).unsqueeze(-2))


def _q(a, tau, cols: int):
    """The first `cols` columns of Q = H_0 ... H_{k-1} ([B, m, cols]), accumulated backwards from
    the identity as LAPACK's org2r does."""
    b, m = a.shape[0], a.shape[1]
    q = _eye(b, m, cols, a.device)
    for j in reversed(range(tau.shape[-1])):
        _apply_left(q, _reflector(a, j), tau[:, j], j)
    return q


def _geqrf(x):
    """geqrf(input) -> (a, tau): LAPACK's packed QR."""
    if x.dim() < 2:
        raise RuntimeError("torch.geqrf: input must have at least 2 dimensions.")
    if not computable(x):
        return NotImplemented
    a = _batched(x).clone()
    tau = _reflect(a) if a.numel() else a.new_zeros(a.shape[0], min(x.shape[-2:]))
    return _fortran(a.reshape(x.shape)), tau.reshape(*x.shape[:-2], min(x.shape[-2:]))


def _householder_product(x, tau):
    """linalg.householder_product(input, tau): the first n columns of H_0 ... H_{k-1}."""
    torch.linalg.householder_product(meta(x), meta(tau))  # CPU's shape checks
    if x.dtype != tau.dtype:
        raise RuntimeError(f"torch.linalg.householder_product: tau dtype {scalar_name(tau.dtype)} does not match "
                           f"input dtype {scalar_name(x.dtype)}")  # fmt: skip
    if not computable(x, tau):
        return NotImplemented
    m, n = x.shape[-2:]
    if x.numel() == 0:
        return _fortran(torch.eye(m, n, device=x.device).expand(x.shape).clone())
    a = _batched(x)
    q = _q(a, tau.reshape(a.shape[0], tau.shape[-1]), n)
    return _fortran(q.reshape(x.shape))


def _ormqr_checks(x, tau, other, left: bool) -> None:
    """CPU's argument checks of ormqr (torch's meta function leaves some out)."""
    if x.dim() < 2:
        raise RuntimeError("torch.ormqr: input must have at least 2 dimensions.")
    if other.dim() < 2:
        raise RuntimeError("torch.ormqr: other must have at least 2 dimensions.")
    side = -2 if left else -1
    if other.shape[side] != x.shape[-2]:
        raise RuntimeError(f"torch.ormqr: other.shape[{side}] must be equal to input.shape[-2]")
    if tau.dim() == 0 or tau.shape[-1] != min(other.shape[side], x.shape[-1]):
        raise RuntimeError(f"torch.ormqr: tau.shape[-1] must be equal to min(other.shape[{side}], input.shape[-1])")
    torch.ormqr(meta(x), meta(tau), meta(other), left, False)  # the rest: ranks, batch dims, dtypes


def _ormqr(x, tau, other, left=True, transpose=False):
    """ormqr(input, tau, other, left, transpose): other multiplied by Q = H_0 ... H_{k-1} (or Q^T),
    from the left or the right, one reflector at a time."""
    _ormqr_checks(x, tau, other, left)
    if not computable(x, tau, other):
        return NotImplemented
    if other.numel() == 0:
        return _fortran(other.clone())
    a = _batched(x)
    t = tau.reshape(a.shape[0], tau.shape[-1])
    c = _batched(other).clone()
    k = t.shape[-1]
    # Q C applies H_{k-1} first; Q^T C and C Q apply H_0 first; C Q^T applies H_{k-1} first.
    order = range(k) if left == transpose else reversed(range(k))
    for j in order:
        (_apply_left if left else _apply_right)(c, _reflector(a, j), t[:, j], j)
    return _fortran(c.reshape(other.shape))


def _linalg_qr(x, mode="reduced"):
    """linalg.qr(A, mode): Q from the reflectors, R the upper triangle of geqrf's result."""
    torch.linalg.qr(meta(x), mode)  # CPU's checks: dims, mode
    if not computable(x):
        return NotImplemented
    m, n = x.shape[-2:]
    k = min(m, n)
    a = _batched(x).clone()
    tau = _reflect(a) if a.numel() else a.new_zeros(a.shape[0], k)
    rows = m if mode == "complete" else k
    r = _fortran(a[:, :rows, :].triu().reshape(*x.shape[:-2], rows, n))
    if mode == "r":
        return x.new_empty(0), r
    cols = m if mode == "complete" else k
    q = _q(a, tau, cols) if a.numel() else _eye(a.shape[0], m, cols, x.device)
    return _fortran(q.reshape(*x.shape[:-2], m, cols)), r
