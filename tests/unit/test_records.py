"""Durable records: torn last lines are cut, finished ids are skipped, failures are data."""

from __future__ import annotations

import json

import pytest

from canopy_lit.eval.harness import run_questions
from canopy_lit.eval.records import RecordLog
from canopy_lit.pipeline.trace import QuestionRecord
from canopy_lit.types import Question


def test_torn_last_line_is_cut_and_resume_skips_done(tmp_path) -> None:
    path = tmp_path / "predictions.jsonl"
    path.write_text(json.dumps({"id": "a", "status": "ok"}) + "\n" + '{"id": "b", "sta')
    logbook = RecordLog(path)
    assert "a" in logbook and "b" not in logbook and logbook.repaired_bytes > 0
    logbook.append({"id": "b", "status": "ok"})
    logbook.close()
    assert [json.loads(x)["id"] for x in path.read_text().splitlines()] == ["a", "b"]


def test_corrupt_middle_line_names_file_and_line(tmp_path) -> None:
    path = tmp_path / "predictions.jsonl"
    path.write_text('{"id": "a"}\nnot json\n{"id": "c"}\n')
    with pytest.raises(ValueError, match=r"predictions.jsonl: line 2"):
        RecordLog(path)


def test_retry_failed_rewrites_without_failed_records(tmp_path) -> None:
    path = tmp_path / "predictions.jsonl"
    path.write_text('{"id": "a", "status": "ok"}\n{"id": "b", "status": "failed"}\n')
    with RecordLog(path, retry_failed=True) as logbook:
        assert "b" not in logbook and "a" in logbook
    assert len(path.read_text().splitlines()) == 1


def questions(n: int) -> list[Question]:
    return [Question(f"q{i}", f"What is {i}?", [str(i)], "unit") for i in range(n)]


def test_run_questions_records_failures_and_resumes(tmp_path) -> None:
    calls: list[str] = []

    def answer(q: Question) -> QuestionRecord:
        calls.append(q.id)
        if q.id == "q1":
            raise RuntimeError("LLM unreachable")
        return QuestionRecord(q.id, q.text, q.answers, q.benchmark, prediction=q.answers[0])

    recs = run_questions(questions(3), answer, tmp_path, progress=False)
    assert {r["id"]: r["status"] for r in recs} == {"q0": "ok", "q1": "failed", "q2": "ok"}
    assert "RuntimeError: LLM unreachable" in next(r["error"] for r in recs if r["id"] == "q1")
    assert recs[0]["scores"]["em"] == 1.0
    calls.clear()
    run_questions(questions(4), answer, tmp_path, progress=False)
    assert calls == ["q3"]  # finished (and failed) ids are skipped
    run_questions(questions(4), answer, tmp_path, progress=False, retry_failed=True)
    assert calls == ["q3", "q1"]
    lines = (tmp_path / "predictions.jsonl").read_text().splitlines()
    assert sorted(json.loads(x)["id"] for x in lines) == ["q0", "q1", "q2", "q3"]


def test_concurrent_run_writes_each_question_once(tmp_path) -> None:
    def answer(q: Question) -> QuestionRecord:
        return QuestionRecord(q.id, q.text, q.answers, q.benchmark, prediction="x")

    recs = run_questions(questions(20), answer, tmp_path, concurrency=4, progress=False)
    lines = (tmp_path / "predictions.jsonl").read_text().splitlines()
    assert len(recs) == 20 and len(lines) == 20 and len({json.loads(x)["id"] for x in lines}) == 20


def _encoder_config(target: str, backbone: str = "minilm") -> dict:
    return {"encoder": {"_target_": target, "backbone": backbone, "adapter": None, "max_seq_length": 512},
            "retrieval": {"k": 5}}  # fmt: skip


def test_settings_changes_name_each_changed_key(tmp_path) -> None:
    """settings.json is what a resume is compared with: the same config is no change, another encoder class or
    another k is one line each; a folder without settings.json recorded none to continue under."""
    from canopy_lit.eval.records import settings_changes, write_run_settings

    text = _encoder_config("canopy_lit.encoders.text.TextEncoder")
    assert settings_changes(tmp_path, text) == [("settings.json", "<absent>", "<this run's settings>")]
    write_run_settings(tmp_path, text)
    assert settings_changes(tmp_path, text) == []
    assert settings_changes(tmp_path, _encoder_config("canopy_lit.encoders.qwen3vl.Qwen3VLEncoder")) == [
        ("encoder._target_", "canopy_lit.encoders.text.TextEncoder", "canopy_lit.encoders.qwen3vl.Qwen3VLEncoder")
    ]
    assert settings_changes(tmp_path, text | {"retrieval": {"k": 3}}) == [("retrieval.k", 5, 3)]
