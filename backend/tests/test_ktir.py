"""KTIR kernels on the card (torch_spyre.ktir): the project's example kernels (examples/ktir/)
against CPU torch, each also listed, traced, sanitized and timed beside its roofline; and every
way a kernel can be refused (an unsupported construct, a malformed line, wrong arguments, an index
out of range) raising an error that names it, with nothing run."""

from __future__ import annotations

import json
import pathlib

import pytest
import torch
import torch_spyre
from conftest import run_python

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "ktir"


def kernel(name: str) -> torch_spyre.ktir.Kernel:
    return torch_spyre.ktir.load(EXAMPLES / f"{name}.mlir")


def run(k, *tensors: torch.Tensor) -> list[torch.Tensor]:
    dev = [t.to("spyre") for t in tensors]
    k(*dev)
    return [t.cpu() for t in dev]


def test_add_matches_cpu():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(96, 64, generator=g).half(), torch.randn(96, 64, generator=g).half()
    _, _, c = run(kernel("add"), a, b, torch.zeros(96, 64, dtype=torch.half))
    torch.testing.assert_close(c, a + b)


def test_matmul_on_a_2x16_grid_with_a_k_loop_matches_cpu():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(256, 256, generator=g).half(), torch.randn(256, 512, generator=g).half()
    k = kernel("matmul")
    info = k.compiled()
    assert info["grid"] == [2, 16] and info["work"]["macs"] == 256 * 256 * 512
    _, _, c = run(k, a, b, torch.zeros(256, 512))
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-5, atol=1e-4)


def test_softmax_matches_cpu():
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(2)) * 4
    _, y = run(kernel("softmax"), x, torch.zeros(64, 256))
    torch.testing.assert_close(y, torch.softmax(x, dim=1), rtol=1e-5, atol=1e-7)


def test_layer_norm_matches_cpu():
    g = torch.Generator().manual_seed(3)
    x, w, b = torch.randn(64, 128, generator=g) * 3 + 1, torch.randn(128, generator=g), torch.randn(128, generator=g)
    *_, y = run(kernel("layernorm"), x, w, b, torch.zeros(64, 128))
    torch.testing.assert_close(y, torch.nn.functional.layer_norm(x, (128,), w, b, eps=1e-5), rtol=1e-5, atol=1e-5)


def test_ring_allreduce_between_tiles_gives_every_tile_the_sum():
    x = torch.randn(32, 128, generator=torch.Generator().manual_seed(4))
    k = kernel("ring_allreduce")
    assert k.compiled()["workspace_bytes"] > 0
    _, y = run(k, x, torch.zeros(32, 128))
    torch.testing.assert_close(y, x.sum(0, keepdim=True).expand(32, 128), rtol=1e-5, atol=1e-5)


def test_gather_through_an_indirect_access_tile_matches_cpu():
    g = torch.Generator().manual_seed(5)
    table, idx = torch.randn(1000, 64, generator=g), torch.randint(0, 1000, (256,), generator=g)
    *_, out = run(kernel("gather"), table, idx, torch.zeros(256, 64))
    assert torch.equal(out, table[idx])


def test_listing_groups_each_core_s_instructions_under_their_ktir_line():
    text = (EXAMPLES / "matmul.mlir").read_text().splitlines()
    listing = kernel("matmul").listing
    matmul_line = next(i + 1 for i, s in enumerate(text) if "linalg.matmul" in s)
    assert f"; line {matmul_line}: %next = linalg.matmul" in listing
    core31 = listing.split("core 31:")[1]
    # The K loop unrolled: four MATMULs accumulating, each after the loads of its tiles.
    assert core31.count("MATMUL") == 4 and core31.count("LOAD") == 8


