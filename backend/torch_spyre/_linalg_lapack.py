"""LAPACK's factorisations and solves as loops of device ops, for the kernels of _linalg.py.

Cholesky (potrf), LU with partial pivoting (getrf), LDL^T with Bunch-Kaufman pivoting (sytrf and
its solve, sytrs), triangular and LU solves (trsm, getrs), in float32. Each factorisation is a loop
over the columns of the matrix, batched over the leading dims: one pass per column, every pass a
handful of device ops (a matrix-vector product, a division, a rank-1 update, an argmax for the
pivot). Pivots and info codes follow LAPACK: 1-based int32 pivots chosen as LAPACK chooses them,
int32 info codes with LAPACK's meaning.
"""

from __future__ import annotations

import torch

# LAPACK's safe minimum for float32: a pivot at least this large is inverted once and multiplied
# (getrf's scaling of a column); below it the reciprocal would overflow, so it divides.
_SFMIN = torch.finfo(torch.float32).tiny


def _like(spec: torch.Tensor, value: torch.Tensor | None, device=None) -> torch.Tensor:
    """`value` (broadcast, cast) in a new tensor laid out as the meta result `spec` (CPU's layout);
    an empty one on `device` for a result not asked for (None)."""
    out = torch.empty_strided(spec.shape, spec.stride(), dtype=spec.dtype, device=device or value.device)
    return out.copy_(value) if value is not None and out.numel() else out


def _eye(n: int, like: torch.Tensor) -> torch.Tensor:
    """The n x n identity in float32 on like's device."""
    eye = torch.zeros(n, n, device=like.device)
    eye.diagonal().fill_(1.0)
    return eye


def _first_error(info: torch.Tensor, failed: torch.Tensor, code: int) -> torch.Tensor:
    """info with `code` where `failed` and no earlier error was recorded (LAPACK reports the first)."""
    return torch.where(failed & (info == 0), code, info)


def _isamax(v: torch.Tensor) -> torch.Tensor:
    """The position (int64, keeping the last dim as 1) of the first largest |v| along the last
    dim, as BLAS's isamax: a NaN is never larger than anything, so one wins only in first place."""
    v = v.abs()
    first_nan = v[..., :1].isnan()
    at = torch.where(v.isnan(), -1.0, v).argmax(-1, keepdim=True)
    return torch.where(first_nan, 0, at)


# ---- factorisations -------------------------------------------------------------------------------


