"""Scans and bit-level ops on the device (logcumsumexp, cummax/cummin, gcd/lcm, shifts, nextafter, frexp,
hash_tensor), composed of native ops.

- Scans run as Hillis-Steele (log-depth) scans along the last dim: step s combines each element with
  the one s places before it, for s = 1, 2, 4, ... < n. logcumsumexp combines by logaddexp
  (max + log1p(exp(-|a - b|))), so no partial sum leaves the range of its own magnitude (exp(x - max)
  then cumsum underflows at [-200, 0]), on float32 pairs hi + lo so that a large result is not
  rounded at every step; cummax / cummin combine (value, index) pairs by CPU's rule, an associative
  one: the later element wins when it is NaN or >= (<=) the earlier, so among equal values the last
  index wins and a NaN holds until the next NaN.
- gcd is Euclid's algorithm on whole tensors, step by step until no remainder is left (one host
  read per step), with C's truncated remainder (fmod) as CPU's loop uses it, abs(INT_MIN) included.
- Shifts are multiplications (left) and floor divisions (right) by a power of two from a table,
  wrapping as the device's integer multiply wraps; out-of-range and negative shifts give CPU's
  results (0 for left shifts, the sign for right shifts).
- nextafter, frexp and hash_tensor work on the bit patterns: a float viewed as an integer of its
  width (a native view) or converted to float64 (exact, native) and viewed as int64.

KERNELS maps ATen overload names to kernels; _decomposed.py registers them for the device. A kernel
returns NotImplemented for what the device cannot compute (float64 arithmetic, complex), which then
takes the CPU fallback under its policy; where CPU refuses a dtype, the kernel raises CPU's error.
"""

from __future__ import annotations

import torch

from ._composite import cpp_name, meta, scalar_name, two_sum, with_out, write_out

_INTEGERS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)  # what CPU's integer kernels take
_NATIVE_INTEGERS = (torch.int8, torch.int32, torch.int64)  # what the device computes in
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _refuse(kernel: str, dtype: torch.dtype):
    """CPU's error for a dtype its kernel is not compiled for."""
    raise NotImplementedError(f"\"{kernel}\" not implemented for '{scalar_name(dtype)}'")


def _bits(dtype: torch.dtype) -> int:
    return torch.iinfo(dtype).bits if not dtype.is_floating_point else torch.finfo(dtype).bits


def _wrap_dim(x: torch.Tensor, dim: int) -> int:
    from torch._prims_common import canonicalize_dim  # IndexError with CPU's message

    return canonicalize_dim(max(x.dim(), 1), dim)


def _scan(tensors: tuple, combine) -> tuple:
    """Inclusive Hillis-Steele scan of tensors [..., n] along the last dim: `combine(earlier, later)`
    (tuples of equal-shaped tensors) must be associative; it runs ceil(log2 n) times."""
    n = tensors[0].shape[-1]
    s = 1
    while s < n:
        earlier = tuple(t[..., : n - s] for t in tensors)
        later = tuple(t[..., s:] for t in tensors)
        combined = combine(earlier, later)
        tensors = tuple(torch.cat([t[..., :s], c], -1) for t, c in zip(tensors, combined, strict=True))
        s *= 2
    return tensors


def _cast_message(dtype: torch.dtype, out: torch.Tensor) -> str | None:
    """TensorIterator's rule for writing a result of `dtype` into out= (or in place): CPU's message
    when out's dtype cannot take it by a safe cast, else None."""
    from torch._prims_common import can_safe_cast_to

    if not can_safe_cast_to(cast_from=dtype, cast_to=out.dtype):
        return f"result type {scalar_name(dtype)} can't be cast to the desired output type {scalar_name(out.dtype)}"
    return None


def _cast_rule(result: torch.Tensor, out: torch.Tensor) -> str | None:
    """_cast_message as an out= rule of with_out."""
    return _cast_message(result.dtype, out)


def _inplace(fn):
    """The in-place form of a functional binary kernel, after CPU's checks: the promoted type must
    cast to self's, and self must already have the broadcast shape."""

    def run(self, other):
        wrong = _cast_message(torch.result_type(self, other), self)
        if wrong:
            raise RuntimeError(wrong)
        shape = torch.broadcast_shapes(self.shape, other.shape if isinstance(other, torch.Tensor) else ())
        if shape != self.shape:
            raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape {list(shape)}")
        result = fn(self, other)
        return NotImplemented if result is NotImplemented else self.copy_(result)

    return run


