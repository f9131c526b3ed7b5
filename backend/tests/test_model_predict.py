"""`spyre-sim model` and spyre_arch.model: a HuggingFace LLM's inference on the card without weights.

The weightless run in timing mode is held to the timed simulator with the model's own weights
(same cycles), its roofline to the model's own parameter count and an analytical formula, and its
figures to what a config change must do to them. The full-size runs (Llama-3-8B, Mixtral-8x7B)
are a benchmark (benchmarks/model_predict.py), not a test: each takes minutes.
"""

from __future__ import annotations

import json
import math
import subprocess

import pytest
from conftest import ROOT
from spyre_arch import model, model_roofline
from spyre_arch.model_configs import LLAMA3_8B, LLAMA3_70B
from spyre_arch.stats import load_json

SPYRE_SIM = ROOT / "build" / "tools" / "spyre_sim" / "spyre-sim"

# Llama-3's and Mixtral's shapes, shrunk: two layers of width 256, grouped-query attention.
SMALL_LLAMA = {
    "model_type": "llama",
    "vocab_size": 512,
    "hidden_size": 256,
    "intermediate_size": 704,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
}
SMALL_MIXTRAL = {**SMALL_LLAMA, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2}


@pytest.mark.parametrize("config", [SMALL_LLAMA, SMALL_MIXTRAL], ids=["llama", "mixtral"])
def test_the_weightless_prediction_takes_the_cycles_of_the_timed_run_with_weights(config):
    kwargs = {"prefill": 24, "decode": 3, "batch": 2}
    predicted = model.predict(config, **kwargs)
    timed = model.predict(config, mode="timed", weights="random", **kwargs)
    p, t = predicted["phases"], timed["phases"]
    # The prompt's tokens are the same in both: the prefill is the same work. The timed run uploads
    # its weights first, so it starts at another cycle, which may move a transfer by a cycle.
    one_cycle = 1 / (predicted["card"]["clock_mhz"] * 1e6)
    assert p["prefill"]["seconds"] == pytest.approx(t["prefill"]["seconds"], abs=4 * one_cycle)
    for kind, row in t["prefill"]["kinds"].items():
        assert p["prefill"]["kinds"][kind]["seconds"] == pytest.approx(row["seconds"], abs=4 * one_cycle), kind
    # Decode feeds back each step's argmax: the timed run's tokens are real, the prediction's are
    # token 0, so only the embedding rows gathered (their addresses) differ.
    assert p["decode"]["seconds"] == pytest.approx(t["decode"]["seconds"], rel=0.01)
    assert predicted["launches"] == timed["launches"]
    assert predicted["memory"] == timed["memory"]


def test_the_roofline_counts_the_weights_the_model_has():
    # The roofline's shape (from the config's numbers) against the model HuggingFace builds.
    result = model.predict(LLAMA3_8B | {"num_hidden_layers": 1}, prefill=8, decode=1)
    shape = model_roofline.Shape.from_config(LLAMA3_8B | {"num_hidden_layers": 1})
    norms = (2 * shape.layers + 1) * shape.hidden
    embedding_and_head = 2 * shape.vocab * shape.hidden
    counted = shape.layers * (shape.attention_weights() + 3 * shape.hidden * shape.intermediate)
    assert result["parameters"] == counted + embedding_and_head + norms
    # A decode step reads every layer's weights and the head once: its compulsory bytes, by hand.
    step = model_roofline.decode_step(shape, batch=1, context=8)
    kv = 2 * 1 * 8 * 128 * 2  # keys and values of one layer, 8 KV heads of 128, bf16, per token
    assert step.total_bytes() == 2 * (counted + shape.vocab * shape.hidden) + 9 * kv + 4096 * 2


def test_a_prefill_roofline_is_twice_the_weights_per_token_plus_causal_attention():
    shape = model_roofline.Shape.from_config(LLAMA3_8B)
    n, batch = 2048, 2
    work = model_roofline.prefill(shape, batch, n)
    linear = shape.layers * (shape.attention_weights() + 3 * shape.hidden * shape.intermediate)
    attention = shape.layers * 4 * batch * shape.heads * shape.head_dim * n * (n + 1) / 2
    head = 2 * batch * shape.hidden * shape.vocab  # the last token's logits only
    assert work.total_flops() == pytest.approx(2 * batch * n * linear + attention + head, rel=1e-12)
    # At 98.3 TFLOP/s and 204.8 GB/s a 2 x 2048 prefill of an 8B model is compute-bound.
    bound = model_roofline.bound(work, 98.304e12, 204.8e9)
    assert bound["limit"] == "compute" and bound["seconds"] == bound["compute_seconds"]


