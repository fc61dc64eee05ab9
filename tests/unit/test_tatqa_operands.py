"""TAT-QA derivation operands: one rule for the reader's gold rows and the answer look-up.

A formula's constants (the 2 of an average, a "* 100", the 1 of a growth rate) and the rows a prose
derivation names are no operands, so they mark no gold row and are no answer needle; a small number that
the evidence does write ("(4+4)/2", "7 - 10") stays one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from canopy_lit.data.base import Benchmark
from canopy_lit.data.readers import tatqa
from canopy_lit.data.readers._gold import numbers_in
from canopy_lit.eval.answers import answer_found, answer_needles
from canopy_lit.operands import formula_operands
from canopy_lit.types import Item, Question

DEV = Path(__file__).resolve().parents[2] / "data" / "tatqa" / "tatqa_dataset_dev.json"


@pytest.mark.parametrize(
    ("derivation", "operands"),
    [
        ("(4.1% + 4.6%)/2", ["4.1", "4.6"]),
        ("(166+178)/2 * 100 - 1", ["166", "178"]),
        ("[(4,411+4,044)/2] -[(4,044+3,316)/2]", ["4,411", "4,044", "3,316"]),
        ("- (197 + 101 + 206) / 3", ["197", "101", "206"]),
        ("(2.5+2.4+3.2)/(2019-2017+1)", ["2.5", "2.4", "3.2"]),
        ("126 / 67 - 1", ["126", "67"]),
        ("(1-15%)*($2.2/15%)", ["15", "2.2"]),
        ("12 / 48 x 100", ["12", "48"]),
        # Values, though small or in a divisor's place: a change's base, an average's own terms.
        ("(17-8)/8", ["17", "8"]),
        ("(4+4)/2", ["4"]),
        ("7 - 10", ["7", "10"]),
        ("1 - 3", ["1", "3"]),
        ("1,400 / 1", ["1,400", "1"]),
        # Places and labels of prose derivations.
        ("locate and analyze net income in row 5", []),
        ("For COL4 rows 3-5 find the largest number and the corresponding component in COL2", []),
        ("(2019:6.8),(2018:8.1)", ["6.8", "8.1"]),
        ("79,046 (2019) vs 63,954 (2018)", ["79,046", "63,954"]),
    ],
)
def test_formula_operands_drop_the_formulas_constants(derivation: str, operands: list[str]) -> None:
    assert formula_operands(derivation) == operands


def test_an_operand_is_a_number_the_document_writes() -> None:
    assert formula_operands("-9.9 - 0", values=[9.9, 2019.0]) == ["9.9"]
    assert formula_operands("-9.9 - 0", values=[9.9, 0.0]) == ["9.9", "0"]
    assert formula_operands("(4.1% + 4.6%)/2", values=[4.1, 4.6, 2.0]) == ["4.1", "4.6"]


@pytest.fixture(scope="module")
def bench() -> Benchmark:
    return tatqa.read(DEV)


def _dividend_question(bench: Benchmark) -> tuple[Question, Item]:
    [q] = [q for q in bench.questions if q.text == "What is the average dividend yield in 2017 and 2018?"]
    return q, bench.items[q.meta["doc"]]


def test_average_of_two_percentages_marks_only_its_operands_row(bench: Benchmark) -> None:
    """(4.1% + 4.6%)/2 marks the dividend yield row, not the risk-free rate row whose 2.0% equals the /2."""
    q, table = _dividend_question(bench)
    assert q.meta["derivation"].strip() == "(4.1% + 4.6%)/2"
    rows = [table.table.rows[i][0] for i in q.gold[table.id]]
    assert rows == ["Dividend yield"]
    assert "Risk-free interest rate" in [r[0] for r in table.table.rows]  # the row the 2 used to mark


def test_reader_and_answer_look_up_use_the_same_operands(bench: Benchmark) -> None:
    q, _ = _dividend_question(bench)
    assert q.meta["operands"] == ["4.1", "4.6"]
    assert answer_needles(q) == [["4.1", "4.6"]]
    # Without the reader's record the look-up applies the same rule to the derivation.
    bare = Question("q", "?", ["4"], "tatqa", meta={"answer_type": "arithmetic", "derivation": "(4+4)/2"})
    assert answer_needles(bare) == [["4"]]
    assert answer_found(answer_needles(bare), "| Salaries and fees | 4 | 4 |") is True


_OLD_OPERAND = re.compile(r"\d[\d,]*(?:\.\d+)?")


def test_no_bundled_gold_row_rests_on_a_formula_constant(bench: Benchmark) -> None:
    """Over the bundled dev file the new gold rows are the old ones less those resting on a constant or a named
    row: the old rule (every number of the derivation an operand) marked 35 more rows over 28 questions."""
    docs = json.loads(DEV.read_text(encoding="utf-8"))
    by_id = {q.id: q for q in bench.questions}
    extra_rows = extra_questions = 0
    for doc in docs:
        _, rows = tatqa.split_header([[str(c) for c in r] for r in doc["table"]["table"]])
        for raw in doc["questions"]:
            q = by_id.get(raw["uid"])
            tid = f"tatqa:{doc['table']['uid']}"
            if q is None or tid not in q.gold:
                continue
            derivation = str(raw.get("derivation") or "")
            listed = [x.strip() for x in derivation.split("##")] if "##" in derivation else []
            old = tatqa.table_gold_rows(
                rows, q.answers + listed, [x for s in _OLD_OPERAND.findall(derivation) for x in numbers_in(s)]
            )
            new = set(q.gold[tid])
            assert new <= set(old), q.id  # the rule only drops rows
            extra_rows += len(set(old) - new)
            extra_questions += bool(set(old) - new)
    assert (extra_rows, extra_questions) == (35, 28)
