"""torch.accelerator.Graph on spyre: capture records kernels and device copies without running
them, replay runs them again on the card with the inputs' current values (checked against CPU)."""

import pytest
import torch


def warm(fn):
    fn()  # compile and load the programs, so capture records launches and not first-use work
    torch.spyre.synchronize()


def test_capture_records_without_running_and_replay_runs_again():
    x = torch.zeros(2000, device="spyre")
    w = torch.randn(64, 48)
    a = torch.randn(32, 64)
    dw, da = w.to("spyre"), a.to("spyre")
    warm(lambda: (x.add_(1), (da @ dw).relu(), da.clone()))
    x.zero_()
    graph = torch.accelerator.Graph()
    with torch.spyre.Stream(), graph:
        x.add_(1)
        y = (da @ dw).relu()
        kept = da.clone()  # a device-to-device copy
    assert x.cpu().sum().item() == 0  # captured, not run
    for _ in range(3):
        graph.replay()
    torch.spyre.synchronize()
    assert torch.equal(x.cpu(), torch.full((2000,), 3.0))
    torch.testing.assert_close(y.cpu(), (a @ w).relu(), rtol=1e-4, atol=1e-4)
    # A replay reads the inputs as they are now, and writes the same output tensors.
    b = torch.randn(32, 64)
    da.copy_(b)
    graph.replay()
    torch.spyre.synchronize()
    torch.testing.assert_close(y.cpu(), (b @ w).relu(), rtol=1e-4, atol=1e-4)
    assert torch.equal(kept.cpu(), b)
    assert graph.pool() != (0, 0)


def test_what_cannot_be_captured_raises_and_capture_ends_cleanly():
    x = torch.ones(16, device="spyre")
    warm(lambda: x.mul_(2))
    x.fill_(1)
    for bad in (
        lambda: x.cpu(),
        lambda: x.copy_(torch.ones(16)),
        torch.spyre.synchronize,
        lambda: torch.spyre.Event().record(),  # its signal would run once, at capture
        lambda: torch.spyre.current_stream().wait_stream(torch.spyre.default_stream()),
    ):
        graph = torch.accelerator.Graph()
        with pytest.raises(RuntimeError, match="captur"):
            with torch.spyre.Stream(), graph:
                x.mul_(2)
                bad()
    # The streams are usable again, and nothing captured ran.
    torch.spyre.synchronize()
    assert torch.equal(x.cpu(), torch.ones(16))


def test_debug_dump_names_the_programs_and_reset_gives_the_memory_back(tmp_path):
    a = torch.randn(128, 128, device="spyre")
    warm(lambda: a @ a)
    before = torch.spyre.memory_reserved()
    graph = torch.accelerator.Graph()
    with torch.spyre.Stream(), graph:
        b = a @ a
    assert torch.spyre.memory_reserved() > before  # b lives in the graph's pool
    path = tmp_path / "graph.txt"
    graph.debug_dump(str(path))
    text = path.read_text()
    assert "1 commands" in text and "launch mm f32 128x128x128" in text
    del b
    graph.reset()
    assert torch.spyre.memory_reserved() == before


def test_host_cache_calls_work_with_pinned_memory():
    """torch.accelerator.empty_host_cache crashed (no host allocator was registered); the pinned
    allocator now is one, and counts what it maps."""
    torch.ones(1, device="spyre")
    pinned = torch.ones(1 << 16).pin_memory()
    assert pinned.is_pinned()
    torch.accelerator.empty_host_cache()
    assert torch.equal(pinned.to("spyre").cpu(), torch.ones(1 << 16))
