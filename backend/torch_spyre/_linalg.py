"""Linear algebra on the device: factorisations and solves composed of ops the card runs natively.

Cholesky, LU with partial pivoting, LDL^T with Bunch-Kaufman pivoting, triangular, LU and LDL
solves, inverses, determinants and the matrix exponential, in float32 (the card has no float64 or
complex arithmetic: those inputs return ``NotImplemented`` and take the CPU fallback; float16 and
bfloat16 are no CPU linalg dtypes either, so CPU raises its own error for them).

Each factorisation is a loop over the columns of the matrix, batched over the leading dims: one
pass per column, every pass a handful of device ops (a matrix-vector product, a division, a rank-1
update, an argmax for the pivot). The results follow LAPACK's conventions as CPU returns them:
1-based int32 pivots chosen as LAPACK chooses them, int32 info codes with LAPACK's meaning,
column-major strides (taken from the op's meta function, which also raises CPU's shape and dtype
errors). The matrix exponential computes in double-float arithmetic (pairs of float32). Nothing is
read back to the host but the few control values that decide an error (a singular Cholesky factor,
the pivots' range) or a loop count (the squarings of the matrix exponential).

The LAPACK routines themselves are in _linalg_lapack.py, the matrix exponential in
_linalg_matrix_exp.py; this module holds the ATen kernels built on them. KERNELS maps ATen overload
names to kernels (merged into _decomposed.OWN).
"""

from __future__ import annotations

import torch

from ._composite import castable, computable, meta, same_scalar_type, structured, with_out
from ._linalg_lapack import (
    _check_pivots,
    _eye,
    _getrf,
    _getrs,
    _like,
    _perm_sign,
    _potrf,
    _sytrf,
    _sytrs,
    _trsm,
    _unpack,
)
from ._linalg_matrix_exp import linalg_matrix_exp

_aten = torch.ops.aten


# ---- kernels --------------------------------------------------------------------------------------


def _errors(info: torch.Tensor, api: str, a: torch.Tensor) -> None:
    _aten._linalg_check_errors(info, api, is_matrix=a.dim() == 2)


def linalg_cholesky_ex(A, *, upper=False, check_errors=False):
    """(L, info): the Cholesky factor of A's lower (upper: of its upper) triangle, as CPU's."""
    spec_l, spec_info = _aten.linalg_cholesky_ex.default(meta(A), upper=upper)
    if not computable(A):
        return NotImplemented
    low, info = _potrf(A.mT if upper else A)
    if check_errors:
        _errors(info, "linalg.cholesky_ex", A)
    return _like(spec_l, low.mT if upper else low), _like(spec_info, info)


def cholesky(A, upper=False):
    """The deprecated torch.cholesky: the factor, raising CPU's error for a matrix that is not
    positive definite."""
    spec = _aten.cholesky.default(meta(A), upper)
    if not computable(A):
        return NotImplemented
    low, info = _potrf(A.mT if upper else A)
    _errors(info, "cholesky", A)
    return _like(spec, low.mT if upper else low)


def cholesky_inverse(L, upper=False):
    """(L L^T)^-1 (upper: (U^T U)^-1) from a Cholesky factor: its triangular inverse's product."""
    spec = _aten.cholesky_inverse.default(meta(L), upper)
    if not computable(L):
        return NotImplemented
    if spec.numel() == 0:
        return _like(spec, L)
    zero = L.diagonal(dim1=-2, dim2=-1) == 0  # LAPACK's potri refuses a singular factor
    info = torch.where(zero.any(-1), zero.to(torch.int32).argmax(-1) + 1, 0).to(torch.int32)
    _errors(info, "cholesky_inverse", L)
    inv = _trsm(L, _eye(L.shape[-1], L), upper=upper, unit=False)
    return _like(spec, inv @ inv.mT if upper else inv.mT @ inv)


def _cholesky_solve_helper(B, A, upper):
    """X with L L^T X = B (upper: U^T U X = B), A the factor; batch dims already broadcast."""
    spec = _aten._cholesky_solve_helper.default(meta(B), meta(A), upper)
    if not computable(B, A):
        return NotImplemented
    low = A.mT if upper else A
    y = _trsm(low, B, upper=False, unit=False)
    return _like(spec, _trsm(low.mT, y, upper=True, unit=False))


def linalg_solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    """X with A X = B (left) or X A = B for triangular A."""
    spec = _aten.linalg_solve_triangular.default(meta(A), meta(B), upper=upper, left=left,
                                                 unitriangular=unitriangular)  # fmt: skip
    if not computable(A, B):
        return NotImplemented
    if left:
        x = _trsm(A, B, upper, unitriangular)
    else:
        x = _trsm(A.mT, B.mT, not upper, unitriangular).mT
    return _like(spec, x)


