"""A differential fuzzer of tensor programs: random programs of ordinary tensor ops (broadcasting,
type promotion, views, in-place and out= forms, indexing, zero-size and odd shapes, autograd), each
line run on spyre and on CPU, and every live value compared after every line: values, dtype,
shape, the strides of views, and aliasing (two values share memory on spyre exactly when they do
on CPU, so a write through a view reaches its base). Where CPU raises, spyre must raise.

A program is Python source, one assignment per line, so a mismatch minimises by deleting lines
and prints as a regression test body.

    .venv/bin/python fuzz/tensor_programs.py --programs 2000 --seed 1
    .venv/bin/python fuzz/tensor_programs.py --replay 'seed 1 program 17'

Programs run in a worker process; a program that kills its worker is a crash, and is minimised the
same way (each candidate in a fresh process).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---- generation -------------------------------------------------------------------------------------

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


def _simulator_out_of_memory(e: Exception) -> bool:
    """Whether spyre refused for want of host memory to back the card's (torch.OutOfMemoryError,
    user guide): an 8.6 GB result that CPU could still allocate beside two workers' memory says as
    little about the op as a line CPU cannot allocate; the program ends there."""
    return "OutOfMemory" in type(e).__name__ and "host has no memory left" in str(e)


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


# ---- running ------------------------------------------------------------------------------------------

TOL = {"float32": (1e-4, 1e-4), "float16": (2e-2, 2e-3), "bfloat16": (2e-2, 1e-2)}


def run(lines: list) -> str | None:
    """Runs a program on CPU and on spyre, line by line; the first difference, or None."""
    import torch

    envs = {d: {"torch": torch, "dev": d} for d in ("cpu", "spyre")}
    for i, line in enumerate(lines):
        errors = {}
        # What the line reads, for the checks below that replay it: a line that writes in place
        # overwrites its own inputs, so those are kept first.
        before = {d: _small_tensors(env) for d, env in envs.items()} if _WRITES.search(line) else envs
        for d, env in envs.items():
            try:
                exec(line, env)  # noqa: S102
            except Exception as e:  # noqa: BLE001
                errors[d] = e
        if "cpu" in errors:
            # An integer division by zero is not checked on the device (0, where CUDA gives an
            # undefined value: docs/user-guide.md).
            if "ZeroDivisionError" in str(errors["cpu"]):
                return None
            if "spyre" not in errors and _pending_fault():
                return None  # an index out of range faults the launch: raised at the next sync, as CUDA does
            if "spyre" not in errors:
                return (
                    f"line {i}: CPU raises {type(errors['cpu']).__name__} ({str(errors['cpu'])[:80]}), spyre does not"
                )
            # Both refuse the line, and the program goes on, unless either changed something before
            # refusing (CPU resizes an out= first): that is torch's accident, and the program ends.
            if _compare(envs["cpu"], envs["spyre"]):
                return None
            continue
        if "spyre" in errors:
            e = errors["spyre"]
            if _simulator_out_of_memory(e):
                return None
            if "to a single memory location" in str(e):
                return None  # an output overlapping itself or an input where CPU's check cannot see it (docs)
            if isinstance(e, NotImplementedError) and "CPU fallback is disabled" in str(e):
                return f"line {i}: needs the CPU fallback ({str(e).split(chr(39))[1]})"
            return f"line {i}: spyre raises {type(e).__name__}: {str(e)[:160]}"
        diff = _compare(envs["cpu"], envs["spyre"])
        if diff:
            if _amplified(line, envs, diff, before):
                return None  # earlier, tolerated differences blown up by this line: nothing more to check
            if _accumulator_range(line, envs, diff, before):
                return None  # CPU's product left its accumulator's range, or its variance cancelled: spyre's is exact
            if _summation_order(line, envs, diff, before):
                return None  # a matmul that cancels: both sums are within rounding of the exact one
            if _gradient_nearer_exact(lines[: i + 1], envs, diff):
                return None  # a gradient summed over many rows: spyre's is nearer the float64 one than CPU's
            if _cpu_layout_dependent(line, envs, diff, before):
                return None  # CPU's own answer for these values changes with their layout; spyre gives one
            return f"line {i}: {diff}"
    return None


def _pending_fault() -> bool:
    """Whether the device's queued work raises when waited for (a launch that faulted)."""
    import torch

    try:
        torch.spyre.synchronize()
    except RuntimeError as e:
        return "core fault" in str(e)
    return False


