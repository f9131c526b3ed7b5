"""The workflows under examples/workflows, run at their tiny size as a user would run them: each
checks itself against the CPU (--check) and exits non-zero if it does not hold."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT, clean_env

pytest.importorskip("peft")
pytest.importorskip("accelerate")


def _run(script: str, *args: str, tmp_path) -> str:
    r = subprocess.run(
        [sys.executable, ROOT / "examples" / "workflows" / script, "--tiny", "--check", *args],
        capture_output=True, text=True, timeout=900, env=clean_env(), cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, f"{script} failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_lora_finetuning_with_peft_and_trainer_falls_and_matches_cpu(tmp_path):
    out = _run("lora_finetune.py", "--out", str(tmp_path / "trainer"), tmp_path=tmp_path)
    # Trainer ran on the card, the fused AdamW included, and printed every step beside the CPU's.
    assert "LoRA fine-tuning on spyre: 20 steps" in out, out
    assert out.count(" cpu ") == 20 and "ops that fell back to the CPU: none" in out, out
    assert "check passed" in out


def test_rag_answers_200_queries_from_a_memory_pool_that_stays_flat(tmp_path):
    out = _run("rag.py", tmp_path=tmp_path)
    assert "200 queries, answers by a compiled decode step" in out, out
    assert "retrieved their own document: 200/200" in out, out
    assert "same as the CPU: 20/20" in out, out
    # The figures are printed along the stream: after the 10th query and at the end, the same.
    reserved = [line.split("reserved ")[1].split(",")[0] for line in out.splitlines() if line.startswith("after")]
    assert len(reserved) >= 3 and len(set(reserved[1:])) == 1, out
    assert "check passed" in out


def test_rag_with_generate_and_its_streamer_matches_cpu(tmp_path):
    out = _run("rag.py", "--eager", "--queries", "30", tmp_path=tmp_path)
    assert "30 queries, answers by generate()" in out and "same as the CPU: 20/20" in out, out
    # The streamer printed the first answers token by token: four tokens each.
    answers = [line.split("answer:")[1].split() for line in out.splitlines() if "answer:" in line]
    assert len(answers) == 3 and all(len(a) == 4 for a in answers), out
