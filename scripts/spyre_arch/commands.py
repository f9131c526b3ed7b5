"""The simulator's C++ commands on PATH: the build links ``spyre-sim`` and ``spyre-simd`` into
torch_spyre's package (``torch_spyre/bin``) in a checkout, and a wheel carries the programs
themselves there; these entry points run them from there. Finding them
imports neither torch_spyre nor torch: a command starts as fast as the program itself."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import pathlib
import sys


def version() -> str:
    """The installed release of torch_spyre (what every command's --version prints)."""
    try:
        return importlib.metadata.version("torch_spyre")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (torch_spyre is not installed)"


def missing_extra(command: str, error: ModuleNotFoundError) -> str:
    """The message of a command whose work needs a package of the `arch` extra that is missing
    (its --help and --version answer without them)."""
    return (
        f"{command}: needs the Python package '{error.name}', one of the architect's tools' packages: "
        "pip install 'torch_spyre[arch]'\n"
    )


def program(name: str) -> pathlib.Path | None:
    """The built program `name` in torch_spyre's package, or None."""
    spec = importlib.util.find_spec("torch_spyre")
    for where in (spec.submodule_search_locations or []) if spec else []:
        path = pathlib.Path(where) / "bin" / name
        if os.access(path, os.X_OK):
            return path
    return None


def _run(name: str) -> None:
    path = program(name)
    if path is None:
        sys.exit(
            f"{name}: the program is not built into torch_spyre's package (torch_spyre/bin); "
            "build it with scripts/bootstrap.sh in the checkout, or reinstall torch_spyre"
        )
    # `spyre-sim model` runs spyre_arch on Python: this one, unless the user named another.
    os.environ.setdefault("SPYRE_PYTHON", sys.executable)
    os.execv(path, [name, *sys.argv[1:]])


def spyre_sim() -> None:
    _run("spyre-sim")


def spyre_simd() -> None:
    _run("spyre-simd")