def _replay(line: str, values: dict, name: str, torch_module=None):
    """Line `line` run on CPU over `values` (name -> tensor): its value `name`, or None."""
    import torch

    env = {"torch": torch_module or torch, "dev": "cpu", **values}
    try:
        exec(line, env)  # noqa: S102
    except Exception:  # noqa: BLE001
        return None
    out = env.get(name)
    return out if isinstance(out, torch.Tensor) else None


def _close(got, want) -> bool:
    """Whether spyre's `got` is `want` (a CPU tensor of the same shape) within got's tolerance."""
    if want is None or not hasattr(got, "shape") or want.shape != got.shape:
        return False
    rtol, atol = TOL.get(str(got.dtype).removeprefix("torch."), (0, 0))
    a, b = got.detach().cpu().double(), want.detach().double()
    return bool(a.isclose(b, rtol=rtol, atol=atol, equal_nan=True).all())


def _usable(v) -> bool:
    """Whether torch lets v be read: a view that a multi-output op (split) returned is refused once
    its base has been written in place (autograd raises on any use of it), on every device alike."""
    try:
        v.grad_fn  # noqa: B018 - reading it is the check
    except RuntimeError:
        return False
    return True


def _tensors(env: dict, f) -> dict:
    import torch

    return {k: f(v) for k, v in env.items() if isinstance(v, torch.Tensor) and _usable(v)}


# A line that writes a tensor in place: a method ending in _, out=, or a setitem.
_WRITES = re.compile(r"_\(|out=|\]\s*=[^=]")


def _host_copy(v):
    """v on the host, a leaf that requires grad still one (for a replay of the line on CPU)."""
    x = v.detach().cpu().clone()
    return x.requires_grad_(v.requires_grad) if v.is_leaf and (x.is_floating_point() or x.is_complex()) else x


def _small_tensors(env: dict) -> dict:
    """Host copies of env's tensors that share memory as the originals do (a replayed write through
    a view reaches its base), but for tensors too large to copy (an unfold's 10^10 elements)."""
    import torch

    storages, copies = {}, {}
    for k, v in _tensors(env, lambda v: v).items():
        if v.layout != torch.strided or v.is_conj() or v.is_neg() or v.untyped_storage().nbytes() > 1 << 26:
            if v.numel() <= 1 << 22:
                copies[k] = _host_copy(v)  # a clone, which resolves the conjugate and negative bits
            continue
        key = (str(v.device), v.untyped_storage().data_ptr())
        if key not in storages:
            whole = torch.empty(0, dtype=torch.uint8, device=v.device).set_(v.untyped_storage())
            storages[key] = whole.cpu().clone().untyped_storage()
        x = torch.empty(0, dtype=v.dtype).set_(storages[key], v.storage_offset(), v.shape, v.stride())
        copies[k] = x.requires_grad_(v.requires_grad) if v.is_leaf and (x.is_floating_point() or x.is_complex()) else x
    return copies


def _amplified(line: str, envs: dict, diff: str, before: dict) -> bool:
    """Whether a value that differs is what CPU itself computes from spyre's inputs: an op such as
    remainder of a large number turns an ulp of an earlier, tolerated difference into any value, and
    nonzero turns a denormal that CPU's vector loop flushes (softplus of -103) into another shape."""
    if "values differ" not in diff and ": shape" not in diff:
        return False
    name = diff.split(":", 1)[0]
    values = _small_tensors({k: v for k, v in before["spyre"].items() if k != "loss"})
    return _close(envs["spyre"].get(name), _replay(line, values, name))