def triangular_solve(B, A, upper=True, transpose=False, unitriangular=False):
    """(X, a copy of A broadcast) with op(A) X = B, op the transpose when `transpose`."""
    spec_x, spec_a = _aten.triangular_solve.default(meta(B), meta(A), upper, transpose, unitriangular)
    if not computable(B, A):
        return NotImplemented
    x = _trsm(A.mT if transpose else A, B, upper != transpose, unitriangular)
    return _like(spec_x, x), _like(spec_a, A)


def _no_pivot(pivot: bool) -> None:
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")


def linalg_lu_factor_ex(A, *, pivot=True, check_errors=False):
    """(LU, pivots, info) of LU with partial pivoting, LAPACK's getrf layout."""
    specs = _aten.linalg_lu_factor_ex.default(meta(A), pivot=pivot)
    if not computable(A):
        return NotImplemented
    _no_pivot(pivot)
    lu, pivots, info = _getrf(A)
    if check_errors:
        _errors(info, "torch.linalg.lu_factor_ex", A)
    return tuple(_like(s, v) for s, v in zip(specs, (lu, pivots, info), strict=True))


def linalg_lu(A, *, pivot=True):
    """(P, L, U) with A = P L U."""
    specs = _aten.linalg_lu.default(meta(A), pivot=pivot)
    if not computable(A):
        return NotImplemented
    _no_pivot(pivot)
    lu, pivots, _ = _getrf(A)
    return tuple(_like(s, v) for s, v in zip(specs, _unpack(lu, pivots, True), strict=True))


def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    """(P, L, U) from lu_factor's result; the parts not asked for are empty."""
    specs = _aten.lu_unpack.default(meta(LU_data), meta(LU_pivots), unpack_data, unpack_pivots)
    if not computable(LU_data):
        return NotImplemented
    if unpack_pivots:
        m = LU_data.shape[-2]
        wrong = "pivots passed to lu_unpack must be between 1 and LU.size(-2) inclusive.Did you properly pass the result of lu_factor?"  # noqa: E501
        _check_pivots(LU_pivots, m, wrong, wrong)
    parts = _unpack(LU_data, LU_pivots if unpack_pivots else None, unpack_data)
    return tuple(_like(s, v, LU_data.device) for s, v in zip(specs, parts, strict=True))


def linalg_lu_solve(LU, pivots, B, *, left=True, adjoint=False):
    """X with A X = B (left) or X A = B, A^T for A when `adjoint`, A given by lu_factor."""
    spec = _aten.linalg_lu_solve.default(meta(LU), meta(pivots), meta(B), left=left, adjoint=adjoint)
    if not computable(LU, B):
        return NotImplemented
    if spec.numel() == 0:
        return _like(spec, None, B.device)
    _check_pivots(
        pivots, LU.shape[-2],
        "Pivots given to lu_solve must all be greater or equal to 1. Did you properly pass the result of lu_factor?",
        "Pivots given to lu_solve must all be smaller or equal to LU.size(-2). Did you properly pass the result of "
        "lu_factor?",
    )  # fmt: skip
    return _like(spec, _getrs(LU, pivots, B, left, adjoint))


def _linalg_solve_ex(A, B, *, left=True, check_errors=False):
    """(X, LU, pivots, info) with A X = B (left) or X A = B; B a vector or a batch of them where
    B.shape is A.shape[:-1] (NumPy's rule)."""
    specs = _aten._linalg_solve_ex.default(meta(A), meta(B), left=left)
    if not computable(A, B):
        return NotImplemented
    lu, pivots, info = _getrf(A)
    vector = B.dim() == 1 or (B.dim() == A.dim() - 1 and B.shape == A.shape[:-1])
    x = _getrs(lu, pivots, B.unsqueeze(-1) if vector else B, left, False)
    if check_errors:
        _errors(info, "torch.linalg.solve_ex", A)
    x = x.squeeze(-1) if vector else x
    return tuple(_like(s, v) for s, v in zip(specs, (x, lu, pivots, info), strict=True))


def linalg_inv_ex(A, *, check_errors=False):
    """(A^-1, info): the LU solve of the identity, as CPU's."""
    spec_inv, spec_info = _aten.linalg_inv_ex.default(meta(A))
    if not computable(A):
        return NotImplemented
    lu, pivots, info = _getrf(A)
    inv = _getrs(lu, pivots, _eye(A.shape[-1], A).expand_as(A), True, False)
    if check_errors:
        _errors(info, "linalg.inv_ex", A)
    return _like(spec_inv, inv), _like(spec_info, info)


def _lu_of_det(A):
    """getrf of A, or of A^T when A is contiguous (CPU's choice: the same determinant, and the
    factors its backward expects)."""
    return _getrf(A.mT if A.is_contiguous() else A)


