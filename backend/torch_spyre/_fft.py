"""Discrete Fourier transforms and complex construction on the device, composed of native ops.

The card has no complex arithmetic, but complex64 tensors live on it and ``torch.view_as_real``
is a native float32 view ``[..., 2]`` of one whose writes reach it. So a complex tensor is read
and written here as that interleaved float view, and a DFT along one dim is one float32 matmul:
with the dim moved last, ``[..., n, 2]`` is ``[..., 2n]`` (real and imaginary parts alternate),
and the transform is a ``[2n, 2n]`` matrix of the cosines and sines of ``2 pi (j k mod n) / n``
(computed on the host in float64, rounded once to float32, moved to the device once per size and
cached). A transform over several dims is one such matmul per dim; a signal longer than
``_DIRECT`` points is split in two (Cooley-Tukey: a DFT over each factor of n, a twiddle multiply
between them), which keeps the tables small and the work near n log n.

The three ATen primitives every ``torch.fft`` function, ``stft`` and ``istft`` reduce to are here
(``_fft_r2c``, ``_fft_c2r``, ``_fft_c2c`` and their out= forms), with the physical conjugate that
torch's lazy ``conj()`` views resolve through, ``torch.complex`` and ``torch.polar``.

Accuracy: each output sums n products in float32, an error near ``sqrt(n) * eps * max|x|``, the
order of a float32 FFT's own (2-3e-7 of the largest output against float64 up to n = 2048, where
CPU's is 1-1.5e-7). Results take CPU's dtypes and CPU's (MKL's) strides: the batch dims outermost
in the input's stride order, the transformed dims innermost.
"""

from __future__ import annotations

import collections
import math

import torch

from ._composite import scalar_name, with_out, write_out
from ._memory import register_backend_cache

# ATen's fft_norm_mode (the `normalization` argument of the _fft_* ops) -> the scale of an
# n-point transform: none, 1/sqrt(n), 1/n.
_SCALES = {0: lambda n: 1.0, 1: lambda n: 1.0 / math.sqrt(n), 2: lambda n: 1.0 / n}
# The longest signal one matmul transforms (a 16 MB table); longer ones are split.
_DIRECT = 1024
# The longest signal that cannot be split (a prime) still transformed by one matmul (a 64 MB
# table); longer ones decline to the CPU.
_LONGEST_UNSPLIT = 2048
# Device bytes the cached tables may hold; the least recently used go first beyond it.
_CACHE_BYTES = 256 << 20

_tables: collections.OrderedDict = collections.OrderedDict()  # (what, n, forward, scale, conj, device) -> table
register_backend_cache(_tables.clear)


def _cached(key, build) -> torch.Tensor:
    """The table cached under key, built by build() on a miss (least recently used ones evicted)."""
    table = _tables.get(key)
    if table is None:
        table = build()
        _tables[key] = table
        total = sum(t.nbytes for t in _tables.values())
        while total > _CACHE_BYTES and len(_tables) > 1:
            total -= _tables.popitem(last=False)[1].nbytes
    else:
        _tables.move_to_end(key)
    return table


