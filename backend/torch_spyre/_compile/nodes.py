"""What the planner reads off an FX node: its fake value, its arguments by schema name, the op
library's name for its op and what the library says of that op (the catalogue, the limits), and
the operand types and broadcasts a call carries.
"""

from __future__ import annotations

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import _disable_current_modes

from .. import _C

aten = torch.ops.aten
prims = torch.ops.prims

_DTYPES = {
    torch.float32: ("f32", 4),
    torch.float16: ("f16", 2),
    torch.bfloat16: ("bf16", 2),
    torch.int32: ("i32", 4),
    torch.int8: ("i8", 1),
    torch.bool: ("bool", 1),
    torch.int64: ("i64", 8),
}


# Ops that only reinterpret their input's memory: in a segment they are strided IR views.
_VIEWS = {
    aten.view.default,
    aten._unsafe_view.default,
    aten.permute.default,
    aten.expand.default,
    aten.t.default,
    aten.transpose.int,
    aten.unsqueeze.default,
    aten.squeeze.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.slice.Tensor,
    aten.select.int,
    aten.alias.default,
    aten.as_strided.default,
    aten.diagonal.default,
    torch.ops.prims.broadcast_in_dim.default,
}
_TUPLE_VIEWS = {aten.split_with_sizes.default, aten.split.Tensor, aten.unbind.int}
_EMPTY = {aten.empty_permuted.default, aten.empty.memory_format, aten.empty_strided.default}

_CATALOGUE: dict | None = None
_LIMITS: dict | None = None


def catalogue() -> dict:
    """The op library's ops: name -> (family, results written), from _C."""
    global _CATALOGUE
    if _CATALOGUE is None:
        _CATALOGUE = {name: tuple(entry) for name, entry in _C._op_catalogue().items()}
    return _CATALOGUE


def limits() -> dict:
    """What a segment must keep to: launch arguments, tensors one pointwise op reads (from _C)."""
    global _LIMITS
    if _LIMITS is None:
        _LIMITS = dict(_C._limits())
    return _LIMITS


def _val(n):
    return n.meta.get("val") if isinstance(n, fx.Node) else None


def _is_tensor_node(n) -> bool:
    return isinstance(n, fx.Node) and isinstance(_val(n), torch.Tensor)


def _num(x):
    """A number as the segment's JSON carries it: infinities and NaN as {"float": ...}."""
    if isinstance(x, bool) or isinstance(x, int):
        return x
    x = float(x)
    if x != x:
        return {"float": "nan"}
    if x in (float("inf"), float("-inf")):
        return {"float": "inf" if x > 0 else "-inf"}
    return x


def _scalar_arg(x) -> bool:
    return isinstance(x, (int, float, bool)) and not isinstance(x, torch.SymInt)


def library_name(target) -> str | None:
    """The op library's name of an FX target ("add" for aten.add.Tensor, "prims::var",
    "spyre::rotate_half"), or None for anything that is not an ATen, prims or planner operator, or
    that writes its arguments."""
    if not isinstance(target, torch._ops.OpOverload) or target._schema.is_mutable:
        return None
    ns, base = target.namespace, target._schema.name.split("::")[-1]
    if ns == "aten":
        return base
    return f"{ns}::{base}" if ns in ("prims", "spyre") else None