def test_errors_name_what_is_wrong_and_nothing_runs():
    add = (EXAMPLES / "add.mlir").read_text()
    with pytest.raises(NotImplementedError, match=r"line \d+: linalg.conv_2d is not supported"):
        torch_spyre.ktir.loads(add.replace("linalg.add ins", "linalg.conv_2d ins")).compiled()
    leaves = r"line 27: the access tile \[96, 0\] \+ \[1, 64\] leaves its view \[96, 64\] \(tile 24\)"
    with pytest.raises(ValueError, match=leaves):
        torch_spyre.ktir.loads(add.replace("%tile_rows = arith.constant 3", "%tile_rows = arith.constant 4")).compiled()
    with pytest.raises(ValueError, match="not closed|expected"):
        torch_spyre.ktir.loads(add[: add.rindex("}")]).compiled()
    k = kernel("add")
    a = torch.zeros(96, 64, dtype=torch.half, device="spyre")
    with pytest.raises(TypeError, match=r"argument %b is torch.float32; the kernel's views read it as f16"):
        k(a, torch.zeros(96, 64, device="spyre"), a)
    with pytest.raises(ValueError, match=r"argument %c holds 12160 bytes; the kernel reaches 12288"):
        k(a, a, torch.zeros(95, 64, dtype=torch.half, device="spyre"))
    with pytest.raises(TypeError, match="takes 3 tensors"):
        k(a, a)


def test_an_index_out_of_range_faults_the_launch_naming_the_core_and_instruction():
    code = f"""
import torch, torch_spyre
k = torch_spyre.ktir.load({str(EXAMPLES / "gather.mlir")!r})
idx = torch.zeros(256, dtype=torch.long)
idx[77] = 1000
out = torch.zeros(256, 64, device="spyre")
try:
    k(torch.randn(1000, 64).to("spyre"), idx.to("spyre"), out)
    torch.spyre.synchronize()
    print("no error")
except RuntimeError as e:
    print(str(e).replace(chr(10), " "))
# The card still works.
print((torch.ones(4, device="spyre") * 2).sum().item())
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    err, after = proc.stdout.strip().splitlines()[-2:]
    assert "ktir::embedding" in err and "core 9 at instruction" in err and "is GATHER" in err, err
    assert after == "8.0"
    # Under launch blocking the fault raises at the call, naming the KTIR line of the instruction.
    proc = run_python(code, env={"TORCH_SPYRE_LAUNCH_BLOCKING": "1"})
    assert proc.returncode == 0, proc.stderr
    err = proc.stdout.strip().splitlines()[-2]
    assert "KTIR line 32: %x = ktdp.load %rows" in err, err


# Every example under the sanitizer (its tile-to-tile transfers ordered by their barriers, no read
# of unwritten scratchpad-bound memory), traced, and timed against its roofline.
EXAMPLE_RUN = r"""
import json, sys, torch, torch_spyre
ex = sys.argv[1] if len(sys.argv) > 1 else None
root = __EXAMPLES__
cases = {
    "add": [torch.randn(96, 64).half(), torch.randn(96, 64).half(), torch.zeros(96, 64).half()],
    "matmul": [torch.randn(256, 256).half(), torch.randn(256, 512).half(), torch.zeros(256, 512)],
    "softmax": [torch.randn(64, 256), torch.zeros(64, 256)],
    "layernorm": [torch.randn(64, 128), torch.randn(128), torch.randn(128), torch.zeros(64, 128)],
    "ring_allreduce": [torch.randn(32, 128), torch.zeros(32, 128)],
    "gather": [torch.randn(1000, 64), torch.randint(0, 1000, (256,)), torch.zeros(256, 64)],
}
out = {}
for name, args in cases.items():
    k = torch_spyre.ktir.load(f"{root}/{name}.mlir")
    dev = [a.to("spyre") for a in args]
    torch.spyre.synchronize()
    c0 = torch_spyre.device_cycles()
    k(*dev)
    torch.spyre.synchronize()
    out[name] = {"cycles": torch_spyre.device_cycles() - c0, "roofline": k.roofline_cycles}