# --------------------------------------------------------------------------------------------- scans
def _log_add_exp_pairs(earlier, later):
    """logaddexp of two numbers held as unevaluated float32 sums hi + lo (finite): the larger plus
    log1p(exp(-distance)), the sum kept as hi + lo again, so each step adds an error near float32's
    epsilon in absolute terms rather than half an ulp of the (large) result."""
    (ah, al), (bh, bl) = earlier, later
    first = ah >= bh
    big_h, big_l = torch.where(first, ah, bh), torch.where(first, al, bl)
    small_h, small_l = torch.where(first, bh, ah), torch.where(first, bl, al)
    d = (small_h - big_h) + (small_l - big_l)
    # exp(d) is below float32's smallest denormal there: 0 exactly (the device's exp is not).
    tail = torch.where(d > -110.0, torch.log1p(torch.exp(d)), 0.0)
    return two_sum(big_h, big_l + tail)


def logcumsumexp(self, dim):
    """log(cumsum(exp(self), dim)) as a log-depth scan of logaddexp on float32 pairs hi + lo, rounded
    once at the end: CPU's precision at any magnitude (exp(x - max) then cumsum underflows; a float32
    logaddexp scan rounds each step to the ulp of its large result, which the backward's cancellation
    magnifies). fp16 and bf16 compute in float32 as CPU accumulates them; float64 and complex decline.
    NaN, +inf and all -inf prefixes are set apart and give CPU's NaN, inf and -inf."""
    if self.dtype not in _FLOATS:
        if self.dtype.is_floating_point or self.dtype.is_complex:
            return NotImplemented
        _refuse("logcumsumexp_out_cpu", self.dtype)
    dim = _wrap_dim(self, dim)
    if self.dim() == 0 or self.numel() == 0:
        return self.clone()
    x = self.movedim(dim, -1).float()
    nan, pos_inf, neg_inf = torch.isnan(x), torch.isposinf(x), torch.isneginf(x)
    # -inf adds nothing: the lowest finite number adds nothing either (exp underflows) and keeps the
    # pairs finite; NaN and +inf positions are overridden below, whatever the scan makes of them.
    finite = torch.where(neg_inf, torch.finfo(torch.float32).min, torch.where(nan | pos_inf, 0.0, x))
    h, lo = _scan((finite, torch.zeros_like(finite)), _log_add_exp_pairs)
    y = h + lo
    y = torch.where(torch.cumsum(~neg_inf, -1) == 0, float("-inf"), y)
    y = torch.where(torch.cumsum(pos_inf, -1) > 0, float("inf"), y)
    y = torch.where(torch.cumsum(nan, -1) > 0, float("nan"), y)
    return y.to(self.dtype).movedim(-1, dim).contiguous()


def _cum_extreme(later_wins):
    """_cummax_helper / _cummin_helper(self, values, indices, dim): fills values and indices (self
    non-empty, dim wrapped, as cummax_out calls it)."""

    def helper(self, values, indices, dim):
        if self.dtype in (*_FLOATS, *_NATIVE_INTEGERS, torch.bool):
            keys = self
        elif self.dtype in (torch.int16, torch.uint8):  # stored, not computed in: compared as int32
            keys = self.to(torch.int32)
        else:
            return NotImplemented
        dim = _wrap_dim(self, dim)
        keys = keys.movedim(dim, -1)
        n = keys.shape[-1]
        index = torch.arange(n, device=self.device).expand(keys.shape)
        floating = self.dtype.is_floating_point

        def combine(earlier, later):
            win = later_wins(later[0], earlier[0])
            if floating:  # a NaN takes over (the latest one); nothing takes over from a NaN
                win = win | torch.isnan(later[0])
            return torch.where(win, later[0], earlier[0]), torch.where(win, later[1], earlier[1])

        v, i = _scan((keys, index), combine)
        values.copy_(v.to(self.dtype).movedim(-1, dim))
        indices.copy_(i.movedim(-1, dim))

    return helper


