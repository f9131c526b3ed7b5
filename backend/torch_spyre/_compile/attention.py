"""Attention (scaled dot-product, forward and backward) as IR ops inside a segment: the same
algorithm as the eager kernel (backend/csrc/attention_ops.cpp), so the two front doors agree,
but with its scores, probabilities and row statistics in the segment's arena, next to the ops
before and after it, instead of a launch of its own.

Forward:  S = scale * Q K^T (causal: keys after the query's position are -inf), m = rowmax(S),
          P = exp(S - m) / rowsum, O = P V, logsumexp = m + log(rowsum).
Backward: P = exp(S - logsumexp), dV = P^T dO, dP = dO V^T, D = rowsum(dO * O), dS = P (dP - D),
          dQ = scale dS K, dK = scale dS^T Q.
Grouped-query attention views the H query heads as [Hkv, g] so each meets its key head.
"""

from __future__ import annotations

import math

import torch

aten = torch.ops.aten
FORWARD = aten._scaled_dot_product_fused_attention_overrideable.default
BACKWARD = aten._scaled_dot_product_fused_attention_overrideable_backward.default
_FLOAT = (torch.float32, torch.float16, torch.bfloat16)


def _arg(n, i, name, default):
    if len(n.args) > i:
        return n.args[i]
    return n.kwargs.get(name, default)


def takes(n) -> bool:
    """True when the planner lowers this attention node (no bias, no dropout, 4-d float operands)."""
    if n.target == FORWARD:
        q, k, v = (a.meta["val"] for a in n.args[:3])
        if _arg(n, 3, "attn_bias", None) is not None or _arg(n, 4, "dropout_p", 0.0) != 0.0:
            return False
        if _arg(n, 6, "return_debug_mask", False):
            return False
    elif n.target == BACKWARD:
        q, k, v = (a.meta["val"] for a in n.args[1:4])
        if n.args[4] is not None or _arg(n, 12, "dropout_p", 0.0) != 0.0:
            return False
    else:
        return False
    return (
        q.dim() == k.dim() == v.dim() == 4
        and q.dtype in _FLOAT
        and k.dtype == v.dtype == q.dtype
        and q.shape[1] % k.shape[1] == 0
        and min(q.numel(), k.numel(), v.numel()) > 0
    )


def _scale(n, q) -> float:
    s = n.kwargs.get("scale")
    return float(s) if s is not None else 1.0 / math.sqrt(q.shape[3])


def temps(n) -> list[tuple[str, int]]:
    """The arena temporaries of an attention node: (name, bytes)."""
    q = (n.args[0] if n.target == FORWARD else n.args[1]).meta["val"]
    k = (n.args[1] if n.target == FORWARD else n.args[2]).meta["val"]
    b, h, length, e = q.shape
    s = k.shape[2]
    w = q.element_size()
    g = h // k.shape[1]
    ev = (n.args[2] if n.target == FORWARD else n.args[3]).meta["val"].shape[3]
    scores = b * h * length * s
    out = [("s", scores * 4), ("rows", length * 4), ("cols", s * 4), ("m", b * h * length * 4)]
    if n.target == FORWARD:
        out.append(("sum", b * h * length * 4))
        if q.dtype != torch.float32:
            out.append(("p", scores * w))
        return out
    out += [("ds", scores * 4), ("prod", b * h * length * ev * w)]
    if q.dtype != torch.float32:
        out += [("pc", scores * w), ("dsc", scores * w)]
    if g > 1:
        out += [("fullv", b * h * s * ev * w), ("fullk", b * h * s * e * w)]
    return out


def _contiguous(sizes):
    strides, acc = [], 1
    for size in reversed(sizes):
        strides.insert(0, acc)
        acc *= size
    return strides