# A float32 variance or standard deviation (var_mean, std_mean, nanvar, ... too).
_VARIANCE = re.compile(r"\b(std|var)(_mean)?\(")


def _accumulator_range(line: str, envs: dict, diff: str, before: dict) -> bool:
    """Whether a product (cumulative or not) differs only where CPU's accumulator overflowed or
    underflowed midway (fp16 and bf16 accumulate in fp32, fp32 in fp64) and spyre's blocked order
    did not, or a float32 variance differs where CPU's loses digits to cancellation (values of 4e8
    that differ by 100, whose mean CPU's float32 loop rounds) and spyre's, over values less their
    first, does not: spyre's value is then the one the line gives in float64, rounded to the
    result's type."""
    import torch

    name, got = diff.split(":", 1)[0], envs["spyre"].get(diff.split(":", 1)[0])
    if "values differ" not in diff or not hasattr(got, "dtype"):
        return False
    if "prod(" not in line and not (_VARIANCE.search(line) and got.dtype == torch.float32):
        return False
    exact = _replay(
        line, _tensors(before["cpu"], lambda v: v.detach().double() if v.is_floating_point() else v.detach()), name
    )
    return exact is not None and _close(got, exact.to(got.dtype))


def _gradient_nearer_exact(lines: list, envs: dict, diff: str) -> bool:
    """Whether a loss or gradient that differs is nearer the float64 answer than CPU's: the whole
    program run again on CPU with float32 made float64. A gradient that gathers many rows into few
    (the backward of indexing) sums thousands of float32 terms, whose order changes the last digits:
    CPU adds them one by one, spyre in blocks. Where CPU's own answer is outside the tolerance of the
    float64 one, float32 does not determine the value (a cancellation: the backward of log_softmax
    under pow(x, -3) subtracts two products of 1e26 whose last bits differ with the order of
    rounding): any two float32 implementations then differ by the order of CPU's own error, and
    spyre's is accepted within four times that distance."""
    import torch

    name = diff.split(":", 1)[0]
    if "values differ" not in diff or not (name == "loss" or name.startswith("grads[")):
        return False
    env = {"torch": torch, "dev": "cpu"}
    for line in lines:
        try:
            exec(line.replace("torch.float32", "torch.float64").replace(".float()", ".double()"), env)  # noqa: S102
        except Exception:  # noqa: BLE001 - a line both devices refused: the program goes on, as in run()
            pass
    exact = _values(env).get(name)
    got, want = _values(envs["spyre"]).get(name), _values(envs["cpu"]).get(name)
    if exact is None or got is None or want is None or exact.shape != got.shape:
        return False
    rtol, atol = TOL.get(str(got.dtype).removeprefix("torch."), (0, 0))
    x, g, w = exact.detach().double(), got.detach().cpu().double(), want.detach().double()
    cpu_error, tol = (w - x).abs(), atol + rtol * x.abs()
    bound = torch.where(cpu_error > tol, 4 * cpu_error, cpu_error + tol)
    same = torch.isclose(g, w, rtol=0, atol=0, equal_nan=True)  # where CPU's answer is spyre's (NaN, inf)
    return bool(((g - x).abs() <= bound).logical_or(same).all())


def _cpu_layout_dependent(line: str, envs: dict, diff: str, before: dict) -> bool:
    """Whether CPU gives spyre's value itself when the same inputs are laid out otherwise: CPU's
    vectorized and scalar loops differ at some edges (gelu of inf is NaN in one, inf in the other),
    so a non-contiguous copy of each input takes the scalar loop; where broadcasting keeps the
    vector loop, its portable kernels are asked in another process."""
    import torch

    if "values differ" not in diff:
        return False
    name = diff.split(":", 1)[0]

    def strided(v):
        x = v.detach()
        return torch.stack([x, x], -1)[..., 0] if x.dim() > 0 else x

    if _close(envs["spyre"].get(name), _replay(line, _tensors(before["cpu"], strided), name)):
        return True
    # Over spyre's own inputs: the edge may sit where earlier tolerated ulps are blown up (remainder).
    spyre_inputs = _tensors(before["spyre"], lambda v: v.detach().cpu())
    return _close(envs["spyre"].get(name), _replay_portable(line, spyre_inputs, name))


