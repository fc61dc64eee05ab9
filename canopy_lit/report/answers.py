"""Answers side by side: one row per question, the gold answer beside each run's answer and evidence tokens.

    python -m canopy_lit.report answers canopy=RUN_DIR vanilla=RUN_DIR [--width 60]

Reads each run's ``predictions.jsonl`` (the QA harness's per-question records). Rows follow the first
run's question order; a question missing from a run shows ``-`` there, a failed one ``(failed)``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from canopy_lit.markdown import md_table

PREDICTIONS = "predictions.jsonl"

LEGEND = (
    "EM: the answer equals a gold answer after SQuAD normalisation; F1: token overlap with the closest gold "
    "answer; Match: a gold answer occurs in the reply. 'tokens' is the evidence the reader was given "
    "(reader-tokenizer tokens after the reader cap): the fewer at the same score, the better the compression."
)


def read_predictions(run_dir: str | Path) -> list[dict[str, Any]]:
    """Per-question records of a QA run folder, in file order (a re-asked question: its last record)."""
    path = Path(run_dir) / PREDICTIONS
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir}: no {PREDICTIONS} (not a QA run folder)")
    by_id: dict[str, dict[str, Any]] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{n}: not valid JSON ({err.msg})") from err
        by_id[str(rec.get("id"))] = rec
    return list(by_id.values())


def _cell(text: Any, width: int) -> str:
    s = " ".join(str(text).split()).replace("|", "\\|")
    return s if len(s) <= width else s[: width - 1] + "…"


def _answer(rec: Mapping[str, Any] | None, width: int) -> tuple[str, str]:
    """(answer cell, tokens cell) of one run's record for one question."""
    if rec is None:
        return "-", "-"
    if rec.get("status") != "ok":
        return "(failed)", "-"
    scores = rec.get("scores") or {}
    mark = "EM" if scores.get("em") else ("match" if scores.get("match") else f"F1 {float(scores.get('f1', 0)):.2f}")
    return f"{_cell(rec.get('prediction', ''), width)} ({mark})", str(rec.get("evidence_tokens", "-"))


def answers_table(runs: Mapping[str, str | Path], width: int = 60) -> str:
    """Markdown: question | gold | for each run, its answer (EM / match / F1) and evidence tokens; then means."""
    if not runs:
        raise ValueError("no runs given (NAME=RUN_DIR ...)")
    records = {name: read_predictions(path) for name, path in runs.items()}
    by_id = {name: {str(r.get("id")): r for r in recs} for name, recs in records.items()}
    first = next(iter(records.values()))
    head = ["question", "gold"] + [c for name in runs for c in (name, f"{name} tokens")]
    rows = []
    for q in first:
        qid = str(q.get("id"))
        cells = [_cell(q.get("question", ""), width), _cell(" / ".join(map(str, q.get("answers") or [])), 30)]
        for name in runs:
            cells.extend(_answer(by_id[name].get(qid), width))
        rows.append(cells)
    lines = [md_table(head, rows)]
    for name, recs in records.items():
        lines.append(f"- {name}: {summary_line(recs)}")
    return "\n".join(lines) + "\n"


def answers_text(runs: Mapping[str, str | Path], width: int = 90) -> str:
    """The same content as ``answers_table`` laid out for a terminal: one block per question."""
    if not runs:
        raise ValueError("no runs given (NAME=RUN_DIR ...)")
    records = {name: read_predictions(path) for name, path in runs.items()}
    by_id = {name: {str(r.get("id")): r for r in recs} for name, recs in records.items()}
    pad = max(len("gold"), *(len(n) for n in runs))
    out: list[str] = []
    for i, q in enumerate(next(iter(records.values())), 1):
        qid = str(q.get("id"))
        out.append(f"Q{i}. {_cell(q.get('question', ''), width)}")
        out.append(f"    {'gold'.ljust(pad)}  {_cell(' / '.join(map(str, q.get('answers') or [])), width)}")
        for name in runs:
            answer, tokens = _answer(by_id[name].get(qid), width)
            out.append(f"    {name.ljust(pad)}  {answer}  [{tokens} evidence tokens]")
    out.append("")
    out.extend(f"{name}: {summary_line(recs)}" for name, recs in records.items())
    out.append(LEGEND)
    return "\n".join(out) + "\n"


def summary_line(records: Sequence[Mapping[str, Any]]) -> str:
    """``n = 10: EM 0.20, F1 0.35, Match 0.40, 412 evidence tokens, 1 failed`` (failed questions score 0)."""
    n = len(records)
    if n == 0:
        return "n = 0"

    def mean(key: str) -> float:
        return sum(float((r.get("scores") or {}).get(key, 0.0)) for r in records if r.get("status") == "ok") / n

    ok = [r for r in records if r.get("status") == "ok"]
    tokens = sum(int(r.get("evidence_tokens", 0)) for r in ok) / max(len(ok), 1)
    failed = n - len(ok)
    tail = f", {failed} failed" if failed else ""
    return (f"n = {n}: EM {mean('em'):.2f}, F1 {mean('f1'):.2f}, Match {mean('match'):.2f}, "
            f"{tokens:.0f} evidence tokens per question{tail}")
