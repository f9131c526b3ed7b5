"""What the kernels composed of device ops share (_decomposed, _linalg, _spectral, _fft, _counting,
_scans, _nn_ops, _special): meta tensors for torch's own argument checks, the dtype guard, CPU's two
spellings of a dtype in its error messages, and one out= wrapper with CPU's out= rules.

    meta(t)                          a meta tensor laid out as t (anything else passed through)
    computable(*tensors, dtypes=)    whether every tensor given has a dtype the kernel computes in
    scalar_name(dtype), cpp_name()   "Float" / "float": how CPU's messages spell a dtype
    with_out(fn, names, rule)        fn's out= overload: CPU's dtype rule, resize, copy
    write_out(out, result)           the resize and copy alone, for hand-written out= kernels
    safe_cast, structured, castable  out= rules whose wording several modules share

A rule is `rule(result, out) -> str | None`: the message of CPU's RuntimeError when `out` cannot
take `result`, None when it can. Rules worded for one op live in that op's module.
"""

from __future__ import annotations

import warnings

import torch
from torch._prims_common import can_safe_cast_to, is_non_overlapping_and_dense_or_false

# c10::ScalarType's names (toString), which most of CPU's messages print: "expected scalar type Float".
SCALAR_NAMES = {
    torch.uint8: "Byte", torch.int8: "Char", torch.int16: "Short", torch.int32: "Int", torch.int64: "Long",
    torch.float16: "Half", torch.float32: "Float", torch.float64: "Double", torch.complex32: "ComplexHalf",
    torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble", torch.bool: "Bool", torch.qint8: "QInt8",
    torch.quint8: "QUInt8", torch.qint32: "QInt32", torch.bfloat16: "BFloat16", torch.quint4x2: "QUInt4x2",
    torch.quint2x4: "QUInt2x4", torch.bits1x8: "Bits1x8", torch.bits2x4: "Bits2x4", torch.bits4x2: "Bits4x2",
    torch.bits8: "Bits8", torch.bits16: "Bits16", torch.float8_e5m2: "Float8_e5m2",
    torch.float8_e4m3fn: "Float8_e4m3fn", torch.float8_e5m2fnuz: "Float8_e5m2fnuz",
    torch.float8_e4m3fnuz: "Float8_e4m3fnuz", torch.uint16: "UInt16", torch.uint32: "UInt32",
    torch.uint64: "UInt64", torch.uint1: "UInt1", torch.uint2: "UInt2", torch.uint3: "UInt3", torch.uint4: "UInt4",
    torch.uint5: "UInt5", torch.uint6: "UInt6", torch.uint7: "UInt7", torch.int1: "Int1", torch.int2: "Int2",
    torch.int3: "Int3", torch.int4: "Int4", torch.int5: "Int5", torch.int6: "Int6", torch.int7: "Int7",
    torch.float8_e8m0fnu: "Float8_e8m0fnu", torch.float4_e2m1fn_x2: "Float4_e2m1fn_x2",
}  # fmt: skip
# caffe2::TypeMeta's names (the C++ type as GCC spells it), which structured kernels' out= checks and
# a few others print: "Expected out tensor to have dtype float, but got long int instead".
CPP_NAMES = {
    torch.uint8: "unsigned char", torch.int8: "signed char", torch.int16: "short int", torch.int32: "int",
    torch.int64: "long int", torch.float16: "c10::Half", torch.float32: "float", torch.float64: "double",
    torch.complex32: "c10::complex<c10::Half>", torch.complex64: "c10::complex<float>",
    torch.complex128: "c10::complex<double>", torch.bool: "bool", torch.qint8: "c10::qint8",
    torch.quint8: "c10::quint8", torch.qint32: "c10::qint32", torch.bfloat16: "c10::BFloat16",
    torch.quint4x2: "c10::quint4x2", torch.quint2x4: "c10::quint2x4", torch.bits1x8: "c10::bits1x8",
    torch.bits2x4: "c10::bits2x4", torch.bits4x2: "c10::bits4x2", torch.bits8: "c10::bits8",
    torch.bits16: "c10::bits16", torch.float8_e5m2: "c10::Float8_e5m2", torch.float8_e4m3fn: "c10::Float8_e4m3fn",
    torch.float8_e5m2fnuz: "c10::Float8_e5m2fnuz", torch.float8_e4m3fnuz: "c10::Float8_e4m3fnuz",
    torch.uint16: "short unsigned int", torch.uint32: "unsigned int", torch.uint64: "long unsigned int",
    **{getattr(torch, f"uint{b}"): f"c10::dummy_uint1_7_t<{b}>" for b in range(1, 8)},
    **{getattr(torch, f"int{b}"): f"c10::dummy_int1_7_t<{b}>" for b in range(1, 8)},
    torch.float8_e8m0fnu: "c10::Float8_e8m0fnu", torch.float4_e2m1fn_x2: "c10::Float4_e2m1fn_x2",
}  # fmt: skip


def scalar_name(dtype: torch.dtype) -> str:
    """CPU's ScalarType name of `dtype` ("Float", "Long", ...), as most of its messages print it."""
    return SCALAR_NAMES.get(dtype, str(dtype))


def cpp_name(dtype: torch.dtype) -> str:
    """CPU's C++ type name of `dtype` ("float", "long int", ...), as structured kernels print it."""
    return CPP_NAMES.get(dtype, str(dtype))


