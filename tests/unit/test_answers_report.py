"""The quickstart's side-by-side answers: gold beside each run's answer, score mark and evidence tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from canopy_lit.report.answers import answers_table, answers_text, read_predictions, summary_line


def _run(tmp_path: Path, name: str, rows: list[dict]) -> Path:
    run = tmp_path / name
    run.mkdir()
    (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return run


def _rec(qid: str, pred: str, em: float, f1: float, tokens: int, status: str = "ok") -> dict:
    return {"id": qid, "question": f"question {qid}?", "answers": [f"gold {qid}"], "prediction": pred,
            "status": status, "evidence_tokens": tokens, "scores": {"em": em, "f1": f1, "match": em}}


def test_rows_pair_each_question_across_runs_and_failed_questions_score_zero(tmp_path: Path) -> None:
    a = _run(tmp_path, "a", [_rec("1", "gold 1", 1.0, 1.0, 100), _rec("2", "nope", 0.0, 0.5, 300)])
    b = _run(tmp_path, "b", [_rec("2", "gold 2", 1.0, 1.0, 900), _rec("1", "", 0.0, 0.0, 0, status="failed")])
    text = answers_text({"canopy": a, "vanilla": b})
    q1 = text.split("Q2.")[0]
    assert "gold 1 (EM)  [100 evidence tokens]" in q1 and "(failed)  [- evidence tokens]" in q1
    assert "gold 2 (EM)  [900 evidence tokens]" in text and "nope (F1 0.50)  [300 evidence tokens]" in text
    assert "canopy: n = 2: EM 0.50, F1 0.75" in text
    # b's failed question counts 0 over n = 2, and its tokens average over answered questions only
    assert "vanilla: n = 2: EM 0.50, F1 0.50, Match 0.50, 900 evidence tokens per question, 1 failed" in text
    table = answers_table({"canopy": a, "vanilla": b})
    assert table.splitlines()[0] == "| question | gold | canopy | canopy tokens | vanilla | vanilla tokens |"


def test_a_resumed_question_counts_once_and_a_bad_line_names_the_file(tmp_path: Path) -> None:
    run = _run(tmp_path, "r", [_rec("1", "x", 0.0, 0.0, 5), _rec("1", "gold 1", 1.0, 1.0, 7)])
    recs = read_predictions(run)
    assert len(recs) == 1 and summary_line(recs).startswith("n = 1: EM 1.00")
    (run / "predictions.jsonl").write_text('{"id": "1"}\n{not json\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"predictions.jsonl:2: not valid JSON"):
        read_predictions(run)
    with pytest.raises(FileNotFoundError, match="not a QA run folder"):
        read_predictions(tmp_path)


def test_cli_prints_blocks_and_refuses_a_run_without_a_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from canopy_lit.report.__main__ import main

    run = _run(tmp_path, "a", [_rec("1", "gold 1", 1.0, 1.0, 10)])
    assert main(["answers", f"canopy={run}"]) == 0
    assert "Q1. question 1?" in capsys.readouterr().out
    assert main(["answers", str(run)]) == 2
    assert "expected NAME=RUN_DIR" in capsys.readouterr().err
