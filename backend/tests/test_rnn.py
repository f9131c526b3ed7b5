"""Recurrent layers on the device (torch's fused LSTM and GRU cells), and moving modules there."""

from __future__ import annotations

import copy

import pytest
import torch
import torch_spyre
from conftest import run_python

LAYERS = [
    ("lstm 2 layers, batch first", lambda: torch.nn.LSTM(8, 16, num_layers=2, batch_first=True), (3, 5, 8), None),
    ("lstm bidirectional, no bias", lambda: torch.nn.LSTM(8, 12, bidirectional=True, bias=False), (5, 3, 8), None),
    ("gru 2 layers, bidirectional", lambda: torch.nn.GRU(8, 16, num_layers=2, bidirectional=True), (5, 3, 8), None),
    ("gru no bias", lambda: torch.nn.GRU(8, 10, bias=False, batch_first=True), (2, 7, 8), None),
    ("lstm cell", lambda: torch.nn.LSTMCell(8, 16), (3, 8), "lstm"),
    ("gru cell", lambda: torch.nn.GRUCell(8, 16), (3, 8), "gru"),
    ("gru cell, no bias", lambda: torch.nn.GRUCell(8, 5, bias=False), (4, 8), "gru"),
]


def flat(out) -> list[torch.Tensor]:
    """The tensors of a layer's output: a tensor, or a tuple of tensors and tuples of tensors."""
    parts = out if isinstance(out, tuple) else (out,)
    return [t for part in parts for t in (part if isinstance(part, tuple) else (part,))]


@pytest.mark.parametrize("name,make,shape,state", LAYERS, ids=[row[0] for row in LAYERS])
def test_recurrent_layers_match_cpu_forward_and_backward(name, make, shape, state, cpu_gen):
    torch.manual_seed(0)
    cpu = make()
    dev = copy.deepcopy(cpu).to("spyre")
    x = torch.randn(*shape, generator=cpu_gen, requires_grad=True)
    xd = x.detach().to("spyre").requires_grad_()
    args, dargs = (x,), (xd,)
    if state is not None:  # a cell given its state, not starting from zeros
        hidden = cpu.hidden_size
        h = torch.randn(shape[0], hidden, generator=cpu_gen)
        if state == "lstm":
            c = torch.randn(shape[0], hidden, generator=cpu_gen)
            args, dargs = (x, (h, c)), (xd, (h.to("spyre"), c.to("spyre")))
        else:
            args, dargs = (x, h), (xd, h.to("spyre"))
    torch_spyre.set_cpu_fallback("error")
    want, got = cpu(*args), dev(*dargs)
    for w, g in zip(flat(want), flat(got), strict=True):
        torch.testing.assert_close(g.cpu(), w, rtol=1e-4, atol=1e-5)
    # A loss over every output, so that the gradients reach the cell state path too.
    sum(w.pow(2).sum() for w in flat(want)).backward()
    sum(g.pow(2).sum() for g in flat(got)).backward()
    torch.testing.assert_close(xd.grad.cpu(), x.grad, rtol=1e-4, atol=1e-5)
    for (pname, p), (_, q) in zip(cpu.named_parameters(), dev.named_parameters(), strict=True):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5, msg=pname)


def test_lstm_trains_like_cpu(cpu_gen):
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.LSTM(6, 12, batch_first=True))
    head = torch.nn.Linear(12, 3)
    models = {"cpu": (cpu, head), "spyre": (copy.deepcopy(cpu).to("spyre"), copy.deepcopy(head).to("spyre"))}
    batches = [
        (torch.randn(4, 9, 6, generator=cpu_gen), torch.randint(0, 3, (4,), generator=cpu_gen)) for _ in range(5)
    ]
    torch_spyre.set_cpu_fallback("error")
    losses = {}
    for device, (rnn, lin) in models.items():
        opt = torch.optim.AdamW([*rnn.parameters(), *lin.parameters()], lr=1e-2)
        losses[device] = []
        for x, y in batches:
            out, _ = rnn[0](x.to(device))
            loss = torch.nn.functional.cross_entropy(lin(out[:, -1]), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses[device].append(loss.item())
    torch.testing.assert_close(torch.tensor(losses["spyre"]), torch.tensor(losses["cpu"]), rtol=1e-4, atol=1e-4)


def test_bfloat16_lstm_cell_is_close_to_cpu_fp32(cpu_gen):
    cell = torch.nn.LSTMCell(8, 16)
    x = torch.randn(3, 8, generator=cpu_gen)
    want = cell(x)
    got = copy.deepcopy(cell).to("spyre", torch.bfloat16)(x.to("spyre", torch.bfloat16))
    for w, g in zip(want, got, strict=True):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g.float().cpu(), w, rtol=3e-2, atol=3e-2)


def test_modules_move_while_a_cpu_graph_holds_their_parameters(cpu_gen):
    """Computing a CPU reference, keeping it, then moving the model: a common test pattern."""
    lstm, lin = torch.nn.LSTM(4, 8), torch.nn.Linear(4, 8)
    x = torch.randn(2, 3, 4, generator=cpu_gen)
    ref_lstm, ref_lin = lstm(x)[0], lin(x)  # their autograd graphs hold the parameters
    lstm.to("spyre")
    lin.to("spyre")
    torch.testing.assert_close(lstm(x.to("spyre"))[0].cpu(), ref_lstm, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(lin(x.to("spyre")).cpu(), ref_lin, rtol=1e-4, atol=1e-5)
    # and torch's own conversions between CPU types are untouched by the spyre package
    cpu_lstm = torch.nn.LSTM(4, 8)
    kept = cpu_lstm(x)[0]
    weight = cpu_lstm.weight_ih_l0
    cpu_lstm.double()
    assert cpu_lstm.weight_ih_l0 is weight and weight.dtype == torch.float64
    assert kept.dtype == torch.float32


def test_tied_parameters_stay_tied_and_unrelated_ones_apart():
    emb = torch.nn.Embedding(10, 4)
    head = torch.nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    other = torch.nn.Linear(4, 10, bias=False)
    model = torch.nn.ModuleDict({"emb": emb, "head": head, "other": other}).to("spyre")
    assert model["head"].weight is model["emb"].weight
    assert model["other"].weight is not model["emb"].weight
    assert model["emb"].weight.device.type == "spyre"
    assert len(list(model.parameters())) == 2


def test_a_script_that_ends_right_after_backward_exits_cleanly():
    # Without the exit drain (torch_spyre/_exit.py) about one run in six aborted at exit.
    code = "import torch\nm = torch.nn.Linear(8, 4).to('spyre')\nm(torch.randn(3, 8).to('spyre')).sum().backward()\n"
    for _ in range(6):
        proc = run_python(code)
        assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_process_that_never_uses_the_card_does_not_start_it_at_exit():
    proc = run_python(
        "import torch\nx = torch.ones(3, requires_grad=True)\nx.sum().backward()\n", env={"SPYRE_LOG_LEVEL": "info"}
    )
    assert proc.returncode == 0, proc.stderr
    # (The autograd engine counts the devices of every backend, which starts the simulator; the
    # exit handler must not also open a card, allocate on it and run a backward there.)
    assert "opened" not in proc.stderr, proc.stderr