class _Views:
    """IR views for one attention node: of its operands (fx nodes) and of its temporaries."""

    def __init__(self, b, n):
        self.b, self.n = b, n

    def node(self, x, sizes=None, strides=None):
        return self.b.view(x, sizes, strides)

    def temp(self, what, sizes, dtype="f32", strides=None):
        return self.b.temp_view(self.n, what, sizes, strides or _contiguous(sizes), dtype)

    @staticmethod
    def heads_of(sizes, strides, g, repeat, swap=False):
        """[B, H, r, c] as [B, H/g, g, r, c] (or a [B, Hkv, r, c] one repeated g times), maybe with
        its last two dims swapped: products over these pair each query head with its key head."""
        r, c = (3, 2) if swap else (2, 3)
        kv = sizes[1] if repeat else sizes[1] // g
        return (
            [sizes[0], kv, g, sizes[r], sizes[c]],
            [strides[0], strides[1] if repeat else g * strides[1], 0 if repeat else strides[1], strides[r], strides[c]],
        )

    def heads(self, x, g, repeat, swap=False):
        v = x.meta["val"]
        return self.node(x, *self.heads_of(list(v.shape), list(v.stride()), g, repeat, swap))

    def temp_heads(self, what, sizes, g, dtype="f32", swap=False):
        s, st = self.heads_of(sizes, _contiguous(sizes), g, False, swap)
        return self.temp(what, s, dtype, st)


