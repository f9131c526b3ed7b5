"""The docs' pointers into the tree stay true: the developer guide's "Where to look" table names
files that exist and symbols that appear in them."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def where_to_look() -> list[tuple[str, str, list[str]]]:
    text = (ROOT / "docs" / "developer-guide.md").read_text()
    section = text.split("## Where to look", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[1].startswith("`"):
            continue
        path, _, rest = cells[1].partition("`")[2].partition("`")
        symbols = [s.split("(")[0].split("::")[-1] for s in re.findall(r"`([^`]+)`", rest)]
        rows.append((cells[0], path, [s for s in symbols if re.fullmatch(r"[A-Za-z_]\w*", s)]))
    return rows


def test_the_where_to_look_table_names_files_that_hold_what_it_says():
    rows = where_to_look()
    assert len(rows) >= 15
    for question, path, symbols in rows:
        file = ROOT / path
        assert file.is_file(), f"{question} -> {path}: no such file"
        text = file.read_text()
        for symbol in symbols:
            assert symbol in text, f"{question} -> {path}: '{symbol}' is not in it"
