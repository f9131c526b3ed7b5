"""A user's own suite, run on the spyre device with torch_spyre's pytest plugin:

    pytest examples/pytest_plugin --spyre                     # the fallback report at the end
    pytest examples/pytest_plugin --spyre-fallback=error      # a test that falls back fails
    pytest examples/pytest_plugin --spyre -n 2                # pytest-xdist: a card per worker
    pytest examples/pytest_plugin --spyre --junitxml=out.xml  # device cycles, launches per test

(backend/tests/test_pytest_plugin.py runs these.)
"""

import torch


def test_a_linear_layer_matches_the_cpu(spyre_device):
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 8)
    x = torch.randn(4, 16)
    got = layer.to(spyre_device)(x.to(spyre_device)).cpu()
    torch.testing.assert_close(got, layer.cpu()(x), rtol=1e-4, atol=1e-4)


def test_poisson_samples_are_counts(spyre_device):
    # torch.poisson has no spyre kernel: it runs on the CPU, and the plugin reports it.
    rates = torch.full((64,), 3.0, device=spyre_device)
    samples = torch.poisson(rates)
    assert samples.device == rates.device
    assert bool((samples >= 0).all()) and bool((samples == samples.round()).all())
