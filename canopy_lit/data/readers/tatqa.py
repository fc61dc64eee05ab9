"""TAT-QA reader (official ``tatqa_dataset_{train,dev,test}.json`` layout).

Document: ``{"table": {"uid", "table": [[cell]]}, "paragraphs": [{"uid", "order", "text"}],
"questions": [{"uid", "question", "answer", "derivation", "answer_type", "answer_from",
"rel_paragraphs": ["<order>"], "scale"}]}``.

Items: the document's table and its paragraphs. TAT-QA tables have no marked
header, so the leading header-like rows (no value cell is a bare number other than
a year; at most 3; a section label such as "Assets | |" ends them) are merged
column-wise into ``Table.header`` and the rest are the row leaves.

Gold:
- every paragraph in ``rel_paragraphs``: the sentences holding an answer string or
  a derivation operand; when none is found there, ``[]`` (whole-gold, no instance);
- the table, when ``answer_from`` involves it: the rows with a cell equal to / holding
  an answer string (or a cell listed by a count derivation "a##b"), or holding a
  number equal to a derivation operand or the answer.

Derivation operands are ``canopy_lit.operands.formula_operands`` over the document's numbers: the values a
formula reads from the table and paragraphs, never its constants (the 2 of ``(4.1% + 4.6%)/2``, a
``* 100``, the 1 of ``a / b - 1``) or the rows it names ("row 5"). They are kept in
``Question.meta["operands"]``, where the answer look-up (``eval/answers.py``) finds the same ones.
Test files without answers load with empty gold (``skipped["no_gold_annotation"]``).
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

from canopy_lit.data.base import Benchmark
from canopy_lit.data.readers._gold import locate_sentences, numbers_in
from canopy_lit.data.readers._io import iter_records, record_guard, require
from canopy_lit.numbers import as_number
from canopy_lit.operands import formula_operands
from canopy_lit.types import Item, Modality, Question, Table

_MAX_HEADER_ROWS = 3


def _header_like(row: list[str]) -> bool:
    """No value cell is a bare number other than a year ('', '2019', 'Years Ended September 30,', '2019 €m')."""
    for cell in row[1:]:
        cell = str(cell)
        if as_number(cell) is not None:
            x = numbers_in(cell)
            if not (len(x) == 1 and x[0].is_integer() and 1900 <= x[0] <= 2100):
                return False
    return True


def _section_label(row: list[str]) -> bool:
    """'Assets | | ': a label with empty value cells, which below a header starts the body."""
    return bool(str(row[0]).strip()) and not any(str(c).strip() for c in row[1:])


def split_header(rows: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    """(merged header, data rows): the leading header-like rows (>= 1, <= 3, one data row kept)."""
    if len(rows) <= 1:
        return (list(rows[0]) if rows else []), []
    n = 0
    while n < min(_MAX_HEADER_ROWS, len(rows) - 1) and _header_like(rows[n]):
        if n and _section_label(rows[n]):
            break
        n += 1
    n = max(n, 1)
    width = max(len(r) for r in rows[:n])
    header = []
    for c in range(width):
        parts = [str(r[c]).strip() for r in rows[:n] if c < len(r) and str(r[c]).strip()]
        header.append(" ".join(parts))
    return header, [list(r) for r in rows[n:]]


def _norm(s: str) -> str:
    return " ".join(str(s).lower().split())


def _same_number(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def table_gold_rows(rows: list[list[str]], answers: list[str], operands: list[float]) -> list[int]:
    """Rows holding an answer string (cell equal to it, or containing it when it is not a bare
    number) or a number equal to a derivation operand / numeric answer."""
    texts = [_norm(a) for a in answers if _norm(a)]
    numbers = list(operands)
    for a in answers:
        numbers.extend(numbers_in(a))

    def cell_hit(cell: str) -> bool:
        c = _norm(cell)
        if not c:
            return False
        if any(c == t or (not numbers_in(t) and len(t) > 2 and t in c) for t in texts):
            return True
        return any(_same_number(x, y) for x in numbers_in(c) for y in numbers)

    return [i for i, row in enumerate(rows) if any(cell_hit(cell) for cell in row)]


def _answers(answer: Any) -> list[str]:
    if answer is None:
        return []
    if isinstance(answer, list):
        return [str(a) for a in answer]
    if isinstance(answer, float) and answer.is_integer():
        return [str(int(answer))]
    return [str(answer)]


def read(path: Path, strict: bool = True) -> Benchmark:
    """Read one official TAT-QA split file (a JSON list of documents)."""
    items: dict[str, Item] = {}
    skipped: Counter = Counter()
    bench = Benchmark("tatqa", [], items, {}, skipped, {"path": str(path)})
    leaf_cache: dict = {}  # a paragraph serves several questions: split it once
    for index, doc in enumerate(iter_records(path)):
        with record_guard(path, index, doc, skipped, strict):
            table = require(doc, "table", dict)
            table_uid = str(require(table, "uid", str))
            raw_rows = require(table, "table", list)
            if not all(isinstance(r, list) for r in raw_rows):
                raise TypeError("table.table must be a list of rows")
            header, rows = split_header([[str(c) for c in r] for r in raw_rows])
            tid = f"tatqa:{table_uid}"
            if rows:
                items[tid] = Item(tid, Modality.TABLE, table=Table(header, rows), meta={"doc": table_uid})
            else:
                skipped["empty_table"] += 1
            paras: dict[str, str] = {}
            # Every number the document writes: a derivation's operand is one of them.
            values = [x for r in raw_rows for c in r for x in numbers_in(str(c))]
            for p in require(doc, "paragraphs", list):
                pid = f"tatqa:{require(p, 'uid', str)}"
                text = require(p, "text", str)
                values.extend(numbers_in(text))
                if text.strip():
                    items[pid] = Item(
                        pid, Modality.TEXT, text=text, meta={"doc": table_uid, "order": p.get("order")}
                    )
                    paras[str(p.get("order"))] = pid
            cands = ([tid] if tid in items else []) + list(paras.values())
            for qi, q in enumerate(require(doc, "questions", list)):
                with record_guard(path, index, {"uid": f"{table_uid} question {qi}"}, skipped, strict):
                    qid = str(require(q, "uid", str))
                    if bench.repeats_question(qid):
                        continue
                    text = require(q, "question", str)
                    answers = _answers(q.get("answer"))
                    derivation = str(q.get("derivation") or "")
                    op_strings = formula_operands(derivation, values)
                    # Count questions list the counted cells as "a##b##c".
                    listed = [x.strip() for x in derivation.split("##")] if "##" in derivation else []
                    gold: dict[str, list[int]] = {}
                    if "answer" not in q:
                        skipped["no_gold_annotation"] += 1
                    for order in q.get("rel_paragraphs") or []:
                        pid = paras.get(str(order))
                        if pid is None:
                            skipped["rel_paragraph_missing"] += 1
                            continue
                        gold[pid] = locate_sentences(items[pid], answers + listed + op_strings, leaf_cache)
                        if not gold[pid]:
                            skipped["gold_span_not_located"] += 1
                    if "table" in str(q.get("answer_from", "")) and tid in items:
                        operands = [x for s in op_strings for x in numbers_in(s)]
                        gold[tid] = table_gold_rows(rows, answers + listed, operands)
                        if not gold[tid]:
                            skipped["gold_rows_not_located"] += 1
                    meta = {
                        "doc": tid,
                        **{k: q[k] for k in ("answer_type", "answer_from", "scale", "derivation") if k in q},
                        **({"operands": op_strings} if derivation else {}),
                    }
                    bench.add_question(Question(qid, text, answers, "tatqa", gold, meta=meta), cands)
    return bench
