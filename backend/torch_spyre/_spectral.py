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

import math

import torch

from ._composite import castable, computable, scalar_name, structured, with_out
from ._spectral_jacobi import (
    _EPS,
    _linalg_eigh,
    _linalg_matrix_rank,
    _linalg_pinv,
    _linalg_svd,
    _magnitudes,
    _svd,
)
from ._spectral_qr import (
    _apply_left,
    _batched,
    _geqrf,
    _householder_product,
    _linalg_qr,
    _ormqr,
    _reflect,
    _reflector,
)


def _castable_out(fn, names: tuple, api: str):
    """fn's out= overload under linalg's castable rule, each out named in the message as `names` does."""
    return with_out(fn, names, [castable(api, name) for name in names])


def _ormqr_rule(r, o):
    """ormqr's out= rule: out has exactly the result's dtype, in its wording (no space after "dtype")."""
    if o.dtype != r.dtype:
        return (f"torch.ormqr: Expected input and result to have the same dtype, but input has dtype"
                f"{scalar_name(r.dtype)} and result has dtype {scalar_name(o.dtype)}")  # fmt: skip
    return None


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
