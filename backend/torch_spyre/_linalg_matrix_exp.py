"""The matrix exponential on the device, in double-float arithmetic (pairs of float32), so that its
float32 result rounds as CPU's does (the kernel of linalg.matrix_exp, listed in _linalg.KERNELS).
"""

from __future__ import annotations

import math

import torch

from ._composite import computable, meta, two_sum
from ._linalg_lapack import _eye, _like

_aten = torch.ops.aten


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
