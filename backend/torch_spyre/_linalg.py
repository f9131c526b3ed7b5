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

KERNELS maps ATen overload names to kernels (merged into _decomposed.OWN).
"""

from __future__ import annotations

import math

import torch

from ._composite import castable, computable, meta, same_scalar_type, structured, two_sum, with_out

_aten = torch.ops.aten

# LAPACK's safe minimum for float32: a pivot at least this large is inverted once and multiplied
# (getrf's scaling of a column); below it the reciprocal would overflow, so it divides.
_SFMIN = torch.finfo(torch.float32).tiny

# The Taylor polynomial of exp: degree, the 1-norm up to which it is used unscaled (truncation
# error below 1/15!, 8e-13), and the step of its Paterson-Stockmeyer evaluation (x^0..x^3 summed
# per block, the blocks joined by Horner's rule in x^4).
_EXP_DEGREE = 14
_EXP_THETA = 1.0
_EXP_STEP = 4


def _exp_coefficients() -> tuple[torch.Tensor, torch.Tensor]:
    """1/k! for k up to the degree, 0 past it to fill the last block, as float32 (hi, lo) pairs
    (computed in float64 on the host: constants of the degree alone)."""
    blocks = _EXP_DEGREE // _EXP_STEP + 1
    c = torch.zeros(blocks * _EXP_STEP, dtype=torch.float64)
    c[: _EXP_DEGREE + 1] = torch.tensor([1 / math.factorial(k) for k in range(_EXP_DEGREE + 1)], dtype=torch.float64)
    hi = c.float()
    return hi, (c - hi.double()).float()


_EXP_COEFFICIENTS = _exp_coefficients()


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


# ---- double-float arithmetic ----------------------------------------------------------------------
# A value as an unevaluated sum hi + lo of float32 tensors (|lo| <= ulp(hi) / 2): 48 significant
# bits from IEEE float32 ops alone (Dekker's and Knuth's error-free transformations), where float32
# is not accurate enough.


def _fast_two_sum(a, b):
    """two_sum for |a| >= |b| (or a = 0)."""
    s = a + b
    return s, b - (s - a)


def _split(a):
    """(hi, lo) = a with 12-bit halves, whose products float32 holds exactly (Veltkamp)."""
    t = a * 4097.0
    hi = t - (t - a)
    return hi, a - hi


def _two_prod(a, b, split_a=None, split_b=None):
    """(p, e) with p = fl(a * b) and p + e = a * b exactly (Dekker); splits may be given."""
    p = a * b
    ah, al = split_a or _split(a)
    bh, bl = split_b or _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _dd_add(x, y):
    """The double-float sum of two double-float values."""
    s, e = two_sum(x[0], y[0])
    return _fast_two_sum(s, e + (x[1] + y[1]))


def _dd_sum(hi, lo, dim):
    """The double-float sum of (hi, lo) over `dim`, kept (size 1): pairwise, the halves added with
    two_sum (zeros pad the length to a power of two)."""
    k = 1
    while k < hi.shape[dim]:
        k *= 2
    if k > hi.shape[dim]:
        pad = list(hi.shape)
        pad[dim] = k - hi.shape[dim]
        hi, lo = (torch.cat([t, t.new_zeros(pad)], dim) for t in (hi, lo))
    while k > 1:
        k //= 2
        s, e = two_sum(hi.narrow(dim, 0, k), hi.narrow(dim, k, k))
        hi, lo = s, lo.narrow(dim, 0, k) + lo.narrow(dim, k, k) + e
    return _fast_two_sum(hi, lo)


def _dd_matmul(x, y):
    """The double-float product of (..., n, n) matrices: the hi parts' products exactly, summed in
    double-float; the cross terms hi*lo, small, by float32 matmuls."""
    (ah, al), (bh, bl) = x, y
    split_a = [t.unsqueeze(-1) for t in _split(ah)]
    split_b = [t.unsqueeze(-3) for t in _split(bh)]
    p, e = _two_prod(ah.unsqueeze(-1), bh.unsqueeze(-3), split_a, split_b)  # (..., i, k, j)
    hi, lo = _dd_sum(p, e, dim=-2)
    return _fast_two_sum(hi.squeeze(-2), lo.squeeze(-2) + (ah @ bl + al @ bh))


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


def linalg_matrix_exp(A):
    """exp(A) by scaling and squaring in double-float arithmetic (so the float32 result is exp
    correctly rounded but for a few units in the last place: float32 alone loses several digits
    to the squarings, more than CPU's own error allows): each matrix scaled by 2^-s to a 1-norm of
    at most _EXP_THETA, its Taylor polynomial of degree _EXP_DEGREE (Paterson-Stockmeyer), squared
    s times (s per matrix: the batch squares together, each as often as it needs)."""
    spec = _aten.linalg_matrix_exp.default(meta(A))
    if not computable(A):
        return NotImplemented
    if A.numel() == 0:
        return _like(spec, A)
    norm = A.abs().sum(-2).amax(-1)  # the 1-norm, per matrix
    s = torch.ceil(torch.log2(norm / _EXP_THETA)).clamp(min=0).nan_to_num(0.0)
    squarings = int(s.max().item())
    x = A * torch.pow(2.0, -s)[..., None, None]  # exact: a power of two
    zero = torch.zeros_like(x)
    powers = [(_eye(A.shape[-1], A).expand_as(x), zero), (x, zero)]
    for _ in range(2, _EXP_STEP + 1):
        powers.append(_dd_matmul(powers[-1], powers[1]))
    # Block j of the polynomial is sum_i c[4j + i] x^i (i < 4): all blocks' terms in one product.
    blocks = len(_EXP_COEFFICIENTS[0]) // _EXP_STEP
    shape = (blocks, _EXP_STEP) + (1,) * A.dim()
    ch, cl = (c.reshape(shape).to(A.device) for c in _EXP_COEFFICIENTS)
    ph, pl = (torch.stack([p[i] for p in powers[:_EXP_STEP]]) for i in (0, 1))
    terms = _two_prod(ch, ph)
    terms = terms[0], terms[1] + (ch * pl + cl * ph)
    hi, lo = (t.squeeze(1) for t in _dd_sum(*terms, dim=1))
    e = (hi[-1], lo[-1])
    for j in range(blocks - 2, -1, -1):
        e = _dd_add((hi[j], lo[j]), _dd_matmul(powers[_EXP_STEP], e))
    for i in range(squarings):
        square = _dd_matmul(e, e)
        more = (s > i)[..., None, None]
        e = torch.where(more, square[0], e[0]), torch.where(more, square[1], e[1])
    return _like(spec, e[0] + e[1])


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
