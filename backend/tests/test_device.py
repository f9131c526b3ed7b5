"""Device discovery and selection: torch.spyre, torch.accelerator, autoload, bad indices."""

from __future__ import annotations

import json

import pytest
import torch
import torch_spyre
from conftest import card_share, run_python, run_script


def test_one_simulated_device_by_default():
    assert torch.spyre.is_available()
    assert torch.spyre.device_count() == 1
    assert torch.accelerator.device_count() == 1
    assert torch.accelerator.current_accelerator() == torch.device("spyre")
    assert torch.spyre.current_device() == 0


def test_device_info_reports_the_configured_chip():
    info = torch_spyre.device_info(0)
    assert info["cores"] == 32
    assert info["clock_mhz"] == 1500
    assert info["memory_bytes"] == card_share(112 << 30, 16)[0]
    assert info["lx_bytes"] == 2 * 2**20
    assert (info["vendor_id"], info["device_id"]) == (0x1014, 0x06A7)


def test_tensor_methods_generated_for_the_backend():
    x = torch.ones(3).spyre()
    assert x.is_spyre
    assert x.device == torch.device("spyre:0")
    assert not torch.ones(1).is_spyre


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.empty(3, device="spyre:7"),
        lambda: torch.ones(3).to("spyre:7"),
        lambda: torch.spyre.set_device(7),
    ],
    ids=["empty", "to", "set_device"],
)
def test_device_index_out_of_range_is_a_clear_error(make):
    with pytest.raises(IndexError, match=r"device index 7 is out of range \(1 spyre device"):
        make()
    # Nothing broke: the real device still works.
    assert torch.ones(2, device="spyre:0").cpu().sum().item() == 2


def test_device_context_restores_the_previous_device():
    with torch.spyre.device(0):
        assert torch.spyre.current_device() == 0
    with pytest.raises(ValueError, match="expected a spyre device"):
        torch.spyre.set_device("cpu")


def test_import_torch_alone_registers_spyre():
    # The torch.backends entry point loads torch_spyre during `import torch`.
    proc = run_python("import torch; x = torch.arange(4.0).to('spyre'); print(x.device, (x @ x).item())")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["spyre:0", "14.0"]