def lower(b, n, dtype_name) -> None:
    """Appends the ops of attention node n to builder b (its parts are n's getitem users)."""
    fwd = n.target == FORWARD
    q, k, v = n.args[:3] if fwd else n.args[1:4]
    qv, kv_, vv = q.meta["val"], k.meta["val"], v.meta["val"]
    bsz, h, length, _ = qv.shape
    s = kv_.shape[2]
    g = h // kv_.shape[1]
    f32 = qv.dtype == torch.float32
    cd = dtype_name(qv.dtype)
    scale = _scale(n, qv)
    is_causal = bool(_arg(n, 5, "is_causal", False) if fwd else _arg(n, 13, "is_causal", False))
    V = _Views(b, n)
    full = [bsz, h, length, s]
    fn = b.functions()
    sv = V.temp("s", full)
    row = [bsz, h, length, 1]

    def matmul(a, bb, out, alpha=1.0):
        b.ops.append({"matmul": {"a": a, "b": bb, "out": out, "compute": cd, "alpha": alpha}})

    pw = b.pointwise_op

    def unary(name, a):
        return {"kind": "unary", "fn": fn["unary"][name], "args": [a]}

    def binary(name, a, c):
        return {"kind": "binary", "fn": fn["binary"][name], "args": [a, c]}

    def reduce(f, src, dst, dims):
        b.ops.append({"reduce": {"fn": f, "compute": "f32", "in": src, "out": dst, "dims": dims}})

    # Scores, masked.
    matmul(V.heads(q, g, False), V.heads(k, g, True, True), V.temp_heads("s", full, g), scale)
    if is_causal:
        rows, cols = V.temp("rows", [length]), V.temp("cols", [s])
        for t in (rows, cols):
            pw([], t, [{"kind": "iota", "start": 0, "step": 1}])
        r_b = V.temp("rows", full, strides=[0, 0, 1, 0])
        c_b = V.temp("cols", full, strides=[0, 0, 0, 1])
        pw(
            [{"view": sv}, {"view": r_b}, {"view": c_b}, {"scalar": "-inf"}],
            sv,
            [binary("gt", 2, 1), {"kind": "select", "args": [-1, 3, 0]}],
        )
    m = V.temp("m", row)
    if fwd:
        total = V.temp("sum", row)
        reduce(1, sv, m, [3])  # max
        # A row with every key masked has max -inf: it takes 0, so its weights and output are 0.
        pw(
            [{"view": m}, {"scalar": "-inf"}, {"scalar": 0.0}],
            m,
            [binary("eq", 0, 1), {"kind": "select", "args": [-1, 2, 0]}],
        )
        pw(
            [{"view": sv}, {"view": V.temp("m", full, strides=[h * length, length, 1, 0])}],
            sv,
            [binary("sub", 0, 1), unary("exp", -1)],
        )
        reduce(0, sv, total, [3])
        total_b = V.temp("sum", full, strides=[h * length, length, 1, 0])
        p = sv if f32 else V.temp("p", full, cd)
        pw(
            [{"view": sv}, {"view": total_b}, {"scalar": 0.0}],
            p,
            [binary("gt", 1, 2), binary("div", 0, 1), {"kind": "select", "args": [-1, -2, 2]}],
            "f32",
        )
        parts = {u.args[1]: u for u in n.users}
        out, lse = parts[0], parts.get(1)
        p_heads = V.temp_heads("s" if f32 else "p", full, g, "f32" if f32 else cd)
        matmul(p_heads, V.heads(v, g, True), V.heads(out, g, False))
        if lse is not None:
            lv = lse.meta["val"]
            lse_view = V.node(lse, row, list(lv.stride()) + [1])
            pw([{"view": m}, {"view": total}], lse_view, [unary("log", 1), binary("add", 0, -1)])
        return
    go, o, lse = n.args[0], n.args[6], n.args[7]
    lv = lse.meta["val"]
    lse_b = V.node(lse, full, list(lv.stride()) + [0])
    pw(
        [{"view": sv}, {"view": lse_b}, {"scalar": "-inf"}, {"scalar": 0.0}],
        sv,
        [binary("eq", 1, 2), binary("sub", 0, 1), unary("exp", -2), {"kind": "select", "args": [-1, 3, -3]}],
    )
    pc = sv if f32 else V.temp("pc", full, cd)
    if not f32:
        pw([{"view": sv}], pc, [{"kind": "copy", "args": [0]}])
    pc_name, pc_type = ("s", "f32") if f32 else ("pc", cd)
    parts = {u.args[1]: u for u in n.users}
    dq, dk, dv = parts.get(0), parts.get(1), parts.get(2)
    ev = vv.shape[3]
    if dv is not None:
        if g == 1:
            matmul(V.temp_heads(pc_name, full, 1, pc_type, swap=True), V.heads(go, 1, False), V.heads(dv, 1, False))
        else:
            fsz = [bsz, h, s, ev]
            matmul(
                V.temp_heads(pc_name, full, g, pc_type, swap=True),
                V.heads(go, g, False),
                V.temp_heads("fullv", fsz, g, cd),
            )
            _sum_groups(V, "fullv", fsz, g, cd, dv, reduce)
    ds = V.temp("ds", full)
    matmul(V.heads(go, g, False), V.heads(v, g, True, True), V.temp_heads("ds", full, g))
    prod = V.temp("prod", [bsz, h, length, ev], cd)
    pw([{"view": V.node(go)}, {"view": V.node(o)}], prod, [binary("mul", 0, 1)])
    reduce(0, prod, m, [3])  # D, in the row statistics' place
    pw(
        [{"view": sv}, {"view": ds}, {"view": V.temp("m", full, strides=[h * length, length, 1, 0])}],
        ds,
        [binary("sub", 1, 2), binary("mul", 0, -1)],
    )
    dsc_name, dsc_type = ("ds", "f32") if f32 else ("dsc", cd)
    if not f32:
        pw([{"view": ds}], V.temp("dsc", full, cd), [{"kind": "copy", "args": [0]}])
    if dq is not None:
        matmul(V.temp_heads(dsc_name, full, g, dsc_type), V.heads(k, g, True), V.heads(dq, g, False), scale)
    if dk is not None:
        if g == 1:
            matmul(
                V.temp_heads(dsc_name, full, 1, dsc_type, swap=True), V.heads(q, 1, False), V.heads(dk, 1, False), scale
            )
        else:
            fsz = [bsz, h, s, qv.shape[3]]
            matmul(
                V.temp_heads(dsc_name, full, g, dsc_type, swap=True),
                V.heads(q, g, False),
                V.temp_heads("fullk", fsz, g, cd),
                scale,
            )
            _sum_groups(V, "fullk", fsz, g, cd, dk, reduce)


def _sum_groups(V, what, sizes, g, cd, out, reduce):
    """out [B, Hkv, X, Y] = the sum over each key head's g query heads of temporary `what`."""
    ov = out.meta["val"]
    st = list(ov.stride())
    dst = V.node(out, [ov.shape[0], ov.shape[1], 1, ov.shape[2], ov.shape[3]], [st[0], st[1], 0, st[2], st[3]])
    reduce(0, V.temp_heads(what, sizes, g, cd), dst, [2])