def meta(t):
    """A meta tensor of t's shape, strides and dtype (no data), for calling an op's meta function:
    it raises CPU's argument errors and gives the result's shape, dtype and strides. Anything but a
    tensor (None, a number) is returned as it is, so optional arguments pass through."""
    if not isinstance(t, torch.Tensor):
        return t
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def computable(*tensors, dtypes: tuple = (torch.float32,)) -> bool:
    """Whether every tensor given (None skipped) has one of `dtypes`, the dtypes the kernel computes
    in on the card (float32 alone by default: the card has no float64 or complex arithmetic). A
    kernel returns NotImplemented when this is False, and the call takes the CPU fallback."""
    return all(t is None or t.dtype in dtypes for t in tensors)


# ---- out= rules -----------------------------------------------------------------------------------


def safe_cast(result: torch.Tensor, out: torch.Tensor) -> str | None:
    """torch's usual out= rule (torch._prims_common.wrappers.out_wrapper's): out on result's device,
    and of a dtype result casts to safely (no float into an integer, no complex into a float)."""
    if not (result.dim() == 0 and result.device.type == "cpu") and result.device != out.device:
        return (
            f"Attempting to copy from device {result.device} to device {out.device}, but cross-device copies "
            "are not allowed!"
        )
    if not can_safe_cast_to(cast_from=result.dtype, cast_to=out.dtype):
        return (
            f"Attempting to cast from {result.dtype} to out tensor with dtype {out.dtype}, but this can't be "
            "cast because it is not safe!"
        )
    return None


def structured(result: torch.Tensor, out: torch.Tensor) -> str | None:
    """A structured kernel's out= rule: out has exactly result's dtype."""
    if out.dtype != result.dtype:
        return f"Expected out tensor to have dtype {cpp_name(result.dtype)}, but got {cpp_name(out.dtype)} instead"
    return None


def same_scalar_type(result: torch.Tensor, out: torch.Tensor) -> str | None:
    """The out= rule of kernels that check with TORCH_CHECK's scalar type test (a triangular solve,
    the margin losses): out has exactly result's dtype, in that wording."""
    if out.dtype != result.dtype:
        return f"expected scalar type {scalar_name(result.dtype)} but found {scalar_name(out.dtype)}"
    return None


def castable(api: str, name: str = "result"):
    """The rule of linalg's legacy kernels (checkLinalgCompatibleDtype): result casts to out's dtype
    (torch.can_cast); `api` and the out's `name` are how the message names them."""

    def rule(result: torch.Tensor, out: torch.Tensor) -> str | None:
        if not torch.can_cast(result.dtype, out.dtype):
            return (
                f"{api}: Expected {name} to be safely castable from {scalar_name(result.dtype)} dtype, but got "
                f"{name} with dtype {scalar_name(out.dtype)}"
            )
        return None

    return rule


# ---- out= overloads -------------------------------------------------------------------------------


def write_out(out: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    """Copies `result` into `out` and returns out. An out of another shape is resized first, with
    CPU's deprecation warning when it had elements, and given result's strides when result is dense
    (as a structured kernel lays out its out). The caller has checked out's dtype."""
    if out.shape != result.shape:
        if out.numel():
            warnings.warn(
                f"An output with one or more elements was resized since it had shape {list(out.shape)}, which "
                f"does not match the required output shape {list(result.shape)}. This behavior is deprecated, "
                "and in a future PyTorch release outputs will not be resized unless they have zero elements. You "
                "can explicitly reuse an out tensor t by resizing it, inplace, to zero elements with t.resize_(0).",
                stacklevel=3,
            )
        out.resize_(result.shape)
        if is_non_overlapping_and_dense_or_false(result):
            out.as_strided_(result.shape, result.stride())
    return out.copy_(result)


def two_sum(a, b):
    """(a + b rounded, its rounding error) with s + e = a + b exactly: Knuth's error-free sum, valid
    in any order of magnitude (the double-float arithmetic of _linalg_matrix_exp and _scans's
    logcumsumexp)."""
    s = a + b
    b_part = s - a
    return s, (a - (s - b_part)) + (b - b_part)


def with_out(fn, names: tuple = ("out",), rule=None):
    """The out= overload of the functional kernel `fn`, whose out tensors the ATen schema calls
    `names` (keyword arguments). It runs fn on the other arguments (NotImplemented, fn declining the
    call, is passed on), checks each result against its out tensor with `rule` (one rule for all, or
    a sequence of one per out; safe_cast when None) and raises RuntimeError with the rule's message,
    then writes every result into its out (write_out) and returns the out tensor, or the tuple of
    them when there are several."""
    rules = tuple(rule) if rule is not None and not callable(rule) else (rule or safe_cast,) * len(names)
    if len(rules) != len(names):
        raise ValueError(f"with_out: {len(rules)} rules for {len(names)} out tensors {names}")

    def run(*args, **kwargs):
        outs = [kwargs.pop(name) for name in names]
        results = fn(*args, **kwargs)
        if results is NotImplemented:
            return NotImplemented
        results = (results,) if len(names) == 1 else tuple(results)
        for check, result, out in zip(rules, results, outs, strict=True):
            wrong = check(result, out)
            if wrong:
                raise RuntimeError(wrong)
        for result, out in zip(results, outs, strict=True):
            write_out(out, result)
        return outs[0] if len(names) == 1 else tuple(outs)

    return run