def _linalg_det(A):
    """(det A, LU, pivots): the pivots' sign times the product of U's diagonal."""
    specs = _aten._linalg_det.default(meta(A))
    if not computable(A):
        return NotImplemented
    lu, pivots, _ = _lu_of_det(A)
    det = _perm_sign(pivots) * lu.diagonal(dim1=-2, dim2=-1).prod(-1)
    return tuple(_like(s, v) for s, v in zip(specs, (det, lu, pivots), strict=True))


def _linalg_slogdet(A):
    """(sign, log|det A|, LU, pivots)."""
    specs = _aten._linalg_slogdet.default(meta(A))
    if not computable(A):
        return NotImplemented
    lu, pivots, _ = _lu_of_det(A)
    diag = lu.diagonal(dim1=-2, dim2=-1)
    sign = _perm_sign(pivots) * diag.sign().prod(-1)
    logabs = diag.abs().log().sum(-1)
    return tuple(_like(s, v) for s, v in zip(specs, (sign, logabs, lu, pivots), strict=True))


def linalg_ldl_factor_ex(A, *, hermitian=False, check_errors=False):
    """(LD, pivots, info) of LDL^T with Bunch-Kaufman pivoting, LAPACK's sytrf layout (a real
    matrix: `hermitian` changes nothing)."""
    specs = _aten.linalg_ldl_factor_ex.default(meta(A), hermitian=hermitian)
    if not computable(A):
        return NotImplemented
    ld, pivots, info = _sytrf(A)
    if check_errors:
        _errors(info, "torch.linalg.ldl_factor_ex", A)
    return tuple(_like(s, v) for s, v in zip(specs, (ld, pivots, info), strict=True))


def linalg_ldl_solve(LD, pivots, B, *, hermitian=False):
    """X with A X = B, A given by ldl_factor."""
    spec = _aten.linalg_ldl_solve.default(meta(LD), meta(pivots), meta(B), hermitian=hermitian)
    if not computable(LD, B):
        return NotImplemented
    return _like(spec, _sytrs(LD, pivots, B))


# ---- out= overloads -------------------------------------------------------------------------------


KERNELS: dict = {
    "linalg_cholesky_ex": linalg_cholesky_ex,
    "linalg_cholesky_ex.L": with_out(linalg_cholesky_ex, ("L", "info"), structured),
    "cholesky": cholesky,
    "cholesky.out": with_out(cholesky, rule=castable("cholesky")),
    "cholesky_inverse": cholesky_inverse,
    "cholesky_inverse.out": with_out(cholesky_inverse, rule=castable("cholesky_inverse")),
    "_cholesky_solve_helper": _cholesky_solve_helper,
    "linalg_solve_triangular": linalg_solve_triangular,
    "linalg_solve_triangular.out": with_out(linalg_solve_triangular, rule=same_scalar_type),
    "triangular_solve": triangular_solve,
    "triangular_solve.X": with_out(triangular_solve, ("X", "M"), structured),
    "linalg_lu_factor_ex": linalg_lu_factor_ex,
    "linalg_lu_factor_ex.out": with_out(linalg_lu_factor_ex, ("LU", "pivots", "info"), structured),
    "linalg_lu": linalg_lu,
    "linalg_lu.out": with_out(linalg_lu, ("P", "L", "U"), structured),
    "lu_unpack": lu_unpack,
    "lu_unpack.out": with_out(lu_unpack, ("P", "L", "U"), structured),
    "linalg_lu_solve": linalg_lu_solve,
    "linalg_lu_solve.out": with_out(linalg_lu_solve, ("out",), structured),
    "_linalg_solve_ex": _linalg_solve_ex,
    "_linalg_solve_ex.result": with_out(_linalg_solve_ex, ("result", "LU", "pivots", "info"), structured),
    "linalg_inv_ex": linalg_inv_ex,
    "linalg_inv_ex.inverse": with_out(linalg_inv_ex, ("inverse", "info"), structured),
    "_linalg_det": _linalg_det,
    "_linalg_det.result": with_out(_linalg_det, ("result", "LU", "pivots"), structured),
    "_linalg_slogdet": _linalg_slogdet,
    "_linalg_slogdet.sign": with_out(_linalg_slogdet, ("sign", "logabsdet", "LU", "pivots"), structured),
    "linalg_matrix_exp": linalg_matrix_exp,
    "linalg_ldl_factor_ex": linalg_ldl_factor_ex,
    "linalg_ldl_factor_ex.out": with_out(linalg_ldl_factor_ex, ("LD", "pivots", "info"), structured),
    "linalg_ldl_solve": linalg_ldl_solve,
    "linalg_ldl_solve.out": with_out(linalg_ldl_solve, ("out",), structured),
}