# ------------------------------------------------------------------------------------------ gcd, lcm
def _operands(self, other, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Both operands of a binary op on the device in `dtype`, as TensorIterator casts them (a shift
    of 258 is 2 in int8): a Python number or a CPU scalar tensor (a wrapped number) moved over."""
    device = next(t.device for t in (self, other) if isinstance(t, torch.Tensor) and t.device.type != "cpu")

    def operand(t):
        if not isinstance(t, torch.Tensor):
            t = torch.tensor(t, dtype=torch.int64 if isinstance(t, int) else torch.float64)
        return t.to(device).to(dtype)

    return operand(self), operand(other)


def _integer_operands(kernel: str, self, other):
    """(self, other) broadcast, in the promoted type's computing dtype (int32 for int8, int16 and
    uint8, where C promotes to int), and the promoted type."""
    dtype = torch.result_type(self, other)
    if dtype not in _INTEGERS:
        _refuse(kernel, dtype)
    work = dtype if dtype in (torch.int32, torch.int64) else torch.int32
    a, b = torch.broadcast_tensors(*_operands(self, other, dtype))
    return a.to(work), b.to(work), dtype


def _euclid(a, b, dtype):
    """CPU's gcd loop on whole tensors: a, b = |a|, |b|; while a != 0: a, b = b % a, a; gives b.
    abs wraps at the type's minimum as C's assignment back to the narrow type does."""
    a, b = a.abs(), b.abs()
    if a.dtype != dtype:  # computed in int32: abs(-128) is -128 again once stored as int8
        a, b = a.to(dtype).to(a.dtype), b.to(dtype).to(b.dtype)
    while True:
        live = a != 0
        if not bool(live.any()):  # one host read per step
            return b
        divisor = torch.where(live, a, 1)
        a, b = torch.where(live, torch.fmod(b, divisor), 0), torch.where(live, a, b)


def gcd(self, other):
    """Greatest common divisor, elementwise, as CPU's (gcd(0, 0) = 0, the sign of wrapped minima)."""
    a, b, dtype = _integer_operands("gcd_cpu", self, other)
    return _euclid(a, b, dtype).to(dtype)


def lcm(self, other):
    """Least common multiple, elementwise, as CPU's |a / gcd * b|, wrapping in the type's width."""
    a, b, dtype = _integer_operands("lcm_cpu", self, other)
    g = _euclid(a, b, dtype)
    zero = g == 0
    # a / -1 is -a (wrapping), which the device's division does not give for the minimum.
    q = torch.where(g == -1, -a, torch.div(a, torch.where(zero | (g == -1), 1, g), rounding_mode="trunc"))
    return torch.where(zero, 0, (q * b).abs()).to(dtype)


# ------------------------------------------------------------------------------------------- shifts
_POWERS: dict = {}


def _powers(dtype: torch.dtype, device) -> torch.Tensor:
    """[2^0, ..., 2^(w-1)] in dtype (w its width; the last one wraps to the minimum), on the device once."""
    key = (dtype, str(device))
    if key not in _POWERS:
        w = _bits(dtype)
        signed = [(1 << k) - (1 << 64 if k == 63 else 0) for k in range(w)]  # 2^63 is int64's minimum
        _POWERS[key] = torch.tensor(signed, dtype=torch.int64).to(dtype).to(device)
    return _POWERS[key]


def _shift_operands(kernel: str, self, other):
    """(a, b, result dtype, computing dtype): the operands in the promoted type's computing dtype
    (int32 for int16 and uint8, which the device stores but does not compute in)."""
    dtype = torch.result_type(self, other)
    if dtype not in _INTEGERS:
        _refuse(kernel, dtype)
    work = dtype if dtype in _NATIVE_INTEGERS else torch.int32
    a, b = _operands(self, other, dtype)
    return a.to(work), b.to(work), dtype, work


def lshift(self, other):
    """self << other: self * 2^other in the type's width; 0 for shifts < 0 or >= the width."""
    a, b, dtype, work = _shift_operands("lshift_cpu", self, other)
    w = _bits(dtype)
    power = _powers(work, a.device)[b.clamp(0, w - 1).long()]
    return torch.where((b >= 0) & (b < w), a * power, 0).to(dtype)


def rshift(self, other):
    """self >> other: floor(self / 2^other); shifts < 0 or >= the width less the sign bit give the sign
    (0 or -1), as CPU's."""
    a, b, dtype, work = _shift_operands("rshift_cpu", self, other)
    top = _bits(dtype) - (0 if dtype == torch.uint8 else 1)
    power = _powers(work, a.device)[b.clamp(0, top - 1).long()]
    return torch.where((b >= 0) & (b < top), torch.floor_divide(a, power), torch.where(a < 0, -1, 0)).to(dtype)