def _potrf(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The lower Cholesky factor of the lower triangle of a (..., n, n) and LAPACK's info (int32:
    the order of the first leading minor that is not positive definite, 0 if none).

    Left-looking, one column per pass: the column's entries less the products of the rows
    already factored (a matrix-vector product accumulated in fp32), its square root on the
    diagonal, the rest divided by it. A matrix that fails at column k is left as LAPACK's potrf
    leaves it: the k columns before it factored, the failing diagonal entry as computed (not
    positive, or NaN), and the rest of the lower triangle as it came in."""
    n = a.shape[-1]
    info = torch.zeros(a.shape[:-2], dtype=torch.int32, device=a.device)
    if a.numel() == 0:
        return torch.zeros_like(a, memory_format=torch.contiguous_format), info
    low = torch.zeros_like(a, memory_format=torch.contiguous_format)
    for j in range(n):
        v = a[..., j:, j]
        if j:
            v = v - (low[..., j:, :j] @ low[..., j, :j].unsqueeze(-1)).squeeze(-1)
        d = v[..., 0]
        failed = ~(d > 0)  # NaN fails too
        info = _first_error(info, failed, j + 1)
        s = torch.sqrt(d)
        low[..., j, j] = torch.where(failed, d, s)
        if j + 1 < n:
            low[..., j + 1 :, j] = v[..., 1:] / s.unsqueeze(-1)
    stop = torch.where(info > 0, info - 1, n).to(torch.int64)[..., None, None]
    index = torch.arange(n, device=a.device)
    rows, cols = index[:, None], index[None, :]
    factored = (cols < stop) | ((rows == stop) & (cols == stop))
    return torch.where(factored, low, a.tril()), info


def _getrf(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LU with partial pivoting of a (..., m, n), as LAPACK's getrf: (LU, pivots, info).

    LU holds L's multipliers below the diagonal (L's unit diagonal implied) and U on and above
    it; pivots (int32, 1-based, (..., min(m, n))) name the row swapped with row j at step j, the
    first of the largest |value| in the column; info is the first j whose pivot is zero (1-based),
    0 if none. Right-looking, one column per pass: pick the pivot, swap the rows, scale the
    column below by the pivot's reciprocal, subtract the rank-1 update from the rest."""
    m, n = a.shape[-2:]
    k = min(m, n)
    batch = a.shape[:-2]
    w = a.clone(memory_format=torch.contiguous_format)
    pivots = torch.zeros(*batch, k, dtype=torch.int32, device=a.device)
    info = torch.zeros(batch, dtype=torch.int32, device=a.device)
    if a.numel() == 0:
        return w, pivots, info
    for j in range(k):
        p = _isamax(w[..., j:, j]).squeeze(-1) + j
        pivots[..., j] = p + 1
        if j + 1 < m:
            at = p[..., None, None].expand(*batch, 1, n)
            row = w.gather(-2, at)
            w.scatter_(-2, at, w[..., j : j + 1, :].clone())
            w[..., j : j + 1, :] = row
        d = w[..., j, j]
        zero = d == 0
        info = _first_error(info, zero, j + 1)
        if j + 1 < m:
            below = w[..., j + 1 :, j]
            scaled = torch.where((d.abs() >= _SFMIN)[..., None], below * (1 / d)[..., None], below / d[..., None])
            w[..., j + 1 :, j] = torch.where(zero[..., None], below, scaled)  # a zero column stays zero
            if j + 1 < n:
                w[..., j + 1 :, j + 1 :] -= w[..., j + 1 :, j : j + 1] * w[..., j : j + 1, j + 1 :]
    return w, pivots, info


def _permutation(pivots: torch.Tensor, m: int) -> torch.Tensor:
    """The row order (int64, (..., m)) that LAPACK's pivots stand for: row i of L @ U is row
    perm[i] of A (the swaps applied in turn to 0..m-1)."""
    perm = torch.arange(m, device=pivots.device).expand(*pivots.shape[:-1], m).clone()
    target = pivots.to(torch.int64) - 1
    for i in range(pivots.shape[-1]):
        t = target[..., i : i + 1]
        mine = perm[..., i : i + 1].clone()
        theirs = perm.gather(-1, t)
        perm.scatter_(-1, t, mine)
        perm[..., i : i + 1] = theirs
    return perm


def _perm_sign(pivots: torch.Tensor) -> torch.Tensor:
    """The determinant (+1 or -1, float32) of the permutation that the pivots stand for."""
    k = pivots.shape[-1]
    swaps = (pivots != torch.arange(1, k + 1, dtype=torch.int32, device=pivots.device)).sum(-1)
    return 1.0 - 2.0 * (swaps % 2).to(torch.float32)


# Bunch-Kaufman's pivot threshold (1 + sqrt(17)) / 8, as float32 computes it (LAPACK's ssytf2).
_BK_ALPHA = ((1 + torch.tensor(17.0).sqrt()) / 8).item()


