"""The parameter grid of a sweep: value lists and ranges, sweep files, and each point's config.

A parameter is a dotted config key (`memory.bandwidth_gbps`) with a list of values; the grid is the
cartesian product of the parameters in the order given. A point's config is the base config with
the point's values set, and its key is the SHA-256 of that config's canonical JSON: the same config
gets the same key in every run, which is what lets an interrupted sweep resume.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import pathlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Report paths come from the environment of each point; in the config they would send every
# point's reports to one file (and they do not change what is simulated).
_REPORT_KEYS = (("output", "stats_path"), ("output", "trace_path"), ("output", "capture_path"))


class GridError(ValueError):
    """A parameter, range or sweep file that cannot be used; the message names it."""


@dataclass(frozen=True)
class Param:
    """One swept config key and its values, in sweep order."""

    name: str
    values: tuple[Any, ...]


def parse_value(text: str) -> Any:
    """A JSON scalar if the text is one (`8`, `102.4`, `true`), else the text itself (`ieee`)."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, bool | int | float | str) else text


def parse_values(text: str) -> list[Any]:
    """Values from `a,b,c`, `lo:hi:step` (arithmetic) or `lo:hi:*factor` (geometric).

    Ranges include `hi` when a step lands on it (within rounding); all-integer ranges give ints.

    Args:
        text: the value list or range.
    Returns:
        The values in order.
    Raises:
        GridError: an empty list, a malformed range, or a step that does not move towards hi.
    """
    parts = text.split(":")
    if len(parts) == 1:
        values = [parse_value(v.strip()) for v in text.split(",")]
        if any(v == "" for v in values):
            raise GridError(f"sweep: empty value in '{text}'")
        return values
    if len(parts) != 3:
        raise GridError(f"sweep: a range is lo:hi:step or lo:hi:*factor (got '{text}')")
    geometric = parts[2].startswith("*")
    lo, hi, step = (parse_value(p) for p in (parts[0], parts[1], parts[2].lstrip("*")))
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (lo, hi, step)):
        raise GridError(f"sweep: range bounds and step must be numbers (got '{text}')")
    if geometric and (step <= 1 or lo <= 0 or hi < lo):
        raise GridError(f"sweep: a geometric range needs 0 < lo <= hi and a factor above 1 (got '{text}')")
    if not geometric and (step <= 0 or hi < lo):
        raise GridError(f"sweep: a range needs lo <= hi and a positive step (got '{text}')")
    integral = all(isinstance(v, int) for v in (lo, hi, step))
    values: list[Any] = []
    i = 0
    while True:
        value = lo * step**i if geometric else lo + i * step
        if value > hi * (1 + 1e-9) + 1e-12:
            break
        values.append(value if integral else float(f"{value:.12g}"))
        i += 1
    return values


def parse_param(spec: str) -> Param:
    """A `--param KEY=VALUES` argument as a Param.

    Raises:
        GridError: no '=', an empty key, or bad values.
    """
    key, sep, text = spec.partition("=")
    if not sep or not key.strip():
        raise GridError(f"sweep: a parameter is KEY=VALUES, e.g. memory.bandwidth_gbps=102.4,204.8 (got '{spec}')")
    return make_param(key.strip(), parse_values(text))


def make_param(name: str, values: Any) -> Param:
    """A Param from a key and a value list (or a range string).

    Raises:
        GridError: the key is not a dotted config key, or the values are empty or repeat.
    """
    if "." not in name or any(not part for part in name.split(".")):
        raise GridError(f"sweep: '{name}' is not a config key like section.name (e.g. chip.cores)")
    if isinstance(values, str):
        values = parse_values(values)
    elif not isinstance(values, list | tuple):
        values = [values]
    if not values:
        raise GridError(f"sweep: '{name}' has no values")
    seen = [canonical_json(v) for v in values]
    if len(set(seen)) != len(seen):
        raise GridError(f"sweep: '{name}' repeats a value ({', '.join(seen)})")
    return Param(name, tuple(values))


def load_sweep_file(path: str | pathlib.Path) -> tuple[dict[str, Any], list[Param]]:
    """A sweep file: {"base": {config overrides}, "params": {"key": [values] or "lo:hi:step"}}.

    JSON, or YAML when the name ends in .yaml or .yml (needs PyYAML, which Ray brings).

    Returns:
        The base config overrides (possibly empty) and the parameters in file order.
    Raises:
        GridError: unreadable file, wrong shape or bad parameters.
    """
    path = pathlib.Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix in (".yaml", ".yml"):
            import yaml  # only for YAML sweep files

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except (OSError, ValueError, ImportError) as e:
        raise GridError(f"sweep: cannot read sweep file '{path}' ({e})") from e
    if not isinstance(data, Mapping) or not isinstance(data.get("params", {}), Mapping):
        raise GridError(f"sweep: sweep file '{path}' must hold an object with a 'params' object")
    base = data.get("base") or {}
    if not isinstance(base, Mapping):
        raise GridError(f"sweep: 'base' in '{path}' must be an object of config overrides")
    return dict(base), [make_param(k, v) for k, v in data.get("params", {}).items()]


def grid(params: list[Param]) -> list[dict[str, Any]]:
    """The cartesian product of the parameters: one {key: value} per point, first key slowest.

    Raises:
        GridError: a key is swept twice.
    """
    names = [p.name for p in params]
    if len(set(names)) != len(names):
        raise GridError(f"sweep: a parameter is given twice ({', '.join(names)})")
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(p.values for p in params))]


def point_config(base: Mapping[str, Any], point: Mapping[str, Any]) -> dict[str, Any]:
    """The base config with a point's values set, without report paths.

    Raises:
        GridError: a key runs through a value that is not a section.
    """
    config = copy.deepcopy(dict(base))
    for key, value in point.items():
        set_dotted(config, key, value)
    for section, name in _REPORT_KEYS:
        if isinstance(config.get(section), dict):
            config[section].pop(name, None)
            if not config[section]:
                del config[section]
    return config


def set_dotted(tree: dict[str, Any], key: str, value: Any) -> None:
    """Sets tree[a][b][c] = value for key "a.b.c", creating sections as needed.

    Raises:
        GridError: a part of the path is a value, not a section.
    """
    *sections, leaf = key.split(".")
    node = tree
    for i, part in enumerate(sections):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise GridError(f"sweep: '{'.'.join(sections[: i + 1])}' is a value, not a section (setting '{key}')")
        node = child
    node[leaf] = value


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, ASCII: the same value always gives the same text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def config_key(config: Mapping[str, Any]) -> str:
    """The point key: SHA-256 (hex) of the config's canonical JSON."""
    return hashlib.sha256(canonical_json(config).encode("ascii")).hexdigest()
