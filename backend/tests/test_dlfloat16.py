"""fp16 on a card with the silicon's defaults: device memory keeps DLFloat16 (1-6-9, bias 31), and
copies convert at the boundary. Checked against a reference written here from the format's
definition (docs/hardware-interface.md, "Numerics"): the grid of 9-bit fractions, rounding to
nearest with ties away from zero, no subnormals, no infinity (saturation), one NaN."""

from __future__ import annotations

import json

from conftest import run_python

# The reference, run in the child: exact rational arithmetic on the grid of representable values.
REFERENCE = r"""
import math
from fractions import Fraction

LARGEST = (2 - Fraction(1, 256)) * 2**32
SMALLEST = Fraction(1, 2**30)

def dl(x):
    '''The DLFloat16 value nearest to x, as a float.'''
    if math.isnan(x):
        return math.nan
    sign = -1 if math.copysign(1.0, x) < 0 else 1
    if math.isinf(x):
        return sign * float(LARGEST)
    a = Fraction(abs(x))
    if a == 0:
        return sign * 0.0
    exp = math.floor(math.log2(a))
    while Fraction(2) ** exp > a:
        exp -= 1
    while Fraction(2) ** (exp + 1) <= a:
        exp += 1
    ulp = Fraction(2) ** (exp - 9)
    q = a / ulp
    n = math.floor(q)
    if q - n >= Fraction(1, 2):  # ties away from zero
        n += 1
    v = n * ulp
    if v < SMALLEST:
        return sign * 0.0
    return sign * float(min(v, LARGEST))
"""

CHECKS = r"""
import torch, torch_spyre
torch_spyre.set_cpu_fallback("error")
assert torch_spyre.device_info()["fp16_format"] == "dlfloat16"

# 1. The copy boundary, for every fp16 bit pattern: host -> DLFloat16 -> host.
bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
x = bits.view(torch.float16)
back = x.to("spyre").cpu()
want = torch.tensor([dl(v) for v in x.float().tolist()], dtype=torch.float64).half()
same = (back == want) | (back.isnan() & want.isnan())
bad = list(zip(x[~same][:5].tolist(), back[~same][:5].tolist(), want[~same][:5].tolist()))
assert bool(same.all()), bad
assert bool((back.isnan() == x.isnan()).all())

# 2. Device arithmetic rounds each fp16 result once to DLFloat16 (fp32 products of these are exact).
v = torch.randn(4000, generator=torch.Generator().manual_seed(0)).half()
got = (v.to("spyre") * 3).cpu()
want = torch.tensor([dl(dl(f) * 3) for f in v.float().tolist()], dtype=torch.float64).half()
assert torch.equal(got, want)

# 3. An fp16 matmul accumulates in fp32 and rounds the result once.
g = torch.Generator().manual_seed(1)
a = (torch.randint(-8, 9, (40, 64), generator=g) / 4).half()
b = (torch.randint(-8, 9, (64, 24), generator=g) / 8).half()
exact = a.double() @ b.double()
got = (a.to("spyre") @ b.to("spyre")).cpu()
want = torch.tensor([dl(f) for f in exact.flatten().tolist()], dtype=torch.float64).half().view(40, 24)
assert torch.equal(got, want)

# 4. No infinity on the card: +-inf saturate there (isinf is False), and read back as +-inf.
s = torch.tensor([float("inf"), -float("inf"), float("nan"), 65504.0], dtype=torch.float16).to("spyre")
assert torch.isinf(s).cpu().tolist() == [False, False, False, False]
assert s.float().cpu()[:2].tolist() == [float(LARGEST), -float(LARGEST)]
r = s.cpu().tolist()
assert r[0] == float("inf") and r[1] == -float("inf") and math.isnan(r[2]) and r[3] == float("inf")

# 5. Uniform fp16 numbers keep 10 random bits (DLFloat16's digits), so none rounds up to 1.
u = torch.rand(200000, dtype=torch.float16, device="spyre").cpu()
assert float(u.max()) < 1.0 and float(u.min()) >= 0.0

# 6. A strided fp16 write merges in the card's own bits: the elements it skips are untouched,
#    even those IEEE half cannot hold (1e6) or holds only approximately (1e-7).
m = torch.full((4, 4), 1e6, device="spyre").half()  # full(1e6, float16) raises, as on CPU
m[1] = 1e-7
before = m.float().cpu()
m[:, 0] = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)  # a host dtype: the strided write path
after = m.float().cpu()
assert after[:, 0].tolist() == [1.0, 2.0, 3.0, 4.0]
assert torch.equal(after[:, 1:], before[:, 1:])

# 7. torch.save writes IEEE half (what the card holds, converted), loadable on the CPU or the card.
import io
w = torch.tensor([1.5, -2.25, 1 + 2**-10, 3e-5], dtype=torch.float16)
held = w.to("spyre").cpu()
buf = io.BytesIO()
torch.save({"w": w.to("spyre"), "lin": torch.nn.Linear(3, 2).half().to("spyre").state_dict()}, buf)
buf.seek(0)
on_cpu = torch.load(buf, map_location="cpu")
assert on_cpu["w"].device.type == "cpu" and torch.equal(on_cpu["w"], held)
buf.seek(0)
on_card = torch.load(buf)
assert on_card["w"].device.type == "spyre" and torch.equal(on_card["w"].cpu(), held)
assert on_card["lin"]["weight"].dtype == torch.float16
g = torch.zeros(3, dtype=torch.float16, device="spyre", requires_grad=True)
buf = io.BytesIO()
torch.save(g, buf)
buf.seek(0)
back = torch.load(buf)
assert back.requires_grad and back.is_leaf and back.device.type == "spyre"
print("ok")
"""


def test_fp16_is_dlfloat16_on_a_default_card(tmp_path):
    config = tmp_path / "silicon.json"
    config.write_text(json.dumps({"chip": {"fp16_format": "dlfloat16"}}))
    proc = run_python(REFERENCE + CHECKS, env={"SPYRE_CONFIG": str(config)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "ok"


def test_the_fp16_format_is_a_config_key_with_a_clear_error(tmp_path):
    ieee = tmp_path / "ieee.json"
    ieee.write_text(json.dumps({"chip": {"fp16_format": "ieee"}}))
    code = (
        "import torch, torch_spyre\n"
        "x = torch.tensor([65504.0, 1 + 2**-10], dtype=torch.float16)\n"
        "print(torch_spyre.device_info()['fp16_format'], torch.equal(x.to('spyre').cpu(), x))\n"
    )
    proc = run_python(code, env={"SPYRE_CONFIG": str(ieee)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ieee", "True"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"chip": {"fp16_format": "bf16"}}))
    proc = run_python("import torch; torch.ones(1).to('spyre')", env={"SPYRE_CONFIG": str(bad)})
    assert proc.returncode != 0
    assert "chip.fp16_format" in proc.stderr and "dlfloat16" in proc.stderr