def test_a_model_too_large_for_the_card_is_refused_with_both_sizes():
    with pytest.raises(model.ModelError) as refusal:
        model.predict(LLAMA3_70B, prefill=2048, decode=128)
    message = str(refusal.value)
    assert "141.1" in message  # GB of weights (70.6 B parameters in bf16)
    assert "120.26 GB" in message and "memory.usable_bytes" in message
    # By its built-in name, from the command line: exit status 1 and the same message.
    cli = subprocess.run(
        [str(SPYRE_SIM), "model", "llama3-70b", "--prefill", "16", "--decode", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cli.returncode == 1 and "141.1" in cli.stderr and "120.26 GB" in cli.stderr


def test_memory_bandwidth_moves_decode_and_not_a_compute_bound_prefill(tmp_path):
    kwargs = {"prefill": 512, "decode": 2, "batch": 1}
    config = LLAMA3_8B | {"num_hidden_layers": 1, "vocab_size": 4096}
    base = model.predict(config, **kwargs)
    fast = model.predict(config, card={"memory": {"bandwidth_gbps": 409.6}}, **kwargs)
    assert fast["card"]["memory_bandwidth_gbps"] == 409.6
    # Decode of one token reads every weight: memory-bound, so twice the bandwidth nearly halves it.
    assert base["phases"]["decode"]["roofline"]["limit"] == "memory"
    assert fast["figures"]["decode_latency_s"] < 0.6 * base["figures"]["decode_latency_s"]
    assert fast["figures"]["decode_tokens_per_s"] > 1.6 * base["figures"]["decode_tokens_per_s"]
    # The decode step is never faster than its roofline.
    for r in (base, fast):
        assert r["phases"]["decode"]["over_roofline"] >= 1.0
        assert r["phases"]["prefill"]["over_roofline"] >= 1.0


def test_spyre_sim_model_prints_the_figures_and_writes_stats(tmp_path):
    source = tmp_path / "config.json"
    source.write_text(json.dumps(SMALL_MIXTRAL))
    stats = tmp_path / "stats_{batch}.json"
    cmd = [str(SPYRE_SIM), "model", str(source), "--prefill", "16", "--decode", "2", "--batch", "1", "3"]
    text = subprocess.run([*cmd, "--stats", str(stats)], capture_output=True, text=True, timeout=600, check=False)
    assert text.returncode == 0, text.stderr
    assert text.stdout.count("mixtral: ") == 2 and "first token" in text.stdout and "tokens/s" in text.stdout
    assert "moe" in text.stdout and "attention" in text.stdout
    for batch in (1, 3):
        written = load_json(tmp_path / f"stats_{batch}.json")
        assert written["config"]["sim"]["mode"] == "timing"
    js = subprocess.run([*cmd[:-1], "--json", "--set", "chip.cores=16"], capture_output=True, text=True, timeout=600)
    assert js.returncode == 0, js.stderr
    result = json.loads(js.stdout)
    assert result["card"]["cores"] == 16 and result["workload"] == {"prefill": 16, "decode": 2, "batch": 1}
    fig = result["figures"]
    assert fig["decode_tokens_per_s"] == pytest.approx(1 / fig["decode_latency_s"])
    assert math.isclose(
        fig["tokens_per_s"], 2 / (fig["time_to_first_token_s"] + 2 * fig["decode_latency_s"]), rel_tol=1e-9
    )
    # Each step's stall shares are fractions of the kind's core cycles.
    for row in result["phases"]["prefill"]["kinds"].values():
        if row.get("stall"):
            assert sum(row["stall"].values()) == pytest.approx(1.0)


def test_spyre_sim_model_says_what_is_wrong():
    missing = subprocess.run(
        [str(SPYRE_SIM), "model", "no/such/model-id", "--prefill", "4", "--decode", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert missing.returncode == 1 and "no config for 'no/such/model-id'" in missing.stderr
    with pytest.raises(model.ModelError, match="prefill must be an integer of at least 1"):
        model.predict(SMALL_LLAMA, prefill=0)
