"""torch_spyre's pytest plugin (backend/pytest_spyre/) in a user's suite
(examples/pytest_plugin), run as a user runs it: off unless asked for; the report of the ops that
fell back, with the tests that made them; --spyre-fallback=error failing such a test; per-test
device cycles, launches and fallbacks in the JUnit XML; and the same report from pytest-xdist's
workers."""

from __future__ import annotations

import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from conftest import ROOT, clean_env

SUITE = ROOT / "examples" / "pytest_plugin" / "test_user_model.py"
POISSON = "test_user_model.py::test_poisson_samples_are_counts"


def _pytest(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """pytest on a copy of the user's suite in `tmp_path` (no ini file of ours, no conftest)."""
    shutil.copy(SUITE, tmp_path / SUITE.name)
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", SUITE.name, *args]
    return subprocess.run(argv, cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=600)


def test_the_plugin_is_off_unless_asked_for(tmp_path):
    r = _pytest(tmp_path)
    assert r.returncode != 0
    assert "fixture 'spyre_device' not found" in r.stdout
    assert "spyre CPU fallback" not in r.stdout


def test_the_report_names_the_op_that_fell_back_and_its_test_and_the_junit_xml_has_the_figures(tmp_path):
    r = _pytest(tmp_path, "--spyre", "--junitxml=out.xml")
    assert r.returncode == 0, r.stdout[-3000:]
    report = r.stdout[r.stdout.index("spyre CPU fallback") :]
    assert "1 ATen op(s) fell back to the CPU (1 calls)" in report
    assert "aten::poisson" in report and POISSON in report
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "out.xml").getroot().iter("testcase")}
    props = {name: {p.get("name"): int(p.get("value")) for p in case.iter("property")} for name, case in cases.items()}
    linear, poisson = props["test_a_linear_layer_matches_the_cpu"], props["test_poisson_samples_are_counts"]
    assert linear["spyre_cycles"] > 0 and linear["spyre_launches"] > 0 and linear["spyre_fallbacks"] == 0
    assert poisson["spyre_fallbacks"] == 1


def test_fallback_error_fails_the_test_that_falls_back_only(tmp_path):
    r = _pytest(tmp_path, "--spyre-fallback=error", "-rf")
    assert r.returncode == 1, r.stdout[-3000:]
    assert f"FAILED {POISSON}" in r.stdout and "aten::poisson" in r.stdout
    assert "1 failed, 1 passed" in r.stdout


def test_the_report_gathers_pytest_xdist_workers(tmp_path):
    pytest.importorskip("xdist")
    r = _pytest(tmp_path, "--spyre", "-n", "2")
    assert r.returncode == 0, r.stdout[-3000:]
    report = r.stdout[r.stdout.index("spyre CPU fallback") :]
    assert "aten::poisson" in report and POISSON in report
    assert "2 passed" in r.stdout


def test_without_a_working_extension_the_tests_are_skipped_naming_why(tmp_path):
    # torch_spyre as a partial install leaves it (no compiled extension), found before the
    # checkout's editable install, which is taken out as a plain install has none.
    shutil.copytree(
        ROOT / "backend" / "torch_spyre", tmp_path / "pkg" / "torch_spyre", ignore=shutil.ignore_patterns("*.so", "bin")
    )
    shutil.copy(SUITE, tmp_path / SUITE.name)
    code = (
        "import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in type(f).__module__]\n"
        "import pytest; sys.exit(pytest.main(['-p', 'no:cacheprovider', '-q', '-rs', '--spyre', sys.argv[1]]))"
    )
    env = {**clean_env(), "PYTHONPATH": f"{tmp_path / 'pkg'}:{ROOT / 'backend'}"}
    r = subprocess.run(
        [sys.executable, "-c", code, SUITE.name], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stdout[-3000:]
    assert "2 skipped" in r.stdout and "the spyre device is unavailable" in r.stdout