_PORTABLE = """
import sys, torch
values = torch.load(sys.argv[1])
env = {"torch": torch, "dev": "cpu", **values}
exec(sys.argv[2], env)
torch.save(env.get(sys.argv[3]), sys.argv[1])
"""


def _replay_portable(line: str, values: dict, name: str):
    """Line `line` run on CPU over `values` with ATen's portable kernels (ATEN_CPU_CAPABILITY=default:
    no vector unit), in a fresh process: CPU's vectorised kernels and its scalar loop disagree at some
    edges (fmod of a quotient past the float range is NaN in the first, exact in the second, and the
    scalar loop also takes each vector loop's tail), and the portable kernels are the scalar ones."""
    import tempfile

    import torch

    with tempfile.NamedTemporaryFile(suffix=".pt") as f:
        torch.save(values, f.name)
        env = {**os.environ, "ATEN_CPU_CAPABILITY": "default", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
        p = subprocess.run([sys.executable, "-c", _PORTABLE, f.name, line, name], env=env, capture_output=True)
        if p.returncode != 0:
            return None
        out = torch.load(f.name)
    return out if isinstance(out, torch.Tensor) else None


EPS = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}


class _AbsRandom:
    """torch, but with random operands drawn as their magnitudes: a line run with it and with every
    variable's absolute value gives sum |a| |b| for its matmul."""

    def __init__(self, torch):
        self._torch = torch

    def __getattr__(self, name):
        f = getattr(self._torch, name)
        return (lambda *a, **k: f(*a, **k).abs()) if name in ("randn", "rand") else f


def _summation_order(line: str, envs: dict, diff: str, before: dict) -> bool:
    """Whether a matmul's values differ by no more than its sums' rounding allows: two fp32 sums of
    the same products in different orders differ by up to about K eps sum|a b|, which cancellation
    makes large beside the result. Both are held to 32 eps sum|a b| of the exact (float64) result.
    Where that result overflows the type, the order decides whether a partial sum overflows first
    (CPU's inf of a 1.5e38 product less spyre's earlier -5e36, then NaN with a -inf term): spyre's
    must be the exact result's infinity, CPU's may be anything."""
    import torch

    if "values differ" not in diff or not any(k in line for k in ("matmul", "linear", "mm(", "@")):
        return False
    name = diff.split(":", 1)[0]
    exact_values = _tensors(before["cpu"], lambda v: v.detach().double() if v.is_floating_point() else v.detach())
    abs_values = {k: x if x.dtype == torch.bool else x.abs() for k, x in exact_values.items()}
    exact = _replay(line, exact_values, name)
    size = _replay(line, abs_values, name, _AbsRandom(torch))
    got, want = envs["spyre"].get(name), envs["cpu"].get(name)
    if exact is None or size is None or not hasattr(got, "shape") or exact.shape != got.shape:
        return False
    dtype = str(got.dtype).removeprefix("torch.")
    rtol, atol = TOL.get(dtype, (0, 0))
    bound = rtol * exact.abs() + atol + 32 * EPS.get(dtype, 0) * size.double()
    g, w = got.detach().cpu().double(), want.detach().double()
    overflow = exact.to(got.dtype).double()
    overflow = torch.where(overflow.isinf(), overflow, torch.nan)  # the exact result's infinity, where it has one
    undefined = exact.isnan()  # inf - inf in float64 too: NaN is the answer
    spyre_ok = torch.where(overflow.isnan(), (g - exact).abs() <= bound, g == overflow) | (undefined & g.isnan())
    cpu_ok = overflow.isinf() | ((w - exact).abs() <= bound) | (undefined & w.isnan())
    return bool(spyre_ok.all() and cpu_ok.all())


