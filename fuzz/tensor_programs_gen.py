"""The generator of the differential fuzzer's tensor programs (fuzz/tensor_programs.py): random
programs of ordinary tensor ops (broadcasting, type promotion, views, in-place and out= forms,
indexing, zero-size and odd shapes, autograd), one assignment per line, each line generated
against CPU so that it uses values that exist, with their real shapes.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

DTYPES = ["float32", "float32", "float32", "bfloat16", "float16", "int64", "int32", "bool"]
SIZES = [0, 1, 1, 2, 3, 4, 5, 7, 8, 16]
UNARY = [
    "abs",
    "neg",
    "exp",
    "log",
    "sqrt",
    "sin",
    "cos",
    "tanh",
    "sigmoid",
    "relu",
    "floor",
    "ceil",
    "round",
    "trunc",
    "sign",
    "reciprocal",
    "rsqrt",
    "exp2",
    "log1p",
    "expm1",
    "erf",
    "nn.functional.gelu",
    "nn.functional.silu",
    "logical_not",
    "bitwise_not",
    "isnan",
    "isinf",
    "square",
    "nn.functional.softplus",
]
BINARY = [
    "add",
    "sub",
    "mul",
    "div",
    "maximum",
    "minimum",
    "pow",
    "remainder",
    "fmod",
    "floor_divide",
    "atan2",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_and",
    "logical_or",
    "logical_xor",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
]
REDUCE = ["sum", "mean", "prod", "amax", "amin", "all", "any", "var", "std", "logsumexp", "argmax", "argmin",
          "cumsum", "cumprod", "softmax", "log_softmax"]  # fmt: skip


@dataclass
class Var:
    name: str
    shape: tuple
    dtype: str
    grad: bool = False
    storage: int = 0  # which memory it is (views share their base's)
    distinct: bool = False  # no two values equal (nor NaN): a selection among ties is each library's own choice


@dataclass
class Gen:
    rng: random.Random
    vars: list = field(default_factory=list)
    lines: list = field(default_factory=list)
    count: int = 0

    def fresh(self) -> str:
        self.count += 1
        return f"v{self.count}"

    def pick(self, pred=lambda v: True):
        c = [v for v in self.vars if pred(v)]
        return self.rng.choice(c) if c else None

    def shape(self, rank=None):
        r = self.rng.choice([0, 1, 1, 2, 2, 3, 3, 4]) if rank is None else rank
        return tuple(self.rng.choice(SIZES) for _ in range(r))

    def leaf(self):
        shape, dtype = self.shape(), self.rng.choice(DTYPES)
        seed = self.rng.randrange(1 << 30)
        g = f"torch.Generator().manual_seed({seed})"
        if dtype == "bool":
            make = f"torch.rand({shape}, generator={g}) > 0.5"
        elif dtype.startswith("int"):
            lo, hi = self.rng.choice([(-5, 6), (0, 4), (-100, 100), (-(2**40), 2**40)])
            hi = hi if dtype == "int64" or hi < 2**31 else 2**31 - 1
            lo = lo if dtype == "int64" or lo > -(2**31) else -(2**31)
            make = f"torch.randint({lo}, {hi}, {shape}, generator={g}, dtype=torch.{dtype})"
        else:
            scale = self.rng.choice([1, 1, 1, 100, 1e-3])
            make = f"(torch.randn({shape}, generator={g}) * {scale}).to(torch.{dtype})"
        grad = dtype == "float32" and self.rng.random() < 0.3
        name = self.fresh()
        self.lines.append(f"{name} = ({make}).to(dev)" + (".requires_grad_()" if grad else ""))
        return name

    def scalar(self, dtype_hint="float32", small=False):
        """A Python or 0-dim host scalar; `small` ones fit every dtype. (CPU's setitem converts a
        Python number without the overflow check every device's fill_ has, CUDA's too: x[0] = 2**33
        gives inf in a CPU half tensor and raises on a device.)"""
        kind = self.rng.choice(["int", "float", "bool"] if small else ["int", "float", "bool", "host"])
        if kind == "int":
            return str(self.rng.choice([0, 1, 2, -3, 7] if small else [0, 1, 2, -3, 7, 2**33]))
        if kind == "float":
            return repr(self.rng.choice([0.5, -1.25, 2.0] if small else [0.5, -1.25, 2.0, 1e-3, float("inf")]))
        if kind == "bool":
            return self.rng.choice(["True", "False"])
        dt = self.rng.choice(["int64", "float32", "int32", "bool", "bfloat16"])
        val = self.rng.choice(["3", "-2", "0.75", "2**40", "True"])
        return f"torch.tensor({val}, dtype=torch.{dt})"

    def broadcastable(self, shape):
        """A shape that broadcasts with `shape`."""
        out = list(shape)
        for i in range(len(out)):
            if self.rng.random() < 0.3:
                out[i] = 1
        while out and self.rng.random() < 0.3:
            out.pop(0)
        return tuple(out)

    def dim(self, v, allow_none=False):
        if not v.shape:
            return self.rng.choice(["0", "-1"]) if not allow_none else "None"
        d = self.rng.randrange(-len(v.shape), len(v.shape))
        return str(d)


def step(g: Gen) -> str | None:
    """One random line over the program's values, or None when there is nothing to use."""
    rng = g.rng
    x = g.pick()
    if x is None or rng.random() < 0.12:
        g.leaf()
        return None
    kind = rng.choice(["unary", "binary", "binary", "reduce", "view", "view", "inplace", "out", "index", "misc",
                       "matmul", "setitem"])  # fmt: skip
    out = g.fresh()
    if kind == "unary":
        fn = rng.choice(UNARY)
        return f"{out} = torch.{fn}({x.name})"
    if kind == "binary":
        fn = rng.choice(BINARY)
        if rng.random() < 0.3:
            other = g.scalar()
            if fn == "pow" and other == str(2**33):
                # Not an exponent past 2^24: CPU's vector loop rounds it to float (an odd one, as
                # its gradient's 2^33 - 1, becomes even) and its scalar loop keeps it, so CPU's sign
                # of (-1.5) ** (2**33 - 1) depends on the tensor's length (-inf for 4 elements, inf
                # for 64); no device can agree with both.
                other = "7"
        else:
            y = g.pick(lambda v: v is not x) or x
            other = y.name if rng.random() < 0.7 else f"{y.name}.reshape({g.broadcastable(x.shape)})"
        extra = ""
        if fn in ("add", "sub") and rng.random() < 0.3:
            extra = f", alpha={rng.choice([2, -1, 0.5])}"
        if fn == "div" and rng.random() < 0.4:
            extra = f", rounding_mode={rng.choice(['trunc', 'floor'])!r}"
        swap = rng.random() < 0.2 and other.startswith(("v", "torch.tensor"))  # a tensor either side
        a, b = (other, x.name) if swap else (x.name, other)
        return f"{out} = torch.{fn}({a}, {b}{extra})"
    if kind == "reduce":
        fn = rng.choice(REDUCE)
        if fn in ("std", "var") and x.grad and not x.distinct:
            # Not where the gradient may meet a zero variance: it is 0 / 0 there, and each library's
            # finite value comes from its own rounding of the mean.
            fn = "sum"
        if fn in ("cumsum", "cumprod", "softmax", "log_softmax"):
            return f"{out} = torch.{fn}({x.name}, {g.dim(x)})"
        if fn in ("argmax", "argmin"):
            return f"{out} = torch.{fn}({x.name}" + (
                f", {g.dim(x)}, keepdim={rng.random() < 0.5})" if rng.random() < 0.7 else ")"
            )
        dims = g.dim(x)
        if x.shape and rng.random() < 0.3:
            dims = f"({g.dim(x)}, {g.dim(x)})"
        keep = rng.random() < 0.5
        if fn in ("all", "any", "prod") and dims.startswith("("):
            dims = g.dim(x)
        if rng.random() < 0.25:
            return f"{out} = torch.{fn}({x.name})"
        return f"{out} = torch.{fn}({x.name}, {dims}, keepdim={keep})"
    if kind == "view":
        n = len(x.shape)
        choices = [
            f"{x.name}.view(-1)",
            f"{x.name}.reshape({tuple(reversed(x.shape))})" if x.shape else f"{x.name}.reshape(1)",
            f"{x.name}.unsqueeze({rng.randrange(-n - 1, n + 1)})",
            f"{x.name}.squeeze()",
            f"{x.name}.t()" if n <= 2 else f"{x.name}.transpose(0, -1)",
        ]
        if n:
            d = rng.randrange(n)
            size = x.shape[d]
            lo = rng.randrange(-size, size) if size else 0
            choices += [
                f"{x.name}.transpose({rng.randrange(-n, n)}, {rng.randrange(-n, n)})",
                f"{x.name}.permute({tuple(rng.sample(range(n), n))})",
                f"{x.name}.narrow({d}, 0, {rng.randrange(size + 1)})",
                f"{x.name}.select({d}, {lo})" if size else f"{x.name}.flatten()",
                f"{x.name}[{':, ' * d}{lo}:{rng.choice(['', str(size)])}:{rng.choice([1, 2, 3])}]",
                f"{x.name}.unfold({d}, {rng.randrange(1, size + 2)}, {rng.randrange(1, 3)})",
                f"{x.name}.expand({(rng.choice([2, 3]),) + x.shape})",
                f"{x.name}.flip({d})",
                f"{x.name}.diagonal()" if n >= 2 else f"{x.name}.movedim(0, -1)",
                f"{x.name}.split({rng.randrange(1, 4)}, {d})[0]",
                f"{x.name}.chunk({rng.randrange(1, 4)}, {d})[-1]",
            ]
        return f"{out} = {rng.choice(choices)}"
    if kind == "inplace":
        fn = rng.choice(["add_", "sub_", "mul_", "div_", "clamp_", "fill_", "zero_", "neg_", "exp_", "copy_",
                         "masked_fill_", "abs_", "floor_", "relu_"])  # fmt: skip
        if fn in ("zero_", "neg_", "exp_", "abs_", "floor_", "relu_"):
            return f"{out} = {x.name}.{fn}()"
        if fn == "fill_":
            return f"{out} = {x.name}.fill_({g.scalar()})"
        if fn == "clamp_":
            return f"{out} = {x.name}.clamp_(min={g.scalar()})"
        y = g.pick(lambda v: v is not x) or x
        if fn == "copy_":
            return f"{out} = {x.name}.copy_({y.name})"
        if fn == "masked_fill_":
            m = g.pick(lambda v: v.dtype == "bool")
            return f"{out} = {x.name}.masked_fill_({m.name if m else 'True'}, {g.scalar()})" if m else None
        return f"{out} = {x.name}.{fn}({y.name if rng.random() < 0.6 else g.scalar()})"
    if kind == "out":
        fn = rng.choice(BINARY[:8] + ["exp", "neg", "sum", "cat", "amax", "softmax", "tril", "clamp"])
        y = g.pick() or x
        # An out= that overlaps an input is undefined in torch (CPU resizes it under its own reads).
        o = g.pick(lambda v: v.storage not in (x.storage, y.storage))
        target = (f"{o.name}" if o is not None and rng.random() < 0.5 else
                  f"torch.empty(0, dtype=torch.{rng.choice(DTYPES)}, device=dev)")  # fmt: skip
        if fn in BINARY:
            call = f"torch.{fn}({x.name}, {y.name}, out={target})"
        elif fn in ("exp", "neg", "tril"):
            call = f"torch.{fn}({x.name}, out={target})"
        elif fn == "cat":
            call = f"torch.cat([{x.name}, {y.name}], {g.dim(x)}, out={target})"
        elif fn == "softmax":
            call = f"torch.softmax({x.name}, {g.dim(x)}, out={target})"
        elif fn == "clamp":
            call = f"torch.clamp({x.name}, {g.scalar()}, out={target})"
        else:
            call = f"torch.{fn}({x.name}, {g.dim(x)}, out={target})"
        return f"{out} = {call}"
    if kind == "index":
        n = len(x.shape)
        if n == 0:
            return f"{out} = {x.name}[None]"
        size = x.shape[0]
        i = g.pick(lambda v: v.dtype in ("int64", "int32"))
        m = g.pick(lambda v: v.dtype == "bool")
        picks = [rng.randrange(-size, size) for _ in range(rng.randrange(4))] if size else []
        choices = [
            f"{x.name}[torch.tensor({picks}, dtype=torch.long, device=dev)]",
            f"{x.name}[{x.name} > 0]" if x.dtype != "bool" else f"{x.name}[{x.name}]",
            f"torch.index_select({x.name}, 0, torch.arange({size}, device=dev).flip(0))",
            f"torch.where({x.name} > 0, {x.name}, {g.scalar()})"
            if x.dtype != "bool"
            else f"torch.where({x.name}, 1, 0)",
            f"torch.take_along_dim({x.name}, torch.zeros({x.shape}, dtype=torch.long, device=dev), {g.dim(x)})",
            f"{x.name}.nonzero()",
        ]
        if m is not None:
            choices.append(f"{x.name}[{m.name}]")
        if i is not None:
            choices.append(f"{x.name}[{i.name}.clamp({-size}, {max(size - 1, 0)})]" if size else f"{x.name}[{i.name}]")
        return f"{out} = {rng.choice(choices)}"
    if kind == "setitem":
        n = len(x.shape)
        if n == 0:
            return f"{x.name}[()] = {g.scalar(small=True)}"
        size = x.shape[0]
        mask = f"{x.name} > 0" if x.dtype != "bool" else x.name
        idx = rng.choice([f"{rng.randrange(-size, size) if size else 0}", "...", mask,
                          "torch.tensor([0, -1], device=dev)" if size else "0"])  # fmt: skip
        y = g.pick()
        # Into an integer or bool x, a value that needs no grad: CPU's setitem fills from a 0-dim CPU
        # value (fill_, which records a gradient even into bool), a device's copies it (copy_, which
        # does not: CUDA's too).
        part = f"{y.name}.reshape(-1)[:1].reshape(())" if y else ""
        if y and x.dtype not in ("float32", "float16", "bfloat16"):
            part = f"{y.name}.detach().reshape(-1)[:1].reshape(())"
        val = g.scalar(small=True) if y is None or rng.random() < 0.5 else part
        return f"{x.name}[{idx}] = {val}"
    if kind == "matmul":
        a = g.pick(lambda v: v.dtype in ("float32", "bfloat16", "float16") and len(v.shape) in (1, 2, 3))
        if a is None:
            return None
        k = a.shape[-1]
        n = rng.choice([1, 3, 8])
        shape = (k, n) if len(a.shape) != 3 else (a.shape[0], k, n)
        seed = rng.randrange(1 << 30)
        w = f"torch.randn({shape}, generator=torch.Generator().manual_seed({seed})).to({a.name}.dtype).to(dev)"
        fn = rng.choice(["torch.matmul", "torch.matmul", "torch.nn.functional.linear_t"])
        if fn.endswith("linear_t"):
            return f"{out} = torch.nn.functional.linear({a.name}, {w}.transpose(-2, -1))" if len(a.shape) != 3 else None
        return f"{out} = torch.matmul({a.name}, {w})"
    # misc
    y = g.pick() or x
    choices = [
        f"torch.cat([{x.name}, {y.name}], {g.dim(x)})",
        f"torch.stack([{x.name}, {x.name}], {rng.randrange(-len(x.shape) - 1, len(x.shape) + 1)})",
        f"{x.name}.clone()",
        f"{x.name}.contiguous()",
        f"{x.name}.to(torch.{rng.choice(DTYPES)})",
        f"torch.zeros_like({x.name})",
        f"torch.full_like({x.name}, {g.scalar()})",
        f"torch.clamp({x.name}, {g.scalar()}, {g.scalar()})",
        f"torch.sort({x.name}, {g.dim(x)}, descending={rng.random() < 0.5})[0]",
        f"torch.topk({x.name}.reshape(-1), min(3, {x.name}.numel()), largest={rng.random() < 0.5})[0]"
        if x.distinct
        else f"torch.sort({x.name}.reshape(-1), stable=True)[0]",
        f"torch.kthvalue({x.name}.reshape(-1), {1 + rng.randrange(max(1, math.prod(x.shape)))})[0]"
        if x.distinct
        else f"{x.name}.flip(0)"
        if x.shape
        else f"{x.name}.clone()",
        f"torch.tril({x.name})" if len(x.shape) >= 2 else f"torch.roll({x.name}, 1)",
        f"torch.lerp({x.name}, {y.name}, 0.3)",
        f"torch.addcmul({x.name}, {y.name}, {y.name}, value=0.5)",
        f"torch.arange({rng.choice([0, 1, 5])}, {rng.choice([7, 9, 2**20 + 3])}, {rng.choice([1, 3])}, device=dev)",
        f"torch.histc({x.name}.float(), 5, -1, 1)" if x.dtype != "bool" else f"{x.name}.int()",
    ]
    return f"{out} = {rng.choice(choices)}"