print(json.dumps(out))
""".replace("__EXAMPLES__", repr(str(EXAMPLES)))


def test_examples_run_sanitized_and_traced_and_no_faster_than_their_roofline(tmp_path):
    trace = tmp_path / "trace.json"
    proc = run_python(
        EXAMPLE_RUN, env={"SPYRE_SANITIZE": "memcheck,racecheck,initcheck", "SPYRE_TRACE": str(trace)}, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, f in figures.items():
        assert f["roofline"] > 0 and f["cycles"] >= f["roofline"], (name, f)
    names = {e.get("name") for e in json.loads(trace.read_text())["traceEvents"]}
    for name in ("add", "matmul", "softmax", "layer_norm", "ring_allreduce", "embedding"):
        assert any(n and n.startswith(f"ktir {name} grid") for n in names), (name, sorted(n for n in names if n)[:40])


# docs/debugging-guide.md, "From a wrong result to the faulty instruction": each step as written.
WALKTHROUGH = r"""
import json, re, sys, torch, torch_spyre, torch_spyre.debug
text = open(__SOFTMAX__).read()
step = sys.argv[1]
torch.manual_seed(0)
x, y = torch.randn(64, 256), torch.zeros(64, 256, device="spyre")
if step == "race":
    k = torch_spyre.ktir.loads(text.replace("%Y[%r0, %c0]", "%Y[%id, %c0]"))
    try:
        k(x.to("spyre"), y)
        torch.spyre.synchronize()
        print(json.dumps({"error": "", "close": torch.allclose(y.cpu(), torch.softmax(x, 1))}))
    except RuntimeError as e:
        print(json.dumps({"error": str(e)}))
else:
    k = torch_spyre.ktir.loads(text.replace("linalg.broadcast ins(%sum", "linalg.broadcast ins(%max"))
    core0 = k.listing.split("core 1:")[0]
    found = re.search(r"(\d+)  BINARY   f32 lx\[0x[0-9a-f]+\] = div\(lx\[0x[0-9a-f]+\], lx\[(0x[0-9a-f]+)\]\)", core0)
    n, divisor = int(found.group(1)), int(found.group(2), 16)
    xs = x.to("spyre")
    snap = torch_spyre.debug.break_at(lambda: k(xs, y), instruction=n)
    seen = snap.view(torch.float32, divisor, (2, 256))
    print(json.dumps({"max": torch.equal(seen, x[:2].max(1, keepdim=True).values.expand(2, 256)),
                      "line": "; line 51: %sums = linalg.broadcast ins(%max" in core0}))
""".replace("__SOFTMAX__", repr(str(EXAMPLES / "softmax.mlir")))


def test_walkthrough_the_sanitizer_names_the_racing_store_and_its_ktir_line():
    quiet = run_python(WALKTHROUGH.replace("step = sys.argv[1]", "step = 'race'"))
    assert quiet.returncode == 0, quiet.stderr
    assert json.loads(quiet.stdout.strip().splitlines()[-1]) == {"error": "", "close": False}
    env = {"SPYRE_SANITIZE": "memcheck,racecheck,initcheck", "TORCH_SPYRE_LAUNCH_BLOCKING": "1"}
    proc = run_python(WALKTHROUGH.replace("step = sys.argv[1]", "step = 'race'"), env=env)
    assert proc.returncode == 0, proc.stderr
    err = json.loads(proc.stdout.strip().splitlines()[-1])["error"]
    assert "race (a write of 2048 bytes" in err and "in ktir::softmax" in err and "is STORE" in err, err
    assert "KTIR line 58: ktdp.store %y, %yt" in err, err


def test_walkthrough_a_breakpoint_shows_the_wrong_divisor():
    proc = run_python(WALKTHROUGH.replace("step = sys.argv[1]", "step = 'divisor'"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"max": True, "line": True}


def test_gpu_printf_reaches_stderr_formatted_on_the_host_and_the_trace(tmp_path):
    """A device printf: gpu.printf in a KTIR kernel becomes PRINT; the runtime reads the records at
    the next wait and formats them with the program's messages; the trace shows each as a slice."""
    code = f"""
import torch, torch_spyre
text = open({str(EXAMPLES / "softmax.mlir")!r}).read()
text = text.replace("    %e_init = tensor.empty() : tensor<2x256xf32>", '''    %few = arith.cmpi ult, %id, %c2 : index
    scf.if %few {{
      gpu.printf "tile %d rows %d..: max %v\\\\n", %id, %r0, %max : index, index, tensor<2xf32>
    }}
    %e_init = tensor.empty() : tensor<2x256xf32>''')
k = torch_spyre.ktir.loads(text)
torch.manual_seed(0)
x = torch.randn(64, 256)
y = torch.zeros(64, 256, device="spyre")
k(x.to("spyre"), y)
torch.spyre.synchronize()
print([round(v, 6) for v in x[:4].max(1).values.tolist()])
"""
    trace = tmp_path / "trace.json"
    proc = run_python(code, env={"SPYRE_TRACE": str(trace)})
    assert proc.returncode == 0, proc.stderr
    maxes = json.loads(proc.stdout.strip().splitlines()[-1])
    lines = sorted(line for line in proc.stderr.splitlines() if line.startswith("tile "))
    assert len(lines) == 2, proc.stderr
    for tile, line in enumerate(lines):
        head, values = line.split(": max ")
        assert head == f"tile {tile} rows {2 * tile}.."
        assert [round(float(v), 6) for v in values.strip("[]").split(", ")] == maxes[2 * tile : 2 * tile + 2]
    slices = sorted(
        e["name"] for e in json.loads(trace.read_text())["traceEvents"] if e.get("name", "").startswith("print: ")
    )
    assert [s.split(": max")[0] for s in slices] == ["print: tile 0 rows 0..", "print: tile 1 rows 2.."]


