"""The one markdown table writer: cells cannot split a row, and no other module writes table rows itself."""

from __future__ import annotations

import re
from pathlib import Path

from canopy_lit.eval.summary import markdown_table
from canopy_lit.markdown import md_table

ROOT = Path(__file__).resolve().parents[2]


def test_a_bare_pipe_in_a_cell_is_escaped_and_an_escaped_one_kept() -> None:
    table = md_table(["row", "cells"], [["Risk-free rate | 2.5%", r"a \| b"], [1, None]])
    lines = table.splitlines()
    assert lines[:2] == ["| row | cells |", "|---|---|"]
    assert lines[2] == r"| Risk-free rate \| 2.5% | a \| b |"
    assert lines[3] == "| 1 | None |"
    # every row has as many unescaped separators as the header
    assert {len(re.findall(r"(?<!\\)\|", line)) for line in lines} == {3}


def test_run_summary_tables_go_through_the_writer() -> None:
    # a TAT-QA row label with a pipe used to add a column to the run's table.md
    table = markdown_table([{"method": "a|b", "eval/f1": 0.5}], ["method", "eval/f1"])
    assert r"| a\|b | 0.500 |" in table


def test_no_other_module_writes_a_table_separator_row() -> None:
    separator = re.compile(r"""["']\|(---\|)+["']|["']---\|["']\s*\*|["']\|["']\s*\+\s*["']---""")
    offenders = [
        str(p.relative_to(ROOT))
        for folder in ("canopy_lit", "experiments", "scripts", "perf")
        for p in (ROOT / folder).rglob("*.py")
        if p.name != "markdown.py" and separator.search(p.read_text(encoding="utf-8"))
    ]
    assert offenders == []