def program(seed: int, index: int, length: int = 12) -> list:
    """The lines of program `index` of `seed`: leaves and ops, generated against CPU (so that each
    op uses values that exist, with their real shapes)."""
    import torch

    g = Gen(random.Random(seed * 1_000_003 + index))
    env = {"torch": torch, "dev": "cpu"}
    done = 0
    g.leaf()
    while len(g.lines) < length:
        line = step(g)
        if line is not None:
            g.lines.append(line)
        kept = []
        for pending in g.lines[done:]:  # the new lines (and leaves) on CPU, to learn their shapes
            try:
                exec(pending, env)  # noqa: S102 - our own generated program
            except Exception as e:  # noqa: BLE001 - a line CPU refuses is still a check (spyre must refuse it)
                if _host_out_of_memory(e):  # but not one this host cannot hold: the card holds more
                    continue
            kept.append(pending)
        g.lines[done:] = kept
        done = len(g.lines)
        g.vars = [Var(k, tuple(v.shape), str(v.dtype).removeprefix("torch."), bool(v.requires_grad),
                      v.untyped_storage().data_ptr() if v.layout == torch.strided else 0, _distinct(v))
                  for k, v in env.items() if isinstance(v, torch.Tensor) and k.startswith("v")]  # fmt: skip
    if any(v.grad for v in g.vars) and g.rng.random() < 0.7:
        tensors = "(t for t in list(globals().values()) if isinstance(t, torch.Tensor))"
        g.lines.append(f"loss = sum((t.float() * 0.5).sum() for t in {tensors}"
                       " if t.requires_grad and t.is_floating_point() and not t.is_leaf)")  # fmt: skip
        leaves = f"[t for t in {tensors} if t.is_leaf and t.requires_grad]"
        g.lines.append(f"grads = torch.autograd.grad(loss, {leaves}, allow_unused=True)"
                       " if isinstance(loss, torch.Tensor) and loss.requires_grad else ()")  # fmt: skip
    return g.lines


def _host_out_of_memory(e: Exception) -> bool:
    """Whether CPU refused a line for want of host memory (a 172 GB unfold made contiguous): the card's
    112 GB are sparse and may hold it, so the line says nothing about the op."""
    return isinstance(e, MemoryError) or "can't allocate memory" in str(e) or "OutOfMemory" in type(e).__name__


def _distinct(v) -> bool:
    """Whether no two of v's values are equal and none is NaN. Which of several tied values topk or
    kthvalue returns is each implementation's own (CPU's comes from libstdc++'s introselect, CUDA's
    differs again), and the gradient follows it: the generator selects from distinct values only."""
    import torch

    if v.layout != torch.strided or v.is_complex() or v.numel() > 100_000:
        return False
    flat = v.detach().reshape(-1)
    if flat.is_floating_point() and bool(flat.isnan().any()):
        return False
    return torch.unique(flat).numel() == flat.numel()
