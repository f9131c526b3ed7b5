"""QR, symmetric eigenvalues and singular values on the device, composed of ops the card runs natively.

KERNELS maps ATen overload names to kernels (merged into ``_decomposed.OWN``). Every kernel takes
float32 only: float64 and complex inputs return ``NotImplemented``, so they take the CPU fallback
(the card has no such arithmetic). The algorithms, all batched over leading dims:

- QR: Householder reflections one column at a time with LAPACK's conventions (``geqrf``'s packed
  reflectors and tau, ``dlarfg``'s sign for R's diagonal, tau = 0 where a column is already
  reduced), so that geqrf, householder_product, ormqr and linalg.qr give CPU's very numbers.
- Symmetric eigenvalues: two-sided cyclic Jacobi. Each step rotates n/2 disjoint index pairs at
  once (a round-robin ordering), the rotations gathered into one orthogonal matrix J and applied
  by matmul (J^T A J): the zeros of J make each entry exactly the rotated pair. The eigenvectors
  are polished to orthogonality and the eigenvalues taken as their Rayleigh quotients.
- Singular values: one-sided Jacobi (Hestenes) on the columns of the taller orientation, with a
  relative orthogonality test, so that small singular values keep their relative accuracy and a
  rank-deficient matrix's tiny ones come out tiny; V is polished and one more Jacobi run from
  A V makes A = U S V^T hold to A's rounding. U's columns for singular values at rounding level
  and the full_matrices completion come from a Householder QR of the computed U.
- Least squares: QR and a triangular solve for 'gels' (LAPACK's algorithm), the SVD for the
  rank-revealing drivers; pinv from the SVD (or, hermitian, the eigen-decomposition).

Each Jacobi sweep starts with one host read of a convergence test; sweeps are capped. Inputs with
NaN or infinity take the fallback (Jacobi does not converge on them; LAPACK reports them its way).
"""

from __future__ import annotations

import functools
import math

import torch

from ._composite import castable, computable, meta, scalar_name, structured, with_out

_EPS = torch.finfo(torch.float32).eps
_MAX_SWEEPS = 30


# ---- shared helpers -------------------------------------------------------------------------------


def _fortran(t):
    """t with column-major matrices, as LAPACK (and so CPU) returns them."""
    return t.mT.contiguous().mT


def _batched(t):
    """t as one batch dim and its matrix: [B, m, n]."""
    return t.reshape(math.prod(t.shape[:-2]), *t.shape[-2:])


def _eye(batch: int, m: int, n: int, device):
    """[batch, m, n] identity matrices (ones on the main diagonal)."""
    return torch.eye(m, n, device=device).expand(batch, m, n).clone()


def _castable_out(fn, names: tuple, api: str):
    """fn's out= overload under linalg's castable rule, each out named in the message as `names` does."""
    return with_out(fn, names, [castable(api, name) for name in names])


def _ormqr_rule(r, o):
    """ormqr's out= rule: out has exactly the result's dtype, in its wording (no space after "dtype")."""
    if o.dtype != r.dtype:
        return (f"torch.ormqr: Expected input and result to have the same dtype, but input has dtype"
                f"{scalar_name(r.dtype)} and result has dtype {scalar_name(o.dtype)}")  # fmt: skip
    return None


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


# ---- Jacobi rotations -----------------------------------------------------------------------------


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


# ---- least squares --------------------------------------------------------------------------------

_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def _lstsq_checks(a, b, driver):
    if a.dim() < 2:
        raise RuntimeError("torch.linalg.lstsq: input must have at least 2 dimensions.")
    if b.dim() < 1:
        raise RuntimeError("torch.linalg.lstsq: other must have at least 1 dimension.")
    if a.dtype != b.dtype:
        raise RuntimeError(f"torch.linalg.lstsq: Expected input and other to have the same dtype, but got input's "
                           f"dtype {scalar_name(a.dtype)} and other's dtype {scalar_name(b.dtype)}")  # fmt: skip
    if not (0 <= a.dim() - b.dim() <= 1):
        raise RuntimeError("torch.linalg.lstsq: input.dim() must be greater or equal to other.dim() and "
                           "(input.dim() - other.dim()) <= 1")  # fmt: skip
    vector = a.dim() - b.dim() == 1
    if vector and a.shape[-2] != b.shape[-1]:
        raise RuntimeError("torch.linalg.lstsq: input.size(-2) should match other.size(-1)")
    if not vector and a.shape[-2] != b.shape[-2]:
        raise RuntimeError("torch.linalg.lstsq: input.size(-2) should match other.size(-2)")
    if driver not in _DRIVERS:
        raise RuntimeError("torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)")
    return vector


def _not_full_rank(batched: bool, index: int, column: int):
    prefix = f"(Batch element {index}): " if batched else ""
    return torch.linalg.LinAlgError(
        f"torch.linalg.lstsq: {prefix}The least squares solution could not be computed because the input matrix "
        f"does not have full rank (error code: {column})."
    )


