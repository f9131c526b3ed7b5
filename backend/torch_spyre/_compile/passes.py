"""Graph rewrites before planning: what the planner would otherwise run as written and pay for.

fold_repeated_kv: grouped-query attention written as HuggingFace's `repeat_kv` (each key and value
head unsqueezed, expanded g times and reshaped to the query's head count, which materializes g
copies of the keys and values) feeding the attention op. The device's attention kernel takes key
heads that the query heads share (query head h reads key head h // g), so the attention reads the
unrepeated keys and values and the copies are never made: a Llama-3-8B decode step at batch 8
copied 0.5 GB per layer to build them.

fuse_rotate_half: HuggingFace's rotary embedding rotates each head's last dim as
`cat((-x[..., h:], x[..., :h]), -1)`. A cat is not elementwise, so the planner wrote the negated
half, the concatenation and each product of `q * cos + rotate_half(q) * sin` to memory (five passes
over the queries). The pattern becomes one elementwise op, `spyre::rotate_half` (a step of the op
library's expressions), and the whole embedding is one pass.

update_inputs_in_place: a compiled function that updates rows of an input in place
(`cache.index_copy_(2, positions, keys)`, HuggingFace's StaticCache) becomes, functionalized,
`new = index_copy(cache, ...)` and a trailing `cache.copy_(new)`: a copy of the whole cache before
the rows are written and another after, where the update touches a few rows. When nothing else
reads the input, the update writes the input itself and both copies go: a
Llama-3-8B decode step at batch 8 copied 134 MB per layer (its keys and values, twice) for 1 MB
of new rows.

define_scattered_empties: `x = t.new_empty(...); x[..., :a].copy_(p); x[..., a:].copy_(q)` (how
HuggingFace's DeepSeek-V3 concatenates its keys) becomes, functionalized, scatters into the empty
tensor, each of which reads the part of its base it keeps: the first reads bytes nothing has written
(the device sanitizer's initcheck finds it). An empty tensor's values are undefined, so zeros are as
right: the scatters then read defined memory.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from .nodes import _arguments

aten = torch.ops.aten

_ATTENTION = (aten._scaled_dot_product_fused_attention_overrideable.default,)
# What repeat_kv becomes in an ATen graph: x[:, :, None] (unsqueeze, or a full slice first), the
# expand, and the reshape (a copy and a view of it).
_CHAIN = {
    aten.unsqueeze.default,
    aten.expand.default,
    aten.clone.default,
    aten.view.default,
    aten._unsafe_view.default,
    aten.reshape.default,
    aten.slice.Tensor,
}


def _shape(n) -> tuple | None:
    v = n.meta.get("val") if isinstance(n, fx.Node) else None
    return tuple(v.shape) if isinstance(v, torch.Tensor) else None


def _unrepeated(node: fx.Node) -> fx.Node | None:
    """The [B, Hkv, S, D] node that `node` ([B, Hkv * g, S, D], g > 1) repeats each head of g
    times in a row, through a chain whose nodes nothing else reads; else None."""
    final = _shape(node)
    if final is None or len(final) != 4:
        return None
    chain, x = [], node
    while isinstance(x, fx.Node) and x.op == "call_function" and x.target in _CHAIN:
        chain.append(x)
        x = x.args[0]
    base = _shape(x)
    expands = [c for c in chain if c.target is aten.expand.default]
    if base is None or len(base) != 4 or len(expands) != 1 or any(len(c.users) != 1 for c in chain[1:]):
        return None
    b, kv, s, d = base
    g = final[1] // kv if kv else 0
    src, out = _shape(expands[0].args[0]), _shape(expands[0])
    if g < 2 or final != (b, kv * g, s, d) or src != (b, kv, 1, s, d) or out != (b, kv, g, s, d):
        return None
    if _shape(node) is None or node.meta["val"].dtype != x.meta["val"].dtype:
        return None
    return x


# The planner's own op: what the graph's cat computed, as one elementwise node. It runs as that cat
# wherever the op library does not take it (an eager step).
_LIB = torch.library.Library("spyre", "DEF")
_LIB.define("rotate_half(Tensor self) -> Tensor")


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


_LIB.impl("rotate_half", _rotate_half, "CompositeExplicitAutograd")
_ROTATE_HALF = torch.ops.spyre.rotate_half.default
_ROTATABLE = (torch.float32, torch.float16, torch.bfloat16)
# Rows the rotation's expression holds whole in a scratchpad tile; heads are 64 to 256 wide.
_MAX_ROTATED_ROW = 1024


def _half_of(n, dim: int, start: int, end: int):
    """The tensor that slice node n takes [start, end) of along its dim `dim` (step 1), or None."""
    if not (isinstance(n, fx.Node) and n.op == "call_function" and n.target is aten.slice.Tensor):
        return None
    shape = _shape(n.args[0])
    if shape is None or dim >= len(shape):
        return None
    a = _arguments(n)
    lo = 0 if a["start"] is None else a["start"]
    hi = shape[dim] if a["end"] is None else min(a["end"], shape[dim])
    if not isinstance(a["dim"], int) or a["dim"] % len(shape) != dim or a["step"] != 1 or (lo, hi) != (start, end):
        return None
    return n.args[0]


def fuse_rotate_half(gm: fx.GraphModule) -> int:
    """Replaces each `cat((-x[..., h:], x[..., :h]), -1)` of a float x whose last dim is 2h (at most
    _MAX_ROTATED_ROW) with spyre::rotate_half(x); returns how many."""
    changed = 0
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target is not aten.cat.default or len(n.args[0]) != 2:
            continue
        val = n.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.dtype not in _ROTATABLE or val.dim() == 0:
            continue
        last, d = val.dim() - 1, val.shape[-1]
        dim = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim", 0)
        if not isinstance(d, int) or d % 2 or not 0 < d <= _MAX_ROTATED_ROW or dim % val.dim() != last:
            continue
        first, second = n.args[0]
        if not (isinstance(first, fx.Node) and first.target is aten.neg.default):
            continue
        x = _half_of(first.args[0], last, d // 2, d)
        if x is None or _half_of(second, last, 0, d // 2) is not x or _shape(x) != tuple(val.shape):
            continue
        with gm.graph.inserting_before(n):
            rot = gm.graph.call_function(_ROTATE_HALF, (x,))
        rot.meta["val"] = val
        n.replace_all_uses_with(rot)
        changed += 1
    if changed:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return changed


_EMPTIES = (aten.empty.memory_format, aten.empty_permuted.default, aten.empty_strided.default)
# Ops whose result keeps the part of their first argument they do not write.
_KEEPS_BASE = (
    aten.slice_scatter.default,
    aten.select_scatter.default,
    aten.diagonal_scatter.default,
    aten.as_strided_scatter.default,
    aten.index_put.default,
)


def define_scattered_empties(gm: fx.GraphModule) -> int:
    """Fills with zeros each empty tensor that a scatter keeps part of; returns how many."""
    changed = 0
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target not in _EMPTIES:
            continue
        if not any(u.target in _KEEPS_BASE and u.args and u.args[0] is n for u in n.users):
            continue
        with gm.graph.inserting_after(n):
            zeros = gm.graph.call_function(aten.fill.Scalar, (n, 0))
        n.replace_all_uses_with(zeros, delete_user_cb=lambda u, fill=zeros: u is not fill)
        if "val" in n.meta:
            zeros.meta["val"] = n.meta["val"]
        changed += 1
    if changed:
        gm.recompile()
    return changed


# Functional updates of some rows of their first argument, and their in-place forms.
_IN_PLACE = {
    aten.index_copy.default: aten.index_copy_.default,
    aten.index_put.default: aten.index_put_.default,
}


# Factories: a tensor of its own memory, which an update of some of its rows may write in place
# when nothing else reads it (a StaticCache's first forward creates its cache this way).
_FRESH = (aten.full.default, aten.zeros.default, aten.empty.memory_format, aten.new_zeros.default)


def _in_place(gm: fx.GraphModule, update: fx.Node) -> fx.Node:
    """The in-place form of `update`, in its place: its users read the updated first argument."""
    with gm.graph.inserting_after(update):
        in_place = gm.graph.call_function(_IN_PLACE[update.target], update.args, update.kwargs)
    in_place.meta.update(update.meta)
    update.replace_all_uses_with(in_place)
    gm.graph.erase_node(update)
    return in_place


def update_inputs_in_place(gm: fx.GraphModule) -> int:
    """Makes `x.copy_(update(x, ...))` with x a graph input into `update_(x, ...)` where nothing
    else reads x (its old value could not be read after the update, nor the rows the update
    writes be its own source), and `update(fresh, ...)` into `update_(fresh, ...)` where nothing
    else reads the new tensor `fresh`; returns how many."""
    changed = 0
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target not in _IN_PLACE or not n.args:
            continue
        base = n.args[0]
        if isinstance(base, fx.Node) and base.target in _FRESH and set(base.users) == {n}:
            _in_place(gm, n)
            changed += 1
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target is not aten.copy_.default or len(n.args) != 2:
            continue
        base, update = n.args
        if not (
            isinstance(base, fx.Node)
            and base.op == "placeholder"
            and isinstance(update, fx.Node)
            and update.target in _IN_PLACE
            and update.args[0] is base
        ):
            continue
        if any(u is not update and u is not n for u in base.users):  # the input has other readers
            continue
        # The new value is not read after the copy (the input then holds it anyway, but such a
        # reader, the graph's output for one, is left as it is).
        if any(order[u] > order[n] for u in update.users if u is not n):
            continue
        in_place = _in_place(gm, update)  # the copy_ now reads the updated input: it goes
        n.replace_all_uses_with(in_place)
        gm.graph.erase_node(n)
        changed += 1
    if changed:
        gm.recompile()
    return changed


def fold_repeated_kv(gm: fx.GraphModule) -> int:
    """Points each attention whose keys and values are both repeated heads at the unrepeated ones;
    drops the copies nothing reads any more. Returns how many attention ops it changed."""
    changed = 0
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target not in _ATTENTION or len(n.args) < 3:
            continue
        key, value = n.args[1], n.args[2]
        if not all(isinstance(x, fx.Node) and all(u.target in _ATTENTION for u in x.users) for x in (key, value)):
            continue
        k, v = _unrepeated(key), _unrepeated(value)
        if k is None or v is None or _shape(k)[1] != _shape(v)[1]:
            continue
        n.args = (n.args[0], k, v, *n.args[3:])
        changed += 1
    if changed:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return changed