def _values(env):
    import torch

    out = {}
    for k, v in env.items():
        if isinstance(v, torch.Tensor) and _usable(v):
            out[k] = v
        elif isinstance(v, tuple) and k == "grads":
            out.update({f"grads[{i}]": g for i, g in enumerate(v) if isinstance(g, torch.Tensor)})
    return out


def _compare(cpu_env, dev_env) -> str | None:
    import torch

    cpu, dev = _values(cpu_env), _values(dev_env)
    # The loss and the gradients sum values of every type in the program: they are held to the
    # tolerance of its least precise floating type.
    kinds = {str(w.dtype).removeprefix("torch.") for w in cpu.values()}
    loosest = max((TOL[t] for t in kinds if t in TOL), default=(0, 0))
    if set(cpu) != set(dev):
        return f"values {sorted(set(cpu) ^ set(dev))} exist on one side only"
    for k, w in cpu.items():
        g = dev[k]
        if g.dtype != w.dtype:
            return f"{k}: dtype {g.dtype}, CPU {w.dtype}"
        if g.shape != w.shape:
            return f"{k}: shape {tuple(g.shape)}, CPU {tuple(w.shape)}"
        if w._base is not None and g.stride() != w.stride() and w.numel() > 1:
            return f"{k}: a view with strides {g.stride()}, CPU {w.stride()}"
        if w.numel() > 10_000_000:  # a view of a huge span (unfold): its layout is checked, not its values
            continue
        gc = g.detach().cpu()
        wd = w.detach()
        rtol, atol = TOL.get(str(w.dtype).removeprefix("torch."), (0, 0))
        if k == "loss" or k.startswith("grads["):
            rtol, atol = max((rtol, atol), loosest)
        a, b = (gc, wd) if wd.is_complex() else (gc.double(), wd.double())
        close = torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
        if not bool(close.all()):
            bad = int((~close).reshape(-1).nonzero()[0])
            got, want = a.reshape(-1)[bad].item(), b.reshape(-1)[bad].item()
            return f"{k}: values differ (at flat {bad}: spyre {got}, CPU {want})"
    names = [k for k, w in cpu.items() if w.numel() > 0 and w.layout == torch.strided]
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            c_shared = cpu[a].untyped_storage().data_ptr() == cpu[b].untyped_storage().data_ptr()
            d_shared = dev[a].untyped_storage().data_ptr() == dev[b].untyped_storage().data_ptr()
            if c_shared != d_shared:
                return f"{a} and {b}: {'share' if c_shared else 'do not share'} memory on CPU, not so on spyre"
    return None


def minimise(lines: list, fails) -> list:
    """Drops lines while `fails(lines)` still reports a difference (a failure on another line, or a
    line the others need, keeps the line)."""
    want = fails(lines)
    changed = True
    while changed:
        changed = False
        for i in range(len(lines) - 1, -1, -1):
            trial = lines[:i] + lines[i + 1 :]
            got = fails(trial)
            if got is not None and got.split(":", 1)[-1] == want.split(":", 1)[-1]:
                lines, changed = trial, True
    return lines


def as_test(lines: list, finding: str) -> str:
    body = "\n".join(f"    {line}" for line in lines)
    return f"# {finding}\ndef program(dev):\n{body}\n"


# ---- the worker and the driver ------------------------------------------------------------------------

WORKER = """
import json, sys
sys.path.insert(0, {root!r} + "/fuzz")
import torch, torch_spyre, tensor_programs as tp
torch_spyre.set_cpu_fallback({mode!r})
for line in sys.stdin:
    req = json.loads(line)
    lines = req["lines"] if "lines" in req else tp.program(req["seed"], req["index"], req["length"])
    try:
        finding = tp.run(lines)
    except Exception as e:  # an error the line did not raise: a device error read back while comparing
        finding = None if tp._simulator_out_of_memory(e) else f"comparing raises {{type(e).__name__}}: {{str(e)[:160]}}"
    print(json.dumps({{"id": req.get("id"), "finding": finding, "lines": lines}}), flush=True)
"""