def cpu_refuses(op, args, kwargs, elements: bool = False) -> bool:
    """Whether CPU refuses a call of ATen operator `op` with these argument types (round or abs of
    bool, sub of bools, lerp of integers), as the eager kernels ask before they run:
    _C._check_types_as_cpu calls the op on the CPU on empty stand-ins of the tensors' types and
    ranks. With `elements`, the stand-ins hold two elements a dim (ones; a variance of one warns)
    and the op runs here: for ops whose CPU kernels return an empty input before they look at its
    type (softmax), or refuse to reduce it (amax). Tensors (fake ones too) are read for their type
    and rank only; a call with a symbolic number is not checked (taken as accepted)."""
    if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten":
        return False
    flat = pytree.tree_leaves((args, kwargs))
    if any(isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)) for x in flat):
        return False

    def stand_in(v):
        if not isinstance(v, torch.Tensor):
            return v
        if elements:
            return torch.ones((2,) * v.dim(), dtype=v.dtype)
        return torch.empty((0,) * v.dim(), dtype=v.dtype, device="meta")

    schema = op._schema
    name = schema.name + (f".{schema.overload_name}" if schema.overload_name else "")
    # A graph may pass a number for a Tensor argument (mul.Tensor(x, 8)); a call wraps it.
    tensor_args = {a.name for a in schema.arguments if str(a.type) == "Tensor"}
    positional = [a.name for a in schema.arguments if not a.kwarg_only]

    def wrapped(name, v):
        return torch.tensor(v) if name in tensor_args and isinstance(v, (bool, int, float)) else v

    # Real tensors, outside every mode of the tracing: its fake tensors, and its proxy tracer,
    # which would record the stand-ins in the graph (softplus of bf16, a scan of op_db).
    with _disable_current_modes():
        args = [wrapped(positional[i] if i < len(positional) else "", v) for i, v in enumerate(args)]
        kwargs = {k: wrapped(k, v) for k, v in kwargs.items()}
        args, kwargs = pytree.tree_map(stand_in, (args, kwargs))
        try:
            if elements:
                with torch.no_grad():
                    op(*args, **kwargs)
            else:
                _C._check_types_as_cpu(name, *args, **kwargs)
        except (RuntimeError, TypeError):  # NotImplementedError is a RuntimeError
            return True
    return False


def node_cpu_refuses(n: fx.Node, elements: bool = False) -> bool:
    """cpu_refuses of FX node n's call, over its arguments' fake values."""
    value = lambda x: _val(x) if isinstance(x, fx.Node) else x  # noqa: E731
    return cpu_refuses(n.target, fx.node.map_arg(n.args, value), fx.node.map_arg(n.kwargs, value), elements)


def _arguments(n: fx.Node) -> dict:
    """n's arguments by schema name, defaults filled in."""
    schema = n.target._schema
    out = {}
    for i, a in enumerate(schema.arguments):
        if i < len(n.args) and not a.kwarg_only:
            out[a.name] = n.args[i]
        elif a.name in n.kwargs:
            out[a.name] = n.kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
        else:
            out[a.name] = None
    return out


def _constant_of(n: fx.Node):
    """The value of a node that fills its output with one number (full, scalar_tensor), or None."""
    if n.target == aten.full.default and _scalar_arg(n.args[1]):
        return n.args[1]
    if n.target == aten.scalar_tensor.default and _scalar_arg(n.args[0]):
        return n.args[0]
    if n.target == aten.full_like.default and _scalar_arg(n.args[1]):
        return n.args[1]
    return None


def _common(args: dict):
    """torch.result_type of the tensor and number arguments (the type a comparison computes in)."""
    operands = [v for v in args.values() if _is_tensor_node(v) or _scalar_arg(v)]
    operands = [_val(v) if isinstance(v, fx.Node) else v for v in operands]
    if not operands:
        return None
    if len(operands) == 1:
        return operands[0].dtype if isinstance(operands[0], torch.Tensor) else None
    common = torch.result_type(operands[0], operands[1])
    for x in operands[2:]:
        common = torch.promote_types(common, torch.result_type(operands[0], x))
    return common


def _broadcast(x, n):
    """Sizes and strides of input x broadcast to n's shape (aligned at the right)."""
    xv, out = _val(x), _val(n)
    if tuple(xv.shape) == tuple(out.shape):
        return None, None
    pad = out.dim() - xv.dim()
    sizes, strides = list(out.shape), []
    for i in range(out.dim()):
        j = i - pad
        if j < 0 or xv.shape[j] == 1 and out.shape[i] != 1:
            strides.append(0)
        else:
            strides.append(xv.stride()[j])
    return sizes, strides