def _gels(a, b, batched: bool):
    """LAPACK's gels: the least-squares solution of a full-rank a [B, m, n] from its QR (m >= n) or
    the minimum-norm one from the QR of a^T (m < n); residuals when m > n. A zero on R's diagonal
    raises as LAPACK's triangular solve reports it."""
    m, n = a.shape[-2:]
    k = min(m, n)
    f = (a if m >= n else a.mT).clone(memory_format=torch.contiguous_format)  # _reflect works in place
    tau = _reflect(f)
    diagonal = f.diagonal(dim1=-2, dim2=-1)
    zero = diagonal == 0
    if k and bool(zero.any()):
        where = zero.nonzero()[0].tolist()  # first (batch element, column)
        raise _not_full_rank(batched, where[0], where[1] + 1)
    r = f[:, :k, :k].triu()
    if m >= n:
        c = b.clone()
        for j in range(k):  # Q^T b
            _apply_left(c, _reflector(f, j), tau[:, j], j)
        x = torch.linalg.solve_triangular(r, c[:, :n], upper=True)
        return x, c[:, n:].square().sum(-2)
    y = torch.linalg.solve_triangular(r.mT, b, upper=False)
    x = torch.cat([y, y.new_zeros(y.shape[0], n - m, y.shape[-1])], dim=-2)
    for j in reversed(range(k)):  # Q [y; 0]
        _apply_left(x, _reflector(f, j), tau[:, j], j)
    return x, None


def _linalg_lstsq(a, b, rcond=None, *, driver=None):
    """linalg.lstsq(A, B, rcond, driver) -> (solution, residuals, rank, singular_values), with CPU's
    results for CPU's drivers ('gelsy', its default for CPU tensors, when none is given)."""
    driver = "gelsy" if driver is None else driver
    vector = _lstsq_checks(a, b, driver)
    if not computable(a, b):
        return NotImplemented
    bm = b.unsqueeze(-1) if vector else b
    if a.shape[:-2] != bm.shape[:-2]:
        return NotImplemented  # CPU's own batch broadcasting rules
    m, n = a.shape[-2:]
    nrhs = bm.shape[-1]
    batch = a.shape[:-2]
    k = min(m, n)
    dev = a.device
    if a.numel() == 0 or bm.numel() == 0:
        return NotImplemented  # degenerate sizes: CPU's LAPACK conventions
    aa, bb = _batched(a), _batched(bm)
    magnitudes = _magnitudes(aa)
    if not math.isfinite(magnitudes[0]):
        return NotImplemented

    def solution(x):
        x = x.reshape(*batch, n, nrhs)
        return x.squeeze(-1) if vector else x

    def per_rhs(r):  # residuals [B, nrhs] -> CPU's shape (which keeps a vector b's 1)
        return r.reshape(*batch, nrhs)

    if driver == "gels":
        x, residuals = _gels(aa, bb, len(batch) > 0)
        residuals = per_rhs(residuals) if residuals is not None and m > n else a.new_empty(0)
        return solution(x), residuals, torch.empty(0, dtype=torch.int64, device=dev), a.new_empty(0)
    u, s, vh = _svd(aa, False, True, magnitudes)
    if rcond is None or rcond < 0:
        rcond = _EPS * max(m, n) if rcond is None else _EPS
    keep = s > rcond * s[:, :1]
    rank = keep.sum(-1)
    coefficients = (u.mT @ bb) * torch.where(keep, 1.0 / torch.where(keep, s, 1.0), 0.0).unsqueeze(-1)
    x = vh.mT @ coefficients
    singular_values = s.reshape(*batch, k) if driver in ("gelsd", "gelss") else a.new_empty(0)
    residuals = a.new_empty(0)
    if driver != "gelsy" and m > n and bool((rank == n).all()):
        # The part of b outside A's range: u's columns span it when the rank is full.
        residuals = per_rhs((bb - u @ (u.mT @ bb)).square().sum(-2))
    return solution(x), residuals, rank.reshape(batch), singular_values


KERNELS: dict = {
    "geqrf": _geqrf,
    "geqrf.a": _castable_out(_geqrf, ("a", "tau"), "torch.geqrf"),
    "linalg_householder_product": _householder_product,
    "linalg_householder_product.out": _castable_out(_householder_product, ("out",), "torch.linalg.householder_product"),
    "ormqr": _ormqr,
    "ormqr.out": with_out(_ormqr, rule=_ormqr_rule),
    "linalg_qr": _linalg_qr,
    "linalg_qr.out": with_out(_linalg_qr, ("Q", "R"), structured),
    "_linalg_eigh": _linalg_eigh,
    "_linalg_eigh.eigenvalues": with_out(_linalg_eigh, ("eigenvalues", "eigenvectors"), structured),
    "_linalg_svd": _linalg_svd,
    "_linalg_svd.U": with_out(_linalg_svd, ("U", "S", "Vh"), structured),
    "linalg_pinv.atol_rtol_tensor": _linalg_pinv,
    "linalg_matrix_rank.atol_rtol_tensor": _linalg_matrix_rank,
    "linalg_matrix_rank.atol_rtol_float": _linalg_matrix_rank,
    "linalg_matrix_rank.atol_rtol_tensor_out": _castable_out(_linalg_matrix_rank, ("out",), "torch.linalg.matrix_rank"),
    "linalg_matrix_rank.atol_rtol_float_out": _castable_out(_linalg_matrix_rank, ("out",), "torch.linalg.matrix_rank"),
    "linalg_lstsq": _linalg_lstsq,
    "linalg_lstsq.out": _castable_out(
        _linalg_lstsq, ("solution", "residuals", "rank", "singular_values"), "torch.linalg.lstsq"
    ),
}