def _swap_index(n: int, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(..., n) int64: 0..n-1 with positions a and b (per batch element, (..., 1)) exchanged."""
    base = torch.arange(n, device=a.device)
    return torch.where(base == a, b, torch.where(base == b, a, base))


def _lower_symmetric(t: torch.Tensor) -> torch.Tensor:
    """The symmetric matrix whose lower triangle is t's (the upper one mirrored from it)."""
    return t.tril() + t.tril(-1).mT


def _sytrf(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LDL^T with Bunch-Kaufman pivoting of the lower triangle of a (..., n, n), as LAPACK's
    ssytf2 (uplo 'L': the unblocked sytrf, bit for bit CPU's up to 65 rows, the same pivots past
    that): (LD, pivots, info), LD's lower triangle holding D's 1x1 and 2x2 blocks and L's multipliers, pivots 1-based
    (a 2x2 block's two negative), info the first zero column.

    One pass per column, all matrices in step: a matrix whose previous pass took a 2x2 block
    skips this one. The working matrix is kept symmetric (the updated lower triangle mirrored) so
    that a symmetric interchange of the trailing block is a row and a column gather."""
    n = a.shape[-1]
    batch = a.shape[:-2]
    w = _lower_symmetric(a).contiguous()
    pivots = torch.zeros(*batch, n, dtype=torch.int32, device=a.device)
    info = torch.zeros(batch, dtype=torch.int32, device=a.device)
    if a.numel() == 0:
        return w, pivots, info
    skip = torch.zeros(batch, dtype=torch.bool, device=a.device)
    cols = torch.arange(n, device=a.device)
    for j in range(n):
        active = ~skip
        absakk = w[..., j, j].abs()
        if j + 1 < n:
            imax = _isamax(w[..., j + 1 :, j]) + (j + 1)
            colmax = w[..., :, j].gather(-1, imax).abs().squeeze(-1)
            row = w.gather(-2, imax[..., None].expand(*batch, 1, n)).squeeze(-2).abs()
            rowmax = torch.where((cols < j) | (cols == imax), 0.0, row).amax(-1)
            diag_imax = w.diagonal(dim1=-2, dim2=-1).gather(-1, imax).abs().squeeze(-1)
        else:
            imax = torch.full((*batch, 1), j, device=a.device)
            colmax = rowmax = diag_imax = torch.zeros_like(absakk)
        zero = (torch.maximum(absakk, colmax) == 0) | absakk.isnan()
        keep = (absakk >= _BK_ALPHA * colmax) | (absakk >= _BK_ALPHA * colmax * (colmax / rowmax))
        two = active & ~zero & ~keep & ~(diag_imax >= _BK_ALPHA * rowmax)
        step = active & ~zero
        kp = torch.where((zero | keep)[..., None], j, imax)  # (..., 1)
        kk = torch.where(two[..., None], j + 1, j)
        kp = torch.where(step[..., None], kp, kk)  # no interchange where nothing is done
        at = _swap_index(n, kk, kp)[..., j:] - j
        block = w[..., j:, j:]
        block = block.gather(-2, at[..., :, None].expand_as(block)).gather(-1, at[..., None, :].expand_as(block))
        w[..., j:, j:] = block
        one = step & ~two
        if j + 1 < n:  # a 1x1 pivot: rank-1 update as ssyr(-1/d), then the column scaled by 1/d
            d11 = 1 / w[..., j, j]
            x = w[..., j + 1 :, j]
            t = w[..., j + 1 :, j + 1 :] + x[..., :, None] * (-d11[..., None] * x)[..., None, :]
            m = one[..., None, None]
            w[..., j + 1 :, j + 1 :] = torch.where(m, _lower_symmetric(t), w[..., j + 1 :, j + 1 :])
            w[..., j + 1 :, j] = torch.where(one[..., None], x * d11[..., None], x)
        if j + 2 < n:  # a 2x2 pivot: rank-2 update with ssytf2's multipliers
            d21 = w[..., j + 1, j]
            d11 = w[..., j + 1, j + 1] / d21
            d22 = w[..., j, j] / d21
            d21 = (1 / (d11 * d22 - 1)) / d21
            ck, ck1 = w[..., j + 2 :, j], w[..., j + 2 :, j + 1]
            wk = d21[..., None] * (d11[..., None] * ck - ck1)
            wkp1 = d21[..., None] * (d22[..., None] * ck1 - ck)
            rest = w[..., j + 2 :, j + 2 :]
            t = rest - ck[..., :, None] * wk[..., None, :] - ck1[..., :, None] * wkp1[..., None, :]
            w[..., j + 2 :, j + 2 :] = torch.where(two[..., None, None], _lower_symmetric(t), rest)
            w[..., j + 2 :, j] = torch.where(two[..., None], wk, ck)
            w[..., j + 2 :, j + 1] = torch.where(two[..., None], wkp1, ck1)
        code = (kp.squeeze(-1) + 1).to(torch.int32)
        code = torch.where(two, -code, code)
        pivots[..., j] = torch.where(active, code, pivots[..., j])
        if j + 1 < n:
            pivots[..., j + 1] = torch.where(two, code, pivots[..., j + 1])
        info = _first_error(info, active & zero, j + 1)
        skip = two
    return w.tril(), pivots, info


def _sytrs(ld: torch.Tensor, pivots: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """X with A X = b, A = L D L^T given by _sytrf's (LD, pivots), as LAPACK's ssytrs (lower):
    L D Y = P b forward, one column (or 2x2 block) per pass, then L^T back; batch dims broadcast."""
    n, k = b.shape[-2:]
    batch = torch.broadcast_shapes(ld.shape[:-2], b.shape[:-2])
    if n == 0 or k == 0 or 0 in batch:
        return torch.zeros(*batch, n, k, device=b.device)
    ld = ld.expand(*batch, n, n)
    pivots = pivots.expand(*batch, n).to(torch.int64)
    x = b.expand(*batch, n, k).clone()

    def swap(rows_a, rows_b):
        at = _swap_index(n, rows_a, rows_b)
        return x.gather(-2, at[..., None].expand(*batch, n, k))

    skip = torch.zeros(batch, dtype=torch.bool, device=b.device)
    starts = []
    for j in range(n):
        p = pivots[..., j : j + 1]
        two = ~skip & (p.squeeze(-1) < 0)
        one = ~skip & ~two
        starts.append(two)
        # the interchange: row j with p (1x1), row j + 1 with -p (2x2)
        row = torch.where(two[..., None], j + 1, j)
        x = swap(row, torch.where(skip[..., None], row, p.abs() - 1))
        xj = x[..., j, :].clone()
        if j + 1 < n:
            x[..., j + 1 :, :] -= torch.where(one[..., None, None], ld[..., j + 1 :, j, None] * xj[..., None, :], 0.0)
        x[..., j, :] = torch.where(one[..., None], xj * (1 / ld[..., j, j])[..., None], xj)
        if j + 1 < n:
            xj1 = x[..., j + 1, :].clone()
            if j + 2 < n:
                upd = ld[..., j + 2 :, j, None] * xj[..., None, :]
                rest = x[..., j + 2 :, :] - torch.where(two[..., None, None], upd, 0.0)
                upd = ld[..., j + 2 :, j + 1, None] * xj1[..., None, :]
                x[..., j + 2 :, :] = rest - torch.where(two[..., None, None], upd, 0.0)
            akm1k = ld[..., j + 1, j]
            akm1 = ld[..., j, j] / akm1k
            ak = ld[..., j + 1, j + 1] / akm1k
            denom = (akm1 * ak - 1)[..., None]
            bkm1, bk = xj / akm1k[..., None], xj1 / akm1k[..., None]
            m = two[..., None]
            x[..., j, :] = torch.where(m, (ak[..., None] * bkm1 - bk) / denom, x[..., j, :])
            x[..., j + 1, :] = torch.where(m, (akm1[..., None] * bk - bkm1) / denom, xj1)
        skip = two
    for j in range(n - 1, -1, -1):
        second = starts[j - 1] if j else torch.zeros_like(skip)  # j closes a 2x2 block begun at j - 1
        first = starts[j]  # j opens one: done with its second column
        if j + 1 < n:
            dot = (ld[..., j + 1 :, j, None] * x[..., j + 1 :, :]).sum(-2)
            x[..., j, :] = torch.where(first[..., None], x[..., j, :], x[..., j, :] - dot)
            if j:
                dot = (ld[..., j + 1 :, j - 1, None] * x[..., j + 1 :, :]).sum(-2)
                x[..., j - 1, :] = torch.where(second[..., None], x[..., j - 1, :] - dot, x[..., j - 1, :])
        p = pivots[..., j : j + 1]
        row = torch.full_like(p, j)
        x = swap(row, torch.where(first[..., None], row, p.abs() - 1))
    return x


# ---- solves ---------------------------------------------------------------------------------------


def _trsm(a: torch.Tensor, b: torch.Tensor, upper: bool, unit: bool) -> torch.Tensor:
    """X with a @ X = b for triangular a (..., n, n) (only its `upper` or lower triangle is read,
    not its diagonal when `unit`), b (..., n, k), batch dims broadcast. Substitution one row per
    pass: the row of b less the products with the rows already solved, divided by the diagonal."""
    n, k = b.shape[-2:]
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    x = torch.empty(*batch, n, k, device=b.device)
    if x.numel() == 0:
        return x
    b = b.expand(*batch, n, k)
    for i in range(n - 1, -1, -1) if upper else range(n):
        done = slice(i + 1, n) if upper else slice(0, i)
        r = b[..., i, :]
        if (n - i - 1 if upper else i) > 0:
            r = r - (a[..., i : i + 1, done] @ x[..., done, :]).squeeze(-2)
        if not unit:
            r = r / a[..., i, i].unsqueeze(-1)
        x[..., i, :] = r
    return x


def _getrs(lu: torch.Tensor, pivots: torch.Tensor, b: torch.Tensor, left: bool, adjoint: bool) -> torch.Tensor:
    """X with op(A) X = b (left) or X op(A) = b, A = P L U given by getrf's (lu, pivots), op the
    transpose when `adjoint` (real matrices); batch dims broadcast."""
    if not left:  # X A = B  <=>  A^T X^T = B^T
        return _getrs(lu, pivots, b.mT, True, not adjoint).mT
    n, k = b.shape[-2:]
    batch = torch.broadcast_shapes(lu.shape[:-2], b.shape[:-2])
    if n == 0 or k == 0 or 0 in batch:
        return torch.zeros(*batch, n, k, device=b.device)
    rows = _permutation(pivots, n).expand(*batch, n)[..., None].expand(*batch, n, k)
    b = b.expand(*batch, n, k)
    if not adjoint:  # A[perm] = L U
        y = _trsm(lu, b.gather(-2, rows), upper=False, unit=True)
        return _trsm(lu, y, upper=True, unit=False)
    y = _trsm(lu.mT, b, upper=False, unit=False)  # U^T L^T (X[perm]) = B
    y = _trsm(lu.mT, y, upper=True, unit=True)
    return torch.empty_like(y).scatter_(-2, rows, y)


def _check_pivots(pivots: torch.Tensor, m: int, low: str, high: str) -> None:
    """CPU's range check of user-given pivots (one read of the device)."""
    if pivots.numel() == 0:
        return
    code = int(((pivots < 1).any().to(torch.int32) + 2 * (pivots > m).any().to(torch.int32)).item())
    if code & 1:
        raise RuntimeError(low)
    if code & 2:
        raise RuntimeError(high)


def _unpack(lu: torch.Tensor, pivots: torch.Tensor | None, data: bool) -> tuple:
    """(P, L, U) of getrf's result: P (m x m) with A = P L U if pivots are given, L (m x k) unit
    lower and U (k x n) upper if `data`."""
    m, n = lu.shape[-2:]
    k = min(m, n)
    p = low = up = None
    if pivots is not None:
        perm = _permutation(pivots, m)
        p = torch.zeros(*lu.shape[:-2], m, m, device=lu.device)
        if p.numel():
            p.scatter_(-2, perm.unsqueeze(-2), 1.0)
    if data:
        low = lu[..., :, :k].tril(-1)
        low.diagonal(dim1=-2, dim2=-1).fill_(1.0)
        up = lu[..., :k, :].triu()
    return p, low, up
