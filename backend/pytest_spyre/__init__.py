"""pytest plugin for test suites of PyTorch code on the spyre device. Installed with torch_spyre
(entry point ``pytest11``) and off until asked for: ``--spyre``, ``--spyre-fallback=error``, or
``spyre = true`` in the ini file. This module imports neither torch nor torch_spyre until then, so
it costs other suites of the environment nothing.

When on:

- the ``spyre_device`` fixture: the ``torch.device`` of this process's card (with pytest-xdist,
  each worker is a process of its own, with a card of its own; on a shared ``spyre-simd`` server of
  several cards, worker N takes card N modulo their count). The test is skipped, naming why, when
  the device is unavailable;
- at the end of the run, the ops that fell back to the CPU, with their calls and the tests that
  made them (gathered from every xdist worker);
- ``--spyre-fallback=error``: a test whose op would fall back to the CPU fails with the op named
  (``torch_spyre.set_cpu_fallback("error")`` for its run);
- per test, the device cycles it took and the kernels it launched on its card (``spyre_cycles``,
  ``spyre_launches``) and its fallback calls (``spyre_fallbacks``), as properties of its test case
  in the JUnit XML (``--junitxml``).
"""

from __future__ import annotations

import os
import re

import pytest

_NAME = "spyre-session"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("spyre", "the spyre device (torch_spyre)")
    group.addoption(
        "--spyre",
        action="store_true",
        help="turn the spyre plugin on: the spyre_device fixture, the CPU fallback report, per-test device figures",
    )
    group.addoption(
        "--spyre-fallback",
        choices=("warn", "error"),
        default=None,
        help="warn (default): an op without a spyre kernel runs on the CPU and is reported; error: it fails its "
        "test (turns the plugin on)",
    )
    parser.addini("spyre", type="bool", default=False, help="turn the spyre plugin on (as --spyre)")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("spyre") or config.getoption("spyre_fallback") or config.getini("spyre"):
        config.pluginmanager.register(SpyreSession(config), _NAME)


class SpyreSession:
    """The plugin's state for one pytest process (the controller, or one xdist worker)."""

    def __init__(self, config: pytest.Config):
        import torch
        import torch_spyre

        self.torch, self.spyre = torch, torch_spyre
        # A device whose extension does not load (torch_spyre._unavailable): the fixture skips its
        # tests, naming why, and nothing else is measured.
        self.live = torch.spyre.is_available() and hasattr(torch_spyre, "fallback_counts")
        self.config = config
        self.mode = config.getoption("spyre_fallback")  # None: each test keeps the mode it sets itself
        self.fallbacks: dict[str, dict] = {}  # op -> {"calls": n, "tests": [nodeid, ...]}

    # -- the fixture ----------------------------------------------------------------------------

    @pytest.fixture
    def spyre_device(self):
        """The torch.device of this process's spyre card."""
        torch = self.torch
        if not torch.spyre.is_available():
            why = getattr(torch.spyre, "unavailable_because", "no spyre device is present")
            pytest.skip(f"the spyre device is unavailable: {why}")
        index = 0
        worker = re.fullmatch(r"gw(\d+)", os.environ.get("PYTEST_XDIST_WORKER", ""))
        if worker and os.environ.get("SPYRE_TRANSPORT") == "socket":
            index = int(worker.group(1)) % torch.spyre.device_count()
        return torch.device("spyre", index)

    # -- per test -------------------------------------------------------------------------------

    def _opened(self) -> list[int]:
        """The cards this process has opened (reading the others' figures would open them)."""
        from torch_spyre import _C

        return [i for i in range(_C._device_count()) if _C._device_opened(i)]

    def _figures(self) -> dict[int, tuple[int, int]]:
        """(cycles, launches) of every card this process has opened and that answers (a test may
        have lost one on purpose: its figures are then left out, not the test failed)."""
        figures: dict[int, tuple[int, int]] = {}
        for i in self._opened() if self.live else []:
            try:
                figures[i] = (self.spyre.device_cycles(i), self.spyre.launch_count(i))
            except RuntimeError:
                continue
        return figures

    def _snapshot(self) -> tuple[dict[str, int], dict[int, tuple[int, int]]]:
        return (self.spyre.fallback_counts(), self._figures()) if self.live else ({}, {})

    def _record(self, item: pytest.Item, since) -> int:
        """Adds the fallbacks `item` made since `since` to the report; returns their calls."""
        if not self.live:
            return 0
        calls_before = since[0]
        # A count below its snapshot was reset by the test (fallback_counts(reset=True)): what it
        # reads now was all made since.
        made = {
            op: n - calls_before.get(op, 0) if n >= calls_before.get(op, 0) else n
            for op, n in self.spyre.fallback_counts().items()
        }
        made = {op: n for op, n in made.items() if n > 0}
        for op, n in made.items():
            entry = self.fallbacks.setdefault(op, {"calls": 0, "tests": []})
            entry["calls"] += n
            entry["tests"].append(item.nodeid)
        return sum(made.values())

    # Setup, call and teardown count (a fixture's fallbacks are its test's); the figures go into the
    # test's properties at the end of its call, before the report that the JUnit XML writes them from.
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        self._mode_before = self.spyre.get_cpu_fallback() if self.live else None
        if self.mode and self.live:
            self.spyre.set_cpu_fallback(self.mode)
        self._since = self._snapshot()
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        yield
        figures_before = self._since[1]
        figures = self._figures()
        cycles = sum(c - figures_before.get(i, (0, 0))[0] for i, (c, _) in figures.items())
        launches = sum(n - figures_before.get(i, (0, 0))[1] for i, (_, n) in figures.items())
        fallbacks = self._record(item, self._since)
        self._since = self._snapshot()
        item.user_properties += [("spyre_cycles", cycles), ("spyre_launches", launches), ("spyre_fallbacks", fallbacks)]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item):
        yield
        self._record(item, self._since)
        if self._mode_before is not None:
            self.spyre.set_cpu_fallback(self._mode_before)

    # -- the report -----------------------------------------------------------------------------

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        output = getattr(session.config, "workeroutput", None)
        if output is not None:  # an xdist worker: its findings go to the controller
            output["spyre_fallbacks"] = self.fallbacks

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        """An xdist worker finished: its fallbacks join the controller's."""
        for op, entry in getattr(node, "workeroutput", {}).get("spyre_fallbacks", {}).items():
            mine = self.fallbacks.setdefault(op, {"calls": 0, "tests": []})
            mine["calls"] += entry["calls"]
            mine["tests"] += entry["tests"]

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if getattr(self.config, "workerinput", None) is not None:
            return
        terminalreporter.section("spyre CPU fallback")
        if not self.fallbacks:
            terminalreporter.write_line("no op fell back to the CPU")
            return
        calls = sum(e["calls"] for e in self.fallbacks.values())
        terminalreporter.write_line(f"{len(self.fallbacks)} ATen op(s) fell back to the CPU ({calls} calls):")
        for op, entry in sorted(self.fallbacks.items(), key=lambda kv: -kv[1]["calls"]):
            tests = sorted(set(entry["tests"]))
            shown = ", ".join(tests[:3]) + (f" and {len(tests) - 3} more" if len(tests) > 3 else "")
            terminalreporter.write_line(f"  {entry['calls']:6d}  {op}  ({len(tests)} test(s): {shown})")