def _turns(n: int, scale: float, sign: float) -> tuple[torch.Tensor, torch.Tensor]:
    """scale * cos(2 pi r / n) and sign * scale * sin(2 pi r / n) for r < n, computed in float64
    and rounded once to float32; exactly 0 and +-scale at the quarter turns (so that the imaginary
    parts of a c2r input's zero and Nyquist terms, which a real transform ignores, contribute
    exactly nothing)."""
    turn = torch.arange(n, dtype=torch.float64) * (2 * math.pi / n)
    cos, sin = torch.cos(turn), torch.sin(turn)
    for quarter, (c, s) in enumerate(((1.0, 0.0), (0.0, 1.0), (-1.0, 0.0), (0.0, -1.0))):
        if quarter * n % 4 == 0:
            cos[quarter * n // 4], sin[quarter * n // 4] = c, s
    return (cos * scale).float(), (sin * (sign * scale)).float()


def _angles(rows: int, cols: int, n: int, scale: float = 1.0, sign: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """_turns at (j k mod n) for j < rows, k < cols: [rows, cols] float32 each (a gather, so each
    entry is rounded once, and the sign flips and doublings made of them below are exact)."""
    cos, sin = _turns(n, scale, sign)
    r = (torch.arange(rows, dtype=torch.int64)[:, None] * torch.arange(cols, dtype=torch.int64)[None, :]) % n
    return cos[r], sin[r]


def _table(what: str, n: int, forward: bool, scale: float, conj: bool, device) -> torch.Tensor:
    """A float32 table on `device` for an n-point transform, built once per size (cached).

    what: "c2c" ([2n, 2n]: interleaved complex in and out), "r2c" ([n, 2m], m = n//2+1 outputs),
    "r2c_full" ([n, 2n]) or "c2r" ([2m, n]: the m onesided terms of a Hermitian signal in, real out).
    forward: the exponent's sign is -1 (else +1). scale: multiplies the result. conj: the complex
    input is read conjugated (its stored imaginary parts negated: a conj() view's values)."""
    return _cached((what, n, forward, scale, conj, device), lambda: _build(what, n, forward, scale, conj, device))


def _build(what: str, n: int, forward: bool, scale: float, conj: bool, device) -> torch.Tensor:
    """The table _table caches, from values computed in float64 and rounded once to float32."""
    sign = -1.0 if forward else 1.0
    half = n // 2 + 1
    if what == "c2c":
        # (a + ib)(c + is) = (a c - b s) + i (a s + b c): row a of the table is (c, s), row b (-s, c).
        c, s = _angles(n, n, n, scale, sign)
        b = torch.stack((-s, c), dim=-1)
        m = torch.stack((torch.stack((c, s), dim=-1), -b if conj else b), dim=1).reshape(2 * n, 2 * n)
    elif what in ("r2c", "r2c_full"):
        c, s = _angles(n, half if what == "r2c" else n, n, scale, sign)
        m = torch.stack((c, s), dim=-1).reshape(n, -1)
    else:  # c2r: x_j = sum_k w_k (Re X_k cos - Im X_k sin), w_k = 2 but for the zero and Nyquist terms
        c, s = _angles(half, n, n, scale, sign)
        w = torch.full((half, 1), 2.0)
        w[0] = 1.0
        if n % 2 == 0:
            w[-1] = 1.0
        m = torch.stack((w * c, (w if conj else -w) * s), dim=1).reshape(2 * half, n)
    return m.to(device)


def _twiddles(n: int, n1: int, forward: bool, device) -> torch.Tensor:
    """[n2, n1, 2]: w_n^(j2 k1) = exp(-+2 pi i j2 k1 / n) for j2 < n2 = n / n1, k1 < n1 (cached)."""

    def build():
        return torch.stack(_angles(n // n1, n1, n, 1.0, -1.0 if forward else 1.0), dim=-1).to(device)

    return _cached(("twiddle", n, forward, n1, False, device), build)


def _factor(n: int) -> int | None:
    """The divisor of n nearest sqrt(n) from below (the first stage's length), None for a prime."""
    for f in range(math.isqrt(n), 1, -1):
        if n % f == 0:
            return f
    return None


def _feasible(n: int) -> bool:
    """Whether an n-point transform keeps its tables in bounds (a long prime factor does not)."""
    f = _factor(n) if n > _DIRECT else None
    if f is None:
        return n <= max(_DIRECT, _LONGEST_UNSPLIT)
    return _feasible(f) and _feasible(n // f)


def _c2c_last(v, n: int, forward: bool, scale: float, conj: bool):
    """The n-point c2c DFT of v [..., n, 2] (interleaved, any strides) along its dim -2."""
    lead = v.shape[:-2]
    f = _factor(n) if n > _DIRECT else None
    if f is None:
        table = _table("c2c", n, forward, scale, conj, v.device)
        return (v.reshape(*lead, 2 * n) @ table).reshape(*lead, n, 2)
    return _split_c2c(v, n, f, forward, scale, conj)


def _split_c2c(v, n: int, n1: int, forward: bool, scale: float, conj: bool):
    """Cooley-Tukey for n = n1 * n2: with j = j1 n2 + j2 and k = k1 + n1 k2,
    X[k] = sum_j2 w_n2^(j2 k2) w_n^(j2 k1) sum_j1 x[j] w_n1^(j1 k1)."""
    n2 = n // n1
    lead = v.shape[:-2]
    v = v.reshape(*lead, n1, n2, 2).transpose(-3, -2)  # [..., j2, j1]
    v = _c2c_last(v, n1, forward, 1.0, conj)  # [..., j2, k1]
    t = _twiddles(n, n1, forward, v.device)
    a, b = v.select(-1, 0), v.select(-1, 1)
    c, s = t.select(-1, 0), t.select(-1, 1)
    v = torch.stack((a * c - b * s, a * s + b * c), dim=-1)
    v = _c2c_last(v.transpose(-3, -2), n2, forward, scale, False)  # [..., k1, k2]
    return v.transpose(-3, -2).reshape(*lead, n, 2)


def _r2c_last(x, n: int, onesided: bool, scale: float):
    """The forward DFT of real x [..., n] along its last dim: [..., m, 2], m = n//2+1 or n."""
    lead = x.shape[:-1]
    if n <= _DIRECT or _factor(n) is None:
        table = _table("r2c" if onesided else "r2c_full", n, True, scale, False, x.device)
        return (x.reshape(*lead, n) @ table).reshape(*lead, -1, 2)
    v = _c2c_last(torch.stack((x, torch.zeros_like(x)), dim=-1), n, True, scale, False)
    return v.narrow(-2, 0, n // 2 + 1) if onesided else v


def _c2r_last(v, n: int, scale: float, conj: bool):
    """The inverse DFT of the onesided Hermitian v [..., n//2+1, 2] along dim -2: real [..., n]."""
    lead = v.shape[:-2]
    half = n // 2 + 1
    if n <= _DIRECT or _factor(n) is None:
        table = _table("c2r", n, False, scale, conj, v.device)
        return v.reshape(*lead, 2 * half) @ table
    # The whole spectrum: X[n-k] = conj(X[k]); the zero and Nyquist terms' imaginary parts dropped.
    flip = torch.tensor([1.0, -1.0], device=v.device)
    v = v * flip if conj else v.clone()
    v[..., 0, 1] = 0.0
    if n % 2 == 0:
        v[..., half - 1, 1] = 0.0
    full = torch.cat((v, v[..., 1 : n - half + 1, :].flip(-2) * flip), dim=-2)
    return _c2c_last(full, n, False, scale, False).select(-1, 0)


def _partition(dims: list[int], keep) -> tuple[list[int], int]:
    """std::partition's result in libstdc++'s order (it swaps from both ends), which decides how
    CPU orders batch dims of equal stride."""
    a, first, last = list(dims), 0, len(dims)
    while True:
        while first != last and keep(a[first]):
            first += 1
        if first == last:
            return a, first
        last -= 1
        while first != last and not keep(a[last]):
            last -= 1
        if first == last:
            return a, first
        a[first], a[last] = a[last], a[first]
        first += 1


def _by_stride(dims, strides) -> list[int]:
    """dims by decreasing stride, equal strides kept in order (CPU's insertion sort of a few dims)."""
    return sorted(dims, key=lambda d: -strides[d])


def _cpu_strides(in_strides, out_sizes, dims) -> list[int]:
    """The strides of CPU's result of out_sizes transformed over `dims` (in this order) from an
    input of in_strides: the batch dims outermost by decreasing input stride, then `dims`, dense."""
    wanted = set(dims)
    order, batch_end = _partition(list(range(len(out_sizes))), lambda d: d not in wanted)
    strides = [0] * len(out_sizes)
    step = 1
    for d in reversed(dims):
        strides[d] = step
        step *= max(out_sizes[d], 1)
    numel = 1
    for d in reversed(_by_stride(order[:batch_end], in_strides)):
        strides[d] = numel * step
        numel *= out_sizes[d]
    return strides


def _dims(x, dim, normalization: int) -> list[int] | None:
    """dim wrapped into range; None (decline) for a repeated or out-of-range dim, no dim, a 0-dim
    input, an unknown normalization, or a signal that is empty or too long to transform here."""
    ndim = x.dim()
    if ndim == 0 or not dim or normalization not in _SCALES or any(not -ndim <= d < ndim for d in dim):
        return None
    dims = [d % ndim for d in dim]
    if len(set(dims)) != len(dims) or any(x.shape[d] == 0 or not _feasible(x.shape[d]) for d in dims):
        return None
    return dims


def _stored(x) -> tuple[torch.Tensor, bool]:
    """A complex tensor's stored values as an interleaved float view [..., 2], and whether they are
    to be read conjugated (x is a conj() view)."""
    conj = x.is_conj()
    return torch.view_as_real(x.conj() if conj else x), conj


def _c2c_dims(work, dims, normalization: int, forward: bool, conj: bool):
    """c2c transforms of the interleaved `work` over dims, one dim at a time; conj: the first one
    reads its input conjugated."""
    for d in dims:
        n = work.shape[d]
        moved = _c2c_last(work.movedim(d, -2), n, forward, _SCALES[normalization](n), conj)
        work = moved.movedim(-2, d)
        conj = False
    return work


def fft_r2c(self, dim, normalization, onesided):
    """aten::_fft_r2c: the DFT (exponent -1) of a real float32 tensor over dim, the last of them
    onesided (n//2+1 terms) when `onesided`; complex64 with CPU's strides. NotImplemented (the CPU
    path) for another dtype or a dim _dims declines."""
    dims = _dims(self, dim, normalization)
    if self.dtype != torch.float32 or dims is None:
        return NotImplemented
    last = dims[-1]
    n = self.shape[last]
    out_sizes = list(self.shape)
    if onesided:
        out_sizes[last] = n // 2 + 1
    order = [*_by_stride(dims[:-1], self.stride()), last]
    out = torch.empty_strided(out_sizes, _cpu_strides(self.stride(), out_sizes, order), dtype=torch.complex64,
                              device=self.device)  # fmt: skip
    if out.numel() == 0:
        return out
    work = _r2c_last(self.movedim(last, -1), n, onesided, _SCALES[normalization](n)).movedim(-2, last)
    torch.view_as_real(out).copy_(_c2c_dims(work, order[:-1], normalization, True, False))
    return out


def fft_c2c(self, dim, normalization, forward):
    """aten::_fft_c2c: the DFT of a complex64 tensor over dim, exponent -1 when `forward` else +1,
    with CPU's strides; no dim copies. NotImplemented (the CPU path) for another dtype or a dim
    _dims declines."""
    if self.dtype != torch.complex64:
        return NotImplemented
    if len(dim) == 0:
        return self.clone()
    dims = _dims(self, dim, normalization)
    if dims is None:
        return NotImplemented
    order = _by_stride(dims, self.stride())
    out = torch.empty_strided(self.shape, _cpu_strides(self.stride(), list(self.shape), order),
                              dtype=torch.complex64, device=self.device)  # fmt: skip
    if out.numel() == 0:
        return out
    work, conj = _stored(self)
    torch.view_as_real(out).copy_(_c2c_dims(work, order, normalization, forward, conj))
    return out


def fft_c2r(self, dim, normalization, last_dim_size):
    """aten::_fft_c2r: the inverse DFT (exponent +1) of a Hermitian complex64 tensor over dim, to a
    real float32 one of last_dim_size points along the last of them (where the input holds the
    last_dim_size//2+1 onesided terms; the imaginary parts of the zero and Nyquist terms are
    ignored, as CPU's), after c2c transforms over the other dims, as CPU; CPU's strides."""
    dims = _dims(self, dim, normalization)
    n = int(last_dim_size)
    if self.dtype != torch.complex64 or dims is None or n < 1 or not _feasible(n):
        return NotImplemented
    last = dims[-1]
    if self.shape[last] != n // 2 + 1:
        return NotImplemented  # CPU's assertion
    strides = list(self.stride())
    order = _by_stride(dims[:-1], strides)
    if order:  # CPU's c2c stage comes first, with a layout of its own the c2r stage keeps
        strides = _cpu_strides(strides, list(self.shape), order)
    out_sizes = list(self.shape)
    out_sizes[last] = n
    out = torch.empty_strided(out_sizes, _cpu_strides(strides, out_sizes, [last]), dtype=torch.float32,
                              device=self.device)  # fmt: skip
    if out.numel() == 0:
        return out
    work, conj = _stored(self)
    work = _c2c_dims(work, order, normalization, False, conj).movedim(last, -2)
    out.copy_(_c2r_last(work, n, _SCALES[normalization](n), conj and not order).movedim(-1, last))
    return out


def _conj_physical(self):
    """aten::_conj_physical: a copy with the imaginary parts negated (a plain copy when real)."""
    if not self.is_complex():
        return self.clone()
    if self.dtype != torch.complex64:
        return NotImplemented
    out = torch.empty_like(self)
    if out.is_conj():
        out = out.conj()  # empty_like keeps a conj() view's bit; the result holds plain values
    values, conj = _stored(self)
    halves = torch.view_as_real(out)
    halves.select(-1, 0).copy_(values.select(-1, 0))
    im = values.select(-1, 1)
    halves.select(-1, 1).copy_(im if conj else torch.neg(im))
    return out


def conj_physical_(self):
    """aten::conj_physical_: the imaginary parts negated in place (nothing for a real tensor)."""
    if not self.is_complex():
        return self
    if self.dtype != torch.complex64:
        return NotImplemented
    # Negating the stored values of a conj() view conjugates what it shows too.
    torch.view_as_real(self.conj() if self.is_conj() else self).select(-1, 1).neg_()
    return self


def conj_physical_out(self, *, out):
    """aten::conj_physical.out: conj(self) into out, which must have self's dtype (CPU's check),
    resized under torch's out= rules."""
    if out.dtype != self.dtype:
        raise RuntimeError(f"Found dtype {scalar_name(out.dtype)} but expected {scalar_name(self.dtype)}")
    result = _conj_physical(self)
    if result is NotImplemented:
        return NotImplemented
    return write_out(out, result)


def _from_parts(parts):
    """The kernel (a, b, *, out=None) of torch.complex or torch.polar: a complex64 tensor of the
    broadcast shape whose real and imaginary halves `parts`(a, b) gives, written through
    view_as_real; CPU's dtype checks (two float tensors of one dtype, a complex64 out)."""

    def kernel(a, b, *, out=None):
        if a.dtype not in (torch.float16, torch.float32, torch.float64) or b.dtype != a.dtype:
            if a.dtype == b.dtype or not (a.is_floating_point() and b.is_floating_point()):
                raise RuntimeError("Expected both inputs to be Half, Float or Double tensors but got "
                                   f"{scalar_name(a.dtype)} and {scalar_name(b.dtype)}")  # fmt: skip
            raise RuntimeError(f"Expected object of scalar type {scalar_name(a.dtype)} but got scalar type "
                               f"{scalar_name(b.dtype)} for second argument")  # fmt: skip
        if a.dtype != torch.float32:
            return NotImplemented
        if out is not None and out.dtype != torch.complex64:
            raise RuntimeError("Expected object of scalar type ComplexFloat but got scalar type "
                               f"{scalar_name(out.dtype)} for argument 'out'")  # fmt: skip
        shape = torch.broadcast_shapes(a.shape, b.shape)
        result = torch.empty(shape, dtype=torch.complex64, device=a.device)
        if result.numel():
            re, im = parts(a, b)
            halves = torch.view_as_real(result)
            halves.select(-1, 0).copy_(re.expand(shape))
            halves.select(-1, 1).copy_(im.expand(shape))
        if out is None:
            return result
        return write_out(out, result)

    return kernel


def _polar_parts(magnitude, angle):
    return magnitude * torch.cos(angle), magnitude * torch.sin(angle)


KERNELS = {
    "_fft_r2c": fft_r2c,
    "_fft_r2c.out": with_out(fft_r2c),
    "_fft_c2c": fft_c2c,
    "_fft_c2c.out": with_out(fft_c2c),
    "_fft_c2r": fft_c2r,
    "_fft_c2r.out": with_out(fft_c2r),
    # aten_ops.cpp registers these three as the CPU fallback, which keeps install() from taking
    # them until it no longer does.
    "_conj_physical": _conj_physical,
    "conj_physical_": conj_physical_,
    "conj_physical.out": conj_physical_out,
    "complex": _from_parts(lambda re, im: (re, im)),
    "complex.out": _from_parts(lambda re, im: (re, im)),
    "polar": _from_parts(_polar_parts),
    "polar.out": _from_parts(_polar_parts),
}
