"""Symmetric eigenvalues and singular values on the device by Jacobi rotations (linalg.eigh, svd),
and pinv and matrix_rank built on them; listed in _spectral.KERNELS.

Symmetric eigenvalues: two-sided cyclic Jacobi, n/2 disjoint rotations per step gathered into one
orthogonal matrix applied by matmul. Singular values: one-sided Jacobi (Hestenes) on the columns of
the taller orientation; U's columns for singular values at rounding level and the full_matrices
completion come from a Householder QR (_spectral_qr). Each sweep starts with one host read of a
convergence test; sweeps are capped.
"""

from __future__ import annotations

import functools
import math

import torch

from ._composite import computable, meta, scalar_name
from ._spectral_qr import _batched, _eye, _fortran, _q, _reflect

_EPS = torch.finfo(torch.float32).eps
_MAX_SWEEPS = 30


@functools.cache
def _round_robin(n: int) -> tuple:
    """The steps of one sweep over the pairs of n indices: each step a set of disjoint pairs
    (p < q), every pair once per sweep (the circle method; an odd n sits one index out per step)."""
    size = n + n % 2
    players = list(range(size))
    steps = []
    for _ in range(size - 1):
        pairs = [(players[i], players[size - 1 - i]) for i in range(size // 2)]
        pairs = sorted((min(p, q), max(p, q)) for p, q in pairs if max(p, q) < n)
        steps.append(tuple(pairs))
        players = [players[0], players[-1], *players[1:-1]]
    return tuple(steps)


_PLANS: dict = {}


def _plan(n: int, device) -> list:
    """Per step of a sweep, device tensors: where the pairs' (pp, qq, pq) entries sit in a
    flattened n x n matrix, where (pp, qq, pq, qp) of the rotation go, and the identity's ones
    left on the diagonal (indices in no pair this step)."""
    key = (n, str(device))
    if key not in _PLANS:
        plan = []
        for pairs in _round_robin(n):
            p = torch.tensor([a for a, _ in pairs], dtype=torch.int64)
            q = torch.tensor([b for _, b in pairs], dtype=torch.int64)
            gather = torch.cat([p * n + p, q * n + q, p * n + q])
            scatter = torch.cat([p * n + p, q * n + q, p * n + q, q * n + p])
            base = torch.eye(n).reshape(-1)
            base[scatter] = 0
            plan.append((gather.to(device), scatter.to(device), base.to(device)))
        _PLANS[key] = plan
    return _PLANS[key]


def _rotation(flat, step, n: int, tol: float, floor=None):
    """[B, n, n]: the rotations J (J_pp = J_qq = c, J_pq = s, J_qp = -s) for which J^T M J has
    zero (p, q) entries, for each pair of the step, M the symmetric matrices `flat` [B, n * n].
    A pair whose |m_pq| is at most tol * sqrt(|m_pp m_qq|) is left alone (converged), and so is
    one whose m_pp and m_qq are both at most `floor` [B, 1] (columns at rounding level)."""
    gather, scatter, base = step
    app, aqq, apq = flat.index_select(-1, gather).chunk(3, dim=-1)
    theta = (aqq - app) / (2 * apq)
    t = torch.copysign(1.0 / (theta.abs() + (theta * theta + 1).sqrt()), theta)  # the smaller angle
    active = apq.abs() > tol * app.abs().sqrt() * aqq.abs().sqrt()
    if floor is not None:
        active = active & (torch.maximum(app, aqq) > floor)
    t = torch.where(active, t, 0.0)
    c = torch.rsqrt(1 + t * t)
    s = c * t
    values = torch.cat([c, c, s, -s], dim=-1)
    b = flat.shape[0]
    return base.expand(b, -1).scatter(-1, scatter.expand(b, -1), values).view(b, n, n)


def _polish(v):
    """v [B, n, n] orthogonal up to rounding made orthogonal to working precision: one Newton-Schulz
    step towards its polar factor, v (3 I - v^T v) / 2 (Jacobi's rotations drift by ~eps each)."""
    return 1.5 * v - 0.5 * (v @ (v.mT @ v))


def _jacobi_eigh(a, vectors: bool, magnitudes: tuple[float, float]):
    """Eigenvalues (unsorted, [B, n]) and eigenvectors ([B, n, n] or None) of symmetric a [B, n, n]
    with finite entries of the `magnitudes` that _magnitudes gives."""
    a, factor = _scaled(a, magnitudes)
    values, v = _two_sided(a, vectors)
    return (values if factor is None else values * factor.squeeze(-1)), v


def _two_sided(a, vectors: bool):
    """Two-sided Jacobi: the eigenvalues and (optionally) eigenvectors of symmetric a [B, n, n]."""
    b, n = a.shape[0], a.shape[-1]
    original = a
    v = _eye(b, n, n, a.device) if vectors else None
    plan = _plan(n, a.device)
    scale = torch.linalg.vector_norm(a, dim=(-2, -1))
    off_diagonal = ~torch.eye(n, dtype=torch.bool, device=a.device)
    previous = None
    for _ in range(_MAX_SWEEPS):
        # Converged when the off-diagonal part is at rounding level, or stopped shrinking there.
        off = torch.linalg.vector_norm(a * off_diagonal, dim=(-2, -1)) / torch.clamp(scale, min=1e-30)
        off = float(off.max())
        if off <= n * _EPS or (previous is not None and off <= 1e-4 and off > 0.5 * previous):
            break
        previous = off
        for step in plan:
            j = _rotation(a.reshape(b, n * n), step, n, _EPS)
            a = j.mT @ (a @ j)
            if vectors:
                v = v @ j
    if not vectors:
        return a.diagonal(dim1=-2, dim2=-1), None
    # The rotated matrix carries every step's rounding: the eigenvalues are taken again as the
    # Rayleigh quotients of the (polished) eigenvectors with the matrix given.
    v = _polish(v)
    return (v * (original @ v)).sum(-2), v


def _one_sided(w, vectors: bool):
    """One-sided Jacobi on w [B, m, n], m >= n: returns (w rotated until its columns are
    orthogonal, the rotations' product V [B, n, n] or None). Columns at rounding level (norm at
    most eps times the largest) are left as they are among themselves: their directions are noise,
    and the SVD completes U there."""
    b, m, n = w.shape
    v = _eye(b, n, n, w.device) if vectors else None
    plan = _plan(n, w.device)
    tol = 2 * math.sqrt(m) * _EPS  # the relative orthogonality fp32 dot products of length m resolve
    off_diagonal = ~torch.eye(n, dtype=torch.bool, device=w.device)
    floor = None
    for _ in range(_MAX_SWEEPS):
        g = w.mT @ w
        norms2 = g.diagonal(dim1=-2, dim2=-1)
        floor = norms2.amax(-1, keepdim=True) * (_EPS * _EPS)
        d = norms2.sqrt()
        excess = (g.abs() - tol * d.unsqueeze(-1) * d.unsqueeze(-2)) * off_diagonal
        noise = norms2 <= floor
        excess = excess * ~(noise.unsqueeze(-1) & noise.unsqueeze(-2))
        if not bool((excess > 0).any()):
            break
        for i, step in enumerate(plan):
            if i:
                g = w.mT @ w
            j = _rotation(g.reshape(b, n * n), step, n, tol, floor)
            w = w @ j
            if vectors:
                v = v @ j
    return w, v


def _jacobi_svd(a, vectors: bool):
    """(w, V) with a V = w of orthogonal columns (their norms the singular values) for a [B, m, n],
    m >= n. With vectors, V is polished and the Jacobi run once more from a V: the columns of
    a V are then orthogonal again, and a = w V^T holds to rounding of a rather than of every
    rotation that V went through."""
    w, v = _one_sided(a, vectors)
    if not vectors:
        return w, None
    v = _polish(v)
    w, turn = _one_sided(a @ v, True)
    return w, v @ turn


def _sorted_columns(x, order):
    """x's columns ([B, r, n]) in the order `order` [B, n]."""
    return x.gather(-1, order.unsqueeze(-2).expand(x.shape))


def _symmetric(x, uplo: str):
    """The symmetric matrix of x's lower (uplo 'L') or upper triangle."""
    if uplo.upper() == "L":
        return x.tril() + x.tril(-1).mT
    return x.triu() + x.triu(1).mT


def _magnitudes(a) -> tuple[float, float]:
    """Over the matrices of a [B, m, n] (B > 0), the largest and the smallest of their largest
    |entry|, zero matrices left out (one host read). The largest is NaN or infinity when a has such
    an entry: Jacobi does not converge on those, and CPU's LAPACK reports them its own way, so such
    inputs take the fallback."""
    peaks = a.abs().amax((-2, -1))
    smallest = torch.where(peaks > 0, peaks, math.inf).amin()
    largest, smallest = torch.stack([peaks.amax(), smallest]).tolist()
    return largest, smallest


def _scaled(a, magnitudes: tuple[float, float]):
    """a [B, m, n] with each matrix divided by its largest |entry| when some matrix has entries so
    large or small that their squares and products would leave fp32's normal range; and the
    factors ([B, 1, 1], or None when a is kept as it is, exactly)."""
    largest, smallest = magnitudes
    if largest <= 2.0**40 and (smallest >= 2.0**-40 or largest == 0):
        return a, None
    factor = a.abs().amax((-2, -1), keepdim=True)
    factor = torch.where(factor > 0, factor, 1.0)
    return a / factor, factor


def _linalg_eigh(x, UPLO="L", compute_v=True):
    """_linalg_eigh(A, UPLO, compute_v) -> (eigenvalues ascending, eigenvectors in columns)."""
    values_meta, vectors_meta = torch.ops.aten._linalg_eigh.default(meta(x), UPLO, compute_v)
    if not computable(x):
        return NotImplemented
    n = x.shape[-1]
    if x.numel() == 0:
        vectors = x.new_empty(vectors_meta.shape) if compute_v else x.new_empty(0)
        return x.new_empty(values_meta.shape), vectors
    a = _symmetric(_batched(x), UPLO)
    magnitudes = _magnitudes(a)
    if not math.isfinite(magnitudes[0]):
        return NotImplemented
    values, vectors = _jacobi_eigh(a, compute_v, magnitudes)
    values, order = torch.sort(values, dim=-1)
    values = values.reshape(values_meta.shape)
    if not compute_v:
        return values, x.new_empty(0)
    return values, _fortran(_sorted_columns(vectors, order).reshape(*x.shape[:-2], n, n))


def _complete(u, s, cols: int):
    """u [B, m, n] with unit columns where s [B, n] (descending) is not negligible, made into
    `cols` orthonormal columns: a Householder QR of u keeps those columns (up to the sign that
    R's diagonal gives back) and completes them with an orthonormal basis of the rest."""
    good = s > (s[:, :1] * _EPS)
    a = u * good.unsqueeze(-2)
    tau = _reflect(a)
    q = _q(a, tau, cols)
    sign = torch.where(a.diagonal(dim1=-2, dim2=-1) < 0, -1.0, 1.0)
    k = sign.shape[-1]
    q[:, :, :k] *= sign.unsqueeze(-2)
    return q


def _svd(a, full_matrices: bool, compute_uv: bool, magnitudes: tuple[float, float]):
    """SVD of a [B, m, n] float32 with finite entries of the `magnitudes` that _magnitudes gives
    and no empty dim: (U, S, Vh) as linalg.svd gives them (U, Vh None when not compute_uv)."""
    a, factor = _scaled(a, magnitudes)
    u, s, vh = _scaled_svd(a, full_matrices, compute_uv)
    return u, (s if factor is None else s * factor.squeeze(-1)), vh


def _scaled_svd(a, full_matrices: bool, compute_uv: bool):
    """_svd of entries of moderate size."""
    b, m, n = a.shape
    wide = m < n
    w = (a.mT if wide else a).contiguous()
    rows, k = w.shape[-2], w.shape[-1]
    w, v = _jacobi_svd(w, compute_uv)
    s = torch.linalg.vector_norm(w, dim=-2)
    s, order = torch.sort(s, dim=-1, descending=True)
    if not compute_uv:
        return None, s, None
    w, v = _sorted_columns(w, order), _sorted_columns(v, order)
    u = w / torch.where(s > 0, s, 1.0).unsqueeze(-2)
    cols = rows if full_matrices else k
    if cols > k or bool((s <= s[:, :1] * _EPS).any()):
        u = _complete(u, s, cols)
    # For a wide A the SVD taken is A^T's: A = V S U^T.
    return (v, s, u.mT) if wide else (u, s, v.mT)


def _empty_svd(x, full_matrices: bool, compute_uv: bool, shapes):
    """linalg.svd of a matrix with no elements: identities where a full U or Vh has a size."""
    u_shape, s_shape, vh_shape = shapes
    s = x.new_zeros(s_shape)
    if not compute_uv:
        return x.new_empty(0), s, x.new_empty(0)

    def eye(shape):
        return torch.eye(shape[-2], shape[-1], device=x.device).expand(shape).clone()

    return _fortran(eye(u_shape)), s, _fortran(eye(vh_shape))


def _linalg_svd(x, full_matrices=False, compute_uv=True, *, driver=None):
    """_linalg_svd(A, full_matrices, compute_uv, driver) -> (U, S descending, Vh)."""
    metas = torch.ops.aten._linalg_svd.default(meta(x), full_matrices, compute_uv)
    if driver is not None:
        raise RuntimeError(
            "torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs with cuSOLVER backend."
        )
    if not computable(x):
        return NotImplemented
    shapes = [t.shape for t in metas]
    if x.numel() == 0:
        return _empty_svd(x, full_matrices, compute_uv, shapes)
    magnitudes = _magnitudes(x)
    if not math.isfinite(magnitudes[0]):
        return NotImplemented
    u, s, vh = _svd(_batched(x), full_matrices, compute_uv, magnitudes)
    s = s.reshape(shapes[1])
    if not compute_uv:
        return x.new_empty(0), s, x.new_empty(0)
    return _fortran(u.reshape(shapes[0])), s, _fortran(vh.reshape(shapes[2]))


def _tolerance(x, atol, rtol, largest):
    """The cutoff of pinv's singular values, per matrix [B, 1]: max(atol, rtol * largest), where
    rtol defaults to eps * max(m, n), or to 0 where a positive atol is given (torch's rule)."""
    b = largest.shape[0]
    batch = x.shape[:-2]

    def per_matrix(t):  # a tolerance tensor broadcast to the batch, in fp32 on the device
        return t.to(device=x.device, dtype=torch.float32).expand(batch).reshape(b, 1)

    default = _EPS * max(x.shape[-2:])
    a = per_matrix(atol) if atol is not None else largest.new_zeros(b, 1)
    if rtol is not None:
        r = per_matrix(rtol)
    elif atol is not None:
        r = torch.where(a > 0, 0.0, default)
    else:
        r = largest.new_full((b, 1), default)
    return torch.maximum(a, r * largest)


def _linalg_pinv(x, *, atol=None, rtol=None, hermitian=False):
    """linalg.pinv(A, atol, rtol, hermitian): V diag(1/s) U^T over the singular values above the
    tolerance, from the SVD (or, hermitian, from the eigen-decomposition of A's lower triangle)."""
    if x.dim() < 2:
        raise RuntimeError(f"linalg.pinv({scalar_name(x.dtype)}{{{list(x.shape)}}}): expected a tensor with 2 or more "
                           "dimensions of float, double, cfloat or cdouble types")  # fmt: skip
    if not computable(x) or any(t is not None and t.is_complex() for t in (atol, rtol)):
        return NotImplemented
    m, n = x.shape[-2:]
    if x.numel() == 0:
        return x.new_zeros(*x.shape[:-2], n, m)
    a = _symmetric(_batched(x), "L") if hermitian else _batched(x)
    magnitudes = _magnitudes(a)
    if not math.isfinite(magnitudes[0]):
        return NotImplemented
    if hermitian:
        values, vectors = _jacobi_eigh(a, True, magnitudes)
        magnitude = values.abs()
        keep = magnitude > _tolerance(x, atol, rtol, magnitude.amax(-1, keepdim=True))
        inverse = torch.where(keep, 1.0 / torch.where(keep, values, 1.0), 0.0)
        result = (vectors * inverse.unsqueeze(-2)) @ vectors.mT
    else:
        u, s, vh = _svd(a, False, True, magnitudes)
        keep = s > _tolerance(x, atol, rtol, s[:, :1])
        inverse = torch.where(keep, 1.0 / torch.where(keep, s, 1.0), 0.0)
        result = (vh.mT * inverse.unsqueeze(-2)) @ u.mT
    return result.reshape(*x.shape[:-2], n, m)


def _linalg_matrix_rank(x, *, atol=None, rtol=None, hermitian=False):
    """linalg.matrix_rank(A, atol, rtol, hermitian): how many singular values (or eigenvalue
    magnitudes) exceed max(atol, rtol * the largest), per matrix, as int64. torch's composite
    computes that cutoff in float64, which the card has no arithmetic for; here it is float32."""
    if x.dim() < 2:
        raise RuntimeError("torch.linalg.matrix_rank: The input tensor input must have at least 2 dimensions.")
    if not computable(x) or any(isinstance(t, torch.Tensor) and t.is_complex() for t in (atol, rtol)):
        return NotImplemented
    if x.numel() == 0:
        return torch.zeros(x.shape[:-2], dtype=torch.int64, device=x.device)
    atol, rtol = (torch.tensor(t) if isinstance(t, float) else t for t in (atol, rtol))
    a = _symmetric(_batched(x), "L") if hermitian else _batched(x)
    magnitudes = _magnitudes(a)
    if not math.isfinite(magnitudes[0]):
        return NotImplemented
    if hermitian:
        s = _jacobi_eigh(a, False, magnitudes)[0].abs()
    else:
        s = _svd(a, False, False, magnitudes)[1]
    rank = (s > _tolerance(x, atol, rtol, s.amax(-1, keepdim=True))).sum(-1)
    return rank.reshape(x.shape[:-2])