# ------------------------------------------------------------------------------------- float bits
# Per float type: the integer dtype its bits are computed in, the magnitude mask, the sign bit's
# value on that integer, the bits of +inf (a magnitude above them is a NaN) and of the quiet NaN.
_LAYOUT = {
    torch.float32: (torch.int32, 0x7FFFFFFF, -(1 << 31), 0x7F800000, 0x7FC00000),
    torch.float64: (torch.int64, (1 << 63) - 1, -(1 << 63), 0x7FF0000000000000, 0x7FF8000000000000),
    torch.bfloat16: (torch.int32, 0x7FFF, 0x8000, 0x7F80, 0x7FC0),
    torch.float16: (torch.int32, 0x7FFF, 0x8000, 0x7C00, 0x7E00),
}


def _to_bits(x: torch.Tensor) -> torch.Tensor:
    """x's bit pattern as a non-negative int32 for 16-bit floats, its signed integer otherwise."""
    if x.dtype in (torch.bfloat16, torch.float16):
        return x.view(torch.int16).to(torch.int32) & 0xFFFF
    return x.view(_LAYOUT[x.dtype][0])


def _from_bits(bits: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if dtype in (torch.bfloat16, torch.float16):
        return bits.to(torch.int16).view(dtype)  # wraps 0x8000.. to the negative int16 of those bits
    return bits.view(dtype)


def nextafter(self, other):
    """The next float after self towards other, on the bit patterns: +-1 on the magnitude, the
    smallest denormal (with other's sign) from a zero, other where equal, NaN where either is."""
    dtype = torch.result_type(self, other)
    if dtype not in _LAYOUT:
        _refuse("nextafter_cpu", dtype)
    x, y = torch.broadcast_tensors(*_operands(self, other, dtype))
    if dtype == torch.float16:
        from .sim import device_info

        if device_info(x.device)["fp16_format"] != "ieee":  # DLFloat16 bits are no IEEE half
            return NotImplemented
    _, mask, sign, inf, quiet_nan = _LAYOUT[dtype]
    bx, by = _to_bits(x), _to_bits(y)
    mx, my = bx & mask, by & mask
    nx, ny = bx != mx, by != my  # the sign bits
    # Integer keys in the floats' order (-0 and +0 both 0): comparisons need no float arithmetic.
    kx, ky = torch.where(nx, -mx, mx), torch.where(ny, -my, my)
    away = (kx < ky) == (kx > 0)  # moving away from zero grows the magnitude
    m = torch.where(mx == 0, 1, torch.where(away, mx + 1, mx - 1))
    negative = torch.where(mx == 0, ny, nx)
    bits = torch.where(negative, m + sign, m)
    bits = torch.where(kx == ky, by, bits)
    bits = torch.where((mx > inf) | (my > inf), quiet_nan, bits)
    return _from_bits(bits, dtype)


def _frexp_f32(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(mantissa, exponent) of float32 x from its bits: the exponent field rebased to mantissas in
    [0.5, 1); a denormal is scaled by 2^64 first (exactly) to read its exponent. 0, inf and NaN
    keep themselves with exponent 0, as C's frexp."""
    magnitude = x.view(torch.int32) & 0x7FFFFFFF
    denormal = (magnitude < 0x00800000) & (magnitude != 0)
    bits = torch.where(denormal, x * 2.0**64, x).view(torch.int32)
    biased = torch.floor_divide(bits & 0x7FFFFFFF, 1 << 23)
    regular = (magnitude != 0) & (magnitude < 0x7F800000)
    exponent = torch.where(regular, biased - torch.where(denormal, 126 + 64, 126), 0).to(torch.int32)
    # The sign and fraction kept, the exponent field 126: a number in [0.5, 1).
    mantissa = ((bits & -0x7F800001) | 0x3F000000).view(torch.float32)
    return torch.where(regular, mantissa, x), exponent


def frexp_out(self, *, mantissa, exponent):
    """frexp.Tensor_out: self = mantissa * 2^exponent with |mantissa| in [0.5, 1) and an int32
    exponent; fp16 and bf16 through float32 (exact both ways); float64 declines."""
    if not self.dtype.is_floating_point:
        raise RuntimeError("torch.frexp() only supports floating-point dtypes")
    if mantissa.dtype != self.dtype:
        raise RuntimeError(
            f"torch.frexp() expects mantissa to have dtype {cpp_name(self.dtype)} but got {cpp_name(mantissa.dtype)}"
        )
    if exponent.dtype != torch.int32:
        raise RuntimeError(f"torch.frexp() expects exponent to have int dtype but got {cpp_name(exponent.dtype)}")
    if self.dtype not in _FLOATS:
        return NotImplemented
    m, e = _frexp_f32(self.float())
    return write_out(mantissa, m.to(self.dtype)), write_out(exponent, e)


# -------------------------------------------------------------------------------------- hash_tensor
def hash_tensor(self, dim=(), *, keepdim=False, mode=0):
    """torch.hash_tensor: the xor of the elements' 64-bit patterns (floats converted to float64,
    integers and bools to int64) over `dim` (all dims when empty), as uint64. The xor runs as a
    halving tree over the reduced elements, on int64 (uint64 is only stored on the card)."""
    dims = [dim] if isinstance(dim, int) else list(dim)
    if self.dtype.is_complex or self.dtype in (torch.uint16, torch.uint32, torch.uint64):
        return NotImplemented  # CPU raises its own error for those
    if self.numel() == 0 and not dims:
        raise RuntimeError(
            "hash_tensor: Expected reduction dim to be specified for input.numel() == 0. "
            "Specify the reduction dim with the 'dim' argument."
        )
    shape = torch.ops.aten.hash_tensor(meta(self), dims, keepdim=keepdim).shape  # CPU's dim checks
    dims = sorted({_wrap_dim(self, d) for d in dims} if dims else range(self.dim()))
    for d in dims:
        if self.dim() and self.shape[d] == 0:
            raise IndexError(f"hash_tensor: Expected reduction dim {d} to have non-zero size.")
    if mode != 0:
        raise RuntimeError(f"Unknown hash_tensor mode: {mode}")
    if self.dtype.is_floating_point:
        words = (self if self.dtype == torch.float64 else self.to(torch.float64)).view(torch.int64)
    else:
        words = self.to(torch.int64)
    if self.dim() == 0:
        return words.view(torch.uint64).reshape(shape).clone()
    kept = [d for d in range(self.dim()) if d not in dims]
    n = 1
    for d in dims:
        n *= self.shape[d]
    rows = words.permute(*kept, *dims).reshape(*[self.shape[d] for d in kept], n)
    width = 1 << max(n - 1, 0).bit_length()
    if width > n:  # 0 is xor's identity: pad to a power of two, then halve
        rows = torch.cat([rows, rows.new_zeros(*rows.shape[:-1], width - n)], -1)
    while rows.shape[-1] > 1:
        half = rows.shape[-1] // 2
        rows = torch.bitwise_xor(rows[..., :half], rows[..., half:])
    return rows.reshape(shape).view(torch.uint64)


def hash_tensor_out(self, dim=(), *, keepdim=False, mode=0, out):
    """hash_tensor.out: out must be uint64 (CPU's check), resized as CPU resizes it."""
    if out.dtype != torch.uint64:
        raise RuntimeError(f"Expected result to be of dtype uint64, but got {scalar_name(out.dtype)}")
    result = hash_tensor(self, dim, keepdim=keepdim, mode=mode)
    if result is NotImplemented:
        return NotImplemented
    return write_out(out, result)


KERNELS = {
    "_logcumsumexp": logcumsumexp,
    "_logcumsumexp.out": with_out(logcumsumexp, rule=_cast_rule),
    "_cummax_helper": _cum_extreme(torch.ge),
    "_cummin_helper": _cum_extreme(torch.le),
    "gcd.out": with_out(gcd, rule=_cast_rule),
    "lcm.out": with_out(lcm, rule=_cast_rule),
    "bitwise_left_shift.Tensor_out": with_out(lshift, rule=_cast_rule),
    "bitwise_right_shift.Tensor_out": with_out(rshift, rule=_cast_rule),
    "__lshift__.Tensor": lshift,
    "__lshift__.Scalar": lshift,
    "__rshift__.Tensor": rshift,
    "__rshift__.Scalar": rshift,
    "__ilshift__.Tensor": _inplace(lshift),
    "__ilshift__.Scalar": _inplace(lshift),
    "__irshift__.Tensor": _inplace(rshift),
    "__irshift__.Scalar": _inplace(rshift),
    "nextafter.out": with_out(nextafter, rule=_cast_rule),
    "frexp.Tensor_out": frexp_out,
    "hash_tensor.out": hash_tensor_out,
}
