"""The differential fuzzer of tensor programs (fuzz/tensor_programs.py) as a test: random programs
of ordinary tensor ops run on spyre and on CPU, every value compared after every line. The default
run takes one fixed seed (the same programs every run, so a red run is a real regression and
replays); --slow takes several seeds and more programs. A finding prints as a minimised program.
A long offline run takes any seed: `.venv/bin/python fuzz/tensor_programs.py --programs 5000 --seed N`.
"""

import sys

import pytest
from conftest import ROOT

DEFAULT = [(1, 300)]
SLOW = [(seed, 1000) for seed in range(1, 6)]


def _runs(slow: bool) -> list:
    return SLOW if slow else DEFAULT


def pytest_generate_tests(metafunc):
    if "seed_programs" in metafunc.fixturenames:
        runs = _runs(metafunc.config.getoption("--slow"))
        metafunc.parametrize("seed_programs", runs, ids=[f"seed{s}x{n}" for s, n in runs])


@pytest.mark.parametrize("mode", ["allow", "error"])
def test_random_tensor_programs_give_cpus_answers(seed_programs, mode):
    """allow: every answer is CPU's. error: with the fallback forbidden, a program that needs it
    raises a clear error and nothing else differs (a needed fallback is not a finding)."""
    import subprocess

    seed, programs = seed_programs
    argv = [sys.executable, str(ROOT / "fuzz" / "tensor_programs.py"), "--seed", str(seed)]
    argv += ["--programs", str(programs), "--mode", mode]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=1800, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-2000:]


def test_random_tensor_programs_through_torch_compile_give_cpus_answers(request):
    """The same programs with every line through torch.compile: the spyre backend against AOTAutograd
    over CPU's kernels (tensor_programs_run.through_compile). Found the compiled path answering
    where CPU refuses the types (round of bool, lerp of integers). The default run takes 40
    programs of seed 1, --slow 400 of seed 2."""
    import subprocess

    seed, count = (2, 400) if request.config.getoption("--slow") else (1, 40)
    argv = [sys.executable, str(ROOT / "fuzz" / "tensor_programs.py"), "--seed", str(seed)]
    argv += ["--programs", str(count), "--front-door", "compile"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=3600, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-2000:]


def test_a_line_this_host_cannot_allocate_is_not_kept():
    """Seed 500 program 11288 drew a 172 GB tensor: CPU cannot allocate it on a 24 GB host while the
    card's sparse memory may, so the line tests the host, not the op, and the generator drops it."""
    import torch

    sys.path.insert(0, str(ROOT / "fuzz"))
    import tensor_programs_gen

    env = {"torch": torch, "dev": "cpu"}
    for line in tensor_programs_gen.program(500, 11288):
        try:
            exec(line, env)  # noqa: S102 - the fuzzer's own generated program
        except Exception as e:  # noqa: BLE001 - refusals are fine, running out of host memory is not
            assert not tensor_programs_gen._host_out_of_memory(e), line


def test_host_copies_for_a_replay_keep_views_aliased():
    """A replay of a line that writes through a view (out=v7, v7 = v2.view(-1)) on CPU must see the
    write in the base too: the copies share memory as the originals did (seed 901 program 47755)."""
    import torch

    sys.path.insert(0, str(ROOT / "fuzz"))
    import tensor_programs_run

    base = torch.arange(6.0, device="spyre").view(2, 3)
    copies = tensor_programs_run._small_tensors({"v2": base, "v7": base.view(-1)[1:], "v9": base.conj()})
    assert all(t.device.type == "cpu" for t in copies.values())
    copies["v7"].fill_(-1.0)
    assert copies["v2"].tolist() == [[0.0, -1.0, -1.0], [-1.0, -1.0, -1.0]]
    assert base.cpu().tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]  # the originals are untouched


def test_a_line_larger_than_the_host_fails_in_its_worker_instead_of_exhausting_the_host():
    """Seed 101 program 185 takes an index_select of an unfold: 49 GB on the CPU reference. The
    kernel granted it and its OOM killer then ended the worker (or another process). Each worker's
    address space is now bounded by half the host's memory, so the allocation fails as an error on
    both sides and the program compares like any other."""
    import subprocess

    sys.path.insert(0, str(ROOT / "fuzz"))
    import tensor_programs

    worker = tensor_programs.Worker("allow")
    try:
        assert worker.ask({"lines": ["v0 = torch.zeros(3, device=dev)"]}) is not None  # it has started
        with open(f"/proc/{worker.p.pid}/limits") as f:
            limit = next(line.split()[3] for line in f if line.startswith("Max address space"))
    finally:
        worker.close()
    assert int(limit) == tensor_programs.WORKER_ADDRESS_SPACE
    argv = [sys.executable, str(ROOT / "fuzz" / "tensor_programs.py"), "--seed", "101", "--programs", "186"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0 and "0 crashes" in p.stdout, p.stdout[-3000:] + p.stderr[-2000:]