class Worker:
    def __init__(self, mode: str):
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        env.setdefault("SPYRE_CONFIG", os.path.join(ROOT, "configs", "ieee_fp16.json"))
        self.p = subprocess.Popen([sys.executable, "-c", WORKER.format(root=ROOT, mode=mode)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)  # fmt: skip

    def ask(self, req: dict) -> dict | None:
        """The worker's answer, or None when it died (a crash)."""
        try:
            self.p.stdin.write(json.dumps(req) + "\n")
            self.p.stdin.flush()
            line = self.p.stdout.readline()
        except (BrokenPipeError, OSError):
            return None
        return json.loads(line) if line else None

    def close(self):
        self.p.kill()
        self.p.wait()  # reaped: no zombie per replaced worker

    def rss(self) -> int:
        """The worker's resident memory in bytes."""
        try:
            with open(f"/proc/{self.p.pid}/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            return 0


# Device memory a program touched stays backed by the simulator's host memory until the process ends
# (the card does not yet give freed memory back: issue 19), so a worker that ran a program of tens of
# GB is replaced before the next one, lest programs fail for want of host memory rather than by an op.
WORKER_MEMORY = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--length", type=int, default=12)
    parser.add_argument(
        "--mode",
        default="allow",
        choices=["allow", "error"],
        help="the CPU fallback: allowed (is every answer right?) or forbidden (what runs natively?)",
    )
    parser.add_argument("--replay", help="'seed S program I': that program alone, printed")
    parser.add_argument("--out", help="write the minimised findings here (JSON)")
    args = parser.parse_args()
    if args.replay:
        _, s, _, i = args.replay.split()
        lines = program(int(s), int(i), args.length)
        print("\n".join(lines))
        return
    worker, findings, native, t0 = Worker(args.mode), [], 0, time.time()
    for i in range(args.programs):
        res = worker.ask({"seed": args.seed, "index": i, "length": args.length, "id": i})
        if res is None:  # the program killed the worker
            worker.close()
            worker = Worker(args.mode)
            lines = program(args.seed, i, args.length)
            findings.append(_minimise_crash(lines, args.mode, f"seed {args.seed} program {i}"))
            continue
        if worker.rss() > WORKER_MEMORY:
            worker.close()
            worker = Worker(args.mode)
        if res["finding"] is None:
            native += 1
            continue
        if args.mode == "error" and "needs the CPU fallback" in res["finding"]:
            continue
        lines = minimise(res["lines"], lambda ls, w=worker: (w.ask({"lines": ls}) or {"finding": "crash"})["finding"])
        findings.append({"program": f"seed {args.seed} program {i}", "finding": res["finding"], "lines": lines})
        print(as_test(lines, f"seed {args.seed} program {i}: {res['finding']}"), flush=True)
    worker.close()
    kinds = {"crash": sum("crash" in f["finding"] for f in findings), "mismatch": len(findings)}
    kinds["mismatch"] -= kinds["crash"]
    print(f"{args.programs} programs (seed {args.seed}, {args.length} lines, fallback={args.mode}) in "
          f"{time.time() - t0:.0f} s: {kinds['mismatch']} mismatches, {kinds['crash']} crashes"
          + (f"; {native} ran with no fallback" if args.mode == "error" else ""))  # fmt: skip
    if args.out:
        with open(args.out, "w") as f:
            json.dump(findings, f, indent=1)
    sys.exit(1 if findings else 0)


def _minimise_crash(lines: list, mode: str, where: str) -> dict:
    def fails(ls):
        w = Worker(mode)
        try:
            res = w.ask({"lines": ls})
        finally:
            w.close()
        return "crash: the process died" if res is None else res["finding"]

    lines = minimise(lines, fails)
    print(as_test(lines, f"{where}: crash"), flush=True)
    return {"program": where, "finding": "crash: the process died", "lines": lines}


if __name__ == "__main__":
    main()