def test_what_a_kernel_printed_before_it_faulted_is_shown():
    code = f"""
import torch, torch_spyre
text = open({str(EXAMPLES / "gather.mlir")!r}).read()
say = '    gpu.printf "tile %d gathers rows from %d\\\\n", %id, %first : index, index\\n'
text = text.replace("    %T = ktdp", say + "    %T = ktdp", 1)
k = torch_spyre.ktir.loads(text)
idx = torch.zeros(256, dtype=torch.long)
idx[77] = 1000
try:
    k(torch.randn(1000, 64).to("spyre"), idx.to("spyre"), torch.zeros(256, 64, device="spyre"))
    torch.spyre.synchronize()
    print("no error")
except RuntimeError as e:
    print("raised", "core 9 at instruction" in str(e))
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "raised True"
    printed = {line for line in proc.stderr.splitlines() if line.startswith("tile ")}
    assert "tile 9 gathers rows from 72" in printed and len(printed) == 32, proc.stderr


SCALE = """
#full = affine_map<(d0, d1) -> (d0, d1)>
#box = affine_set<(d0, d1) : (d0 >= 0, -d0 + 3 >= 0, d1 >= 0, -d1 + 15 >= 0)>
module {
  func.func @scale(%in: index, %out: index) attributes {grid = [1]} {
    %c0 = arith.constant 0 : index
    %two = arith.constant 2.0 : f32
    %three = arith.constant 3.0 : f32
    %X = ktdp.construct_memory_view %in, sizes: [4, 16], strides: [16, 1] {memory_space = #ktdp.memory_space<global>}
        : memref<4x16xf32>
    %Y = ktdp.construct_memory_view %out, sizes: [4, 16], strides: [16, 1] {memory_space = #ktdp.memory_space<global>}
        : memref<4x16xf32>
    %xt = ktdp.construct_access_tile %X[%c0, %c0] {access_tile_set = #box}
        : memref<4x16xf32> -> !ktdp.access_tile<4x16xindex>
    %x = ktdp.load %xt : !ktdp.access_tile<4x16xindex> -> tensor<4x16xf32>
    %e = tensor.empty() : tensor<4x16xf32>
    %y = linalg.generic {indexing_maps = [#full, #full], iterator_types = ["parallel", "parallel"]}
        ins(%x : tensor<4x16xf32>) outs(%e : tensor<4x16xf32>) {
      ^bb0(%v: f32, %o: f32):
        %p = math.powf %two, %three : f32
        %r = arith.mulf %v, %p : f32
        linalg.yield %r : f32
    } -> tensor<4x16xf32>
    %yt = ktdp.construct_access_tile %Y[%c0, %c0] {access_tile_set = #box}
        : memref<4x16xf32> -> !ktdp.access_tile<4x16xindex>
    ktdp.store %y, %yt : tensor<4x16xf32>, !ktdp.access_tile<4x16xindex>
    return
  }
}
"""


def test_a_generic_body_folds_constants_as_the_device_computes_them():
    # 2 ** 3 of two constants is folded at compile time; it once folded to min(2, 3).
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(6))
    _, y = run(torch_spyre.ktir.loads(SCALE), x, torch.zeros(4, 16))
    assert torch.equal(y, x * 8)