def test_import_torch_spyre_first():
    proc = run_python("import torch_spyre, torch; print(torch.ones(2).to('spyre').device)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "spyre:0"


def test_forked_child_drops_inherited_tensors_and_gets_a_clear_error():
    """A fork-based DataLoader worker inherits device tensors and drops them: that must not abort
    (the deleter once threw from a destructor). torch.spyre.init() tells the child at once that it
    cannot use the device, and so does any use. The parent's tensors are untouched."""
    code = (
        "import gc, os, torch\n"
        "x = torch.arange(4.0).to('spyre')\n"  # the device is running in the parent
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    del x\n"
        "    gc.collect()\n"
        "    for use in (torch.spyre.init, lambda: torch.ones(1).to('spyre')):\n"
        "        try:\n"
        "            use()\n"
        "            os._exit(3)\n"
        "        except RuntimeError as e:\n"
        "            if 'spawn' not in str(e) or not torch.spyre._is_in_bad_fork():\n"
        "                os._exit(4)\n"
        "    os._exit(0)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print(os.waitstatus_to_exitcode(status), torch.spyre._is_in_bad_fork(), (x * 2).cpu().tolist())\n"
    )
    proc = run_python(code, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[0] == "0 False [0.0, 2.0, 4.0, 6.0]"


def test_spawned_children_each_use_a_device(tmp_path):
    """torch.multiprocessing with the spawn method: each child starts its own card and computes on
    it while the parent's card is running."""
    script = tmp_path / "spawn_children.py"
    script.write_text("""
import torch
import torch.multiprocessing as mp

def work(rank, q):
    x = torch.arange(4.0, device="spyre") * (rank + 1)
    q.put((rank, x.sum().item(), str(x.device)))

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    torch.ones(1, device="spyre")
    children = [ctx.Process(target=work, args=(r, q)) for r in range(2)]
    for c in children:
        c.start()
    got = sorted(q.get(timeout=120) for _ in children)
    for c in children:
        c.join(60)
    print(got, [c.exitcode for c in children])
""")
    proc = run_script(script, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[(0, 6.0, 'spyre:0'), (1, 12.0, 'spyre:0')] [0, 0]"


def test_init_opens_the_device_and_is_initialized_says_so():
    proc = run_python(
        "import torch\n"
        "before = torch.spyre.is_initialized()\n"
        "torch.spyre.init()\n"
        "print(before, torch.spyre.is_initialized())\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True"]


def test_torch_spyre_shows_only_its_api():
    public = {name for name in dir(torch.spyre) if not name.startswith("_")}
    assert public == set(torch.spyre.__all__)


def test_device_capability_lists_the_dtypes_the_card_converts_among():
    """torch.accelerator.get_device_capability once raised. Its dtypes are the card's own, and a
    conversion between any two of them runs on the card (fallback set to error) as on CPU."""
    dtypes = torch.accelerator.get_device_capability("spyre:0")["supported_dtypes"]
    assert dtypes == {torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int8, torch.int64, torch.bool}
    host = torch.tensor([0.0, 1.0, -2.0, 3.5, 100.0])
    torch_spyre.set_cpu_fallback("error")
    for a in dtypes:
        for b in dtypes:
            src = host.to(a)
            torch.testing.assert_close(src.to("spyre").to(b).cpu(), src.to(b), msg=f"{a} -> {b}")


def test_backend_metadata_is_kept_and_saved(tmp_path):
    """torch._C._set_tensor_metadata was silently ignored (no backend-meta hooks). The flags now stay
    with the tensor, follow detach(), and survive torch.save and torch.load."""
    x = torch.arange(4.0).to("spyre")
    assert torch._C._get_tensor_metadata(x) == {}
    flags = {"calibrated": True, "stale": False}
    torch._C._set_tensor_metadata(x, flags)
    assert torch._C._get_tensor_metadata(x) == flags
    assert torch._C._get_tensor_metadata(x.detach()) == flags
    torch.save(x, tmp_path / "x.pt")
    back = torch.load(tmp_path / "x.pt")
    assert back.device == x.device and back.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert torch._C._get_tensor_metadata(back) == flags


def test_backend_metadata_follows_views_device_copies_and_compile():
    x = torch.arange(8.0).to("spyre")
    flags = {"calibrated": True}
    torch._C._set_tensor_metadata(x, flags)
    derived = {
        "view": x.view(2, 4),
        "slice": x[2:],
        "transpose": x.view(2, 4).t(),
        "clone": x.clone(),
        "dtype copy": x.half(),
        "compiled alias": torch.compile(lambda t: t.detach(), backend="aot_eager")(x),
    }
    for what, t in derived.items():
        assert torch._C._get_tensor_metadata(t) == flags, what
    own = torch.zeros(8).to("spyre")
    torch._C._set_tensor_metadata(own, {"other": True})
    own.copy_(x)  # a destination keeps its own
    assert torch._C._get_tensor_metadata(own) == {"other": True}
    assert torch._C._get_tensor_metadata(x + 1) == {}  # a computed result is new data


def test_two_devices_from_the_config(tmp_path):
    config = tmp_path / "two.json"
    config.write_text('{"sim": {"devices": 2}}')
    code = (
        "import torch\n"
        "a = torch.arange(6.0).reshape(2, 3)\n"
        "x, y = a.to('spyre:0'), a.to('spyre:1')\n"
        "print(torch.spyre.device_count(), y.device, (y @ y.T).cpu().sum().item(), x.to('spyre:1').device)\n"
    )
    proc = run_python(code, env={"SPYRE_CONFIG": str(config)})
    assert proc.returncode == 0, proc.stderr
    a = torch.arange(6.0).reshape(2, 3)
    assert proc.stdout.split() == ["2", "spyre:1", str((a @ a.T).sum().item()), "spyre:1"]


def test_a_data_pointer_names_its_device(tmp_path):
    """Each card's memory appears at its own range of data pointers: the first tensors of two cards
    no longer share a pointer, and torch.save keeps a float tensor on one and an int tensor on the
    other apart (it once refused them as one storage viewed as two types)."""
    config = tmp_path / "two.json"
    config.write_text('{"sim": {"devices": 2}}')
    path = tmp_path / "both.pt"
    code = (
        "import torch\n"
        "x = torch.arange(4.0).to('spyre:0')\n"
        "y = torch.arange(4).to('spyre:1')\n"
        "assert x.data_ptr() != y.data_ptr()\n"
        "assert torch.empty(0).new_empty(1, device='spyre:1').data_ptr() >> 40 == 2\n"
        f"torch.save({{'x': x, 'y': y}}, {str(path)!r})\n"
        f"back = torch.load({str(path)!r})\n"
        "print(back['x'].device, back['x'].tolist(), back['y'].device, back['y'].tolist())\n"
    )
    proc = run_python(code, env={"SPYRE_CONFIG": str(config)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "spyre:0 [0.0, 1.0, 2.0, 3.0] spyre:1 [0, 1, 2, 3]"


def test_bad_config_names_the_key(tmp_path):
    config = tmp_path / "bad.json"
    config.write_text('{"chip": {"corse": 8}}')
    proc = run_python(
        "import torch; print(torch.spyre.device_count()); torch.ones(1).to('spyre')", env={"SPYRE_CONFIG": str(config)}
    )
    assert proc.returncode != 0
    assert "unknown key 'chip.corse'" in proc.stderr


@pytest.mark.parametrize(
    "shape,dtype",
    [((3, 4), torch.float32), ((2000,), torch.float32), ((2, 3), torch.float16), ((), torch.float32),
     ((4,), torch.int64), ((3,), torch.bool)],
)  # fmt: skip
def test_printing_matches_cpu_without_the_fallback(shape, dtype, cpu_gen):
    x = (torch.randn(shape, generator=cpu_gen) * 3).to(dtype)
    torch_spyre.set_cpu_fallback("error")  # torch formats in float64, which the card lacks
    got = " ".join(repr(x.to("spyre")).split())
    assert ", device='spyre:0'" in got
    assert got.replace(", device='spyre:0'", "") == " ".join(repr(x).split())


def test_copies_between_cards_go_card_to_card_by_dma(tmp_path):
    """A copy from spyre:0 to spyre:1 is card 0's DMA writing card 1's memory across PCIe: card 0
    moves the bytes out, card 1 takes none in from the host, and every layout and dtype arrives
    right (checked against CPU torch)."""
    config = tmp_path / "two.json"
    config.write_text('{"sim": {"devices": 2}, "chip": {"fp16_format": "ieee"}}')
    stats = tmp_path / "stats.json"
    code = (
        "import json, torch, torch_spyre\n"
        "g = torch.Generator().manual_seed(0)\n"
        "a = torch.randn(1024, 1024, generator=g)\n"
        "x = a.to('spyre:0'); torch.spyre.synchronize(0)\n"
        "_, stats0 = torch_spyre.write_reports()\n"
        "before = json.load(open(stats0))['cards']\n"
        "c0 = torch_spyre.device_cycles(0)\n"
        "y = x.to('spyre:1')\n"
        "cycles = torch_spyre.device_cycles(0) - c0\n"
        "_, stats1 = torch_spyre.write_reports()\n"
        "after = json.load(open(stats1))['cards']\n"
        "assert y.device == torch.device('spyre:1') and torch.equal(y.cpu(), a)\n"
        "moved = [after[i]['bytes'][k] - before[i]['bytes'][k] for i in (0, 1) for k in ('d2h', 'h2d')]\n"
        "print(*moved, cycles)\n"
        # Other layouts and dtypes, and back the other way.
        "z = torch.empty(1024, 1024, device='spyre:1', dtype=torch.float16)\n"
        "z.copy_(x.t())\n"
        "assert torch.equal(z.cpu(), a.t().half())\n"
        "w = torch.empty(4, 1024, device='spyre:0')\n"
        "w.copy_(y[7])\n"
        "assert torch.equal(w.cpu(), a[7].expand(4, 1024))\n"
        "assert torch.equal(y[::2, 3:].to('spyre:0').cpu(), a[::2, 3:])\n"
    )
    proc = run_python(code, env={"SPYRE_CONFIG": str(config), "SPYRE_STATS": str(stats)})
    assert proc.returncode == 0, proc.stderr
    out_of_0, into_0, out_of_1, into_1, cycles = (int(v) for v in proc.stdout.split())
    n = 1024 * 1024 * 4
    assert out_of_0 == n  # card 0's DMA wrote the tensor out across the link...
    assert into_1 < n // 100 and out_of_1 == 0 and into_0 < n // 100  # ...and no host staged it
    # At the modelled link rate (64 GB/s at 1500 MHz), plus little.
    assert n / 64e9 * 1500e6 <= cycles <= 1.2 * n / 64e9 * 1500e6 + 20000


def test_device_properties_are_the_configured_card():
    # The default config (docs/architect-guide.md) with the test session's IEEE fp16 override.
    p = torch.spyre.get_device_properties(0)
    memory, queues = card_share(112 << 30, 16)
    assert p.total_memory == memory
    assert (p.multi_processor_count, p.clock_rate_mhz, p.scratchpad_bytes, p.queues) == (32, 1500, 2 << 20, queues)
    assert p.fp16_format == "ieee"
    assert torch.spyre.get_device_name() == p.name == "IBM Spyre (simulated)"
    assert torch.spyre.get_device_capability()["supported_dtypes"] >= {torch.float32, torch.float16, torch.bfloat16}
    assert torch.float64 not in torch.spyre.get_device_capability()["supported_dtypes"]


def test_the_compile_target_is_the_configured_card(tmp_path):
    """The PT arrays, scratchpad, ring and memory of the config reach the device's properties, the
    compiler's target and the compile cache's key (once, programs were planned for the default
    card whatever the config said)."""
    config = tmp_path / "card.json"
    config.write_text(
        '{"chip": {"pt_rows": 16, "pt_cols": 4, "pt_simd": 4, "corelets_per_core": 3, "lx_bytes": 4194304,'
        ' "fp32_rate": 0.5, "sfp_lanes": 32, "lx_read_bytes_per_cycle": 256, "clock_mhz": 1000},'
        ' "ring": {"bytes_per_cycle": 16}, "memory": {"bandwidth_gbps": 102.4, "controllers": 2}}'
    )
    code = (
        "import json, torch\n"
        "from torch_spyre import _C\n"
        "from torch_spyre._compile import cache\n"
        "p = torch.spyre.get_device_properties(0)\n"
        "print(json.dumps([p.corelets, list(p.pt_array), p.sfp_lanes, p.ring_bytes_per_cycle,"
        " p.memory_bandwidth_gbps, p.scratchpad_bytes, p.clock_rate_mhz]))\n"
        "print(json.dumps(_C._compile_target(0)))\n"
        "print(cache._target(0))\n"
    )
    proc = run_python(code, env={"SPYRE_CONFIG": str(config)})
    assert proc.returncode == 0, proc.stderr
    props, target, key = proc.stdout.splitlines()
    assert json.loads(props) == [3, [16, 4, 4], 32, 16, 102.4, 4 << 20, 1000]
    t = json.loads(target)
    assert {k: t[k] for k in ("pt_rows", "pt_cols", "pt_simd", "corelets", "lx_bytes", "fp32_rate", "sfp_lanes")} == {
        "pt_rows": 16,
        "pt_cols": 4,
        "pt_simd": 4,
        "corelets": 3,
        "lx_bytes": 4 << 20,
        "fp32_rate": 0.5,
        "sfp_lanes": 32,
    }
    ring, controllers = t["ring_bytes_per_cycle"], t["memory_controllers"]
    assert (ring, controllers, t["memory_mbps"], t["clock_mhz"]) == (16, 2, 102400, 1000)
    assert t["pt_macs_per_cycle"] == 3 * 16 * 4 * 4
    # Loads into the cores: the slower of memory (102.4 GB/s at 1 GHz) and the ring (2 controllers'
    # two outgoing links of 16 bytes).
    assert t["load_bytes_per_cycle"] == pytest.approx(min(102.4, 16 * 4))
    from torch_spyre._compile import cache

    assert key != cache._target(0)  # this process's default card plans other programs
