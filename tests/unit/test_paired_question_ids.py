"""Paired comparisons count the questions a run folder's latest run scored (question_ids.json), as its
metrics.json and the judge do, and the token ratio's estimate and interval use one question set."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from canopy_lit.eval.evidence_stats import compare_runs, scored_records  # noqa: E402
from canopy_lit.metrics import paired_bootstrap_ci, ratio_bootstrap_ci  # noqa: E402
from canopy_lit.studies import paired  # noqa: E402


def _run(folder: Path, records: list[dict], ids: list[str] | None) -> Path:
    folder.mkdir(parents=True)
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if ids is not None:
        (folder / "question_ids.json").write_text(json.dumps(ids) + "\n")
    return folder


def _ev(qid: str, found: bool, tokens: int = 10, status: str = "ok") -> dict:
    return {"id": qid, "status": status, "evidence": {"answer_found": found, "tokens": tokens}}


def test_compare_runs_pairs_only_the_questions_each_run_scored(tmp_path: Path) -> None:
    # 3 records in each folder, but the latest run of each was asked q1 and q2 only (q3: an earlier, longer run)
    a = _run(tmp_path / "a", [_ev("q1", True), _ev("q2", True), _ev("q3", True)], ["q1", "q2"])
    b = _run(tmp_path / "b", [_ev("q1", True), _ev("q2", False), _ev("q3", False)], ["q1", "q2"])
    c = compare_runs(a, b)
    assert (c["n"], c["n_answer"]) == (2, 2)
    assert c["answer_recall_diff"] == pytest.approx(0.5)  # every record paired: n = 3, 0.667
    assert [r["id"] for r in scored_records(a)] == ["q1", "q2"]
    assert (c["answer_recall_diff_ci_low"], c["answer_recall_diff_ci_high"]) == paired_bootstrap_ci([1, 1], [1, 0])
    # a folder without the list (an older version) counts every record
    old = _run(tmp_path / "old", [_ev("q1", True), _ev("q2", False), _ev("q3", False)], None)
    assert compare_runs(a, old)["n"] == 2  # A's own questions still bound the pairing
    assert compare_runs(_run(tmp_path / "old_a", [_ev(q, True) for q in ("q1", "q2", "q3")], None), old)["n"] == 3


def test_a_question_listed_but_not_recorded_is_left_out(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", [_ev("q1", True)], ["q1", "q2"])  # interrupted before q2
    assert [r["id"] for r in scored_records(a)] == ["q1"]


def test_token_ratio_estimate_and_interval_use_the_same_questions(tmp_path: Path) -> None:
    # B delivered nothing for q2: the interval cannot pool it, so the estimate leaves it out too
    a = _run(tmp_path / "a", [_ev("q1", True, 4), _ev("q2", True, 5)], ["q1", "q2"])
    b = _run(tmp_path / "b", [_ev("q1", True, 4), _ev("q2", False, 0)], ["q1", "q2"])
    c = compare_runs(a, b)
    assert c["n"] == 2 and c["n_tokens"] == 1
    assert c["token_ratio"] == pytest.approx(1.0)  # before: 9 / 4 = 2.25 beside an interval [1.00, 1.00]
    assert (c["token_ratio_ci_low"], c["token_ratio_ci_high"]) == ratio_bootstrap_ci([4], [4])
    assert c["token_ratio_ci_low"] <= c["token_ratio"] <= c["token_ratio_ci_high"]


def _qa(qid: str, em: float, tokens: int = 100) -> dict:
    return {"id": qid, "status": "ok", "scores": {"em": em, "f1": em, "match": em}, "evidence_tokens": tokens}


def test_paired_table_and_skip_count_honour_question_ids(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = tmp_path / "paired"
    canopy = _run(root / "nq" / "canopy", [_qa("q1", 1), _qa("q2", 1), _qa("q3", 1)], ["q1", "q2"])
    _run(root / "nq" / "vanilla", [_qa("q1", 1), _qa("q2", 0), _qa("q3", 0)], ["q1", "q2"])
    n, per, diffs = paired.paired_rows(paired.load(root)["nq"], n_boot=200)
    assert n == 2
    assert [row[2] for row in per] == ["100.0", "50.0"]  # EM over q1, q2 (every record: 100.0, 33.3)
    assert diffs[0][1].startswith("+50.0 ")  # canopy - vanilla in EM points (every record: +66.7)
    # scripts/paired.sh's "already answered n" count
    paired.main(["--answered", str(canopy)])
    assert capsys.readouterr().out.strip() == "2"
