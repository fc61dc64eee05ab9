"""LLM-as-judge (``canopy_lit.eval.judge``) without a model: prompt, verdict parsing, cache keys, metrics.

The judge backend here is ``SimulatedLLM`` (the project's canned-reply backend) with a fixed reply,
so each test knows exactly what the judge said; the real-model path is tests/integration/test_judge_real.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from canopy_lit.eval.judge import JUDGEMENTS, judge_run
from canopy_lit.eval.records import RecordLog
from canopy_lit.eval.summary import judge_summary
from canopy_lit.llm import prompts
from canopy_lit.llm.judge import AnswerJudge, cache_key, judge_fingerprint
from canopy_lit.llm.parsing import ParseStats
from canopy_lit.llm.simulated import SimulatedLLM
from canopy_lit.metrics import bootstrap_ci


def write_run(run_dir: Path, records: list[dict]) -> None:
    with RecordLog(run_dir / "predictions.jsonl") as book:
        for r in records:
            book.append(r)


def rec(qid: str, prediction: str, status: str = "ok", scores: dict | None = None) -> dict:
    return {"id": qid, "question": f"What is {qid}?", "answers": [f"gold {qid}"], "benchmark": "unit",
            "prediction": prediction, "status": status, "scores": scores or {"em": 0.0, "f1": 0.0}}  # fmt: skip


def test_prompt_carries_question_every_gold_answer_and_the_prediction() -> None:
    msgs = prompts.answer_judge("Who wrote Hamlet?", ["Shakespeare", "William Shakespeare"], "Shakespeare")
    text = msgs[-1]["content"]
    assert "Question: Who wrote Hamlet?" in text
    assert "- Shakespeare\n- William Shakespeare" in text and "Predicted answer: Shakespeare" in text
    assert text.rstrip().endswith("Answer Yes or No.")
    assert "(empty)" in prompts.answer_judge("q", ["a"], "  ")[-1]["content"]


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [("Yes", True), ("No.", False), ("yes, it matches", True), ('{"label": "no"}', False),
     ("I cannot tell from this.", None), ("", None)],
)  # fmt: skip
def test_verdict_read_with_the_label_parser_and_unparsed_counted(reply: str, verdict: bool | None) -> None:
    stats = ParseStats()
    judge = AnswerJudge(SimulatedLLM(answer=reply), "fp", logprobs=0, stats=stats)
    j = judge("q1", "What is 1?", ["1"], "one")
    assert j.verdict is verdict and j.raw == reply
    assert stats.as_dict()["judge"] == {"attempts": 1, "failures": int(verdict is None)}
    assert judge.llm.log.summary()["by_role"]["judge"]["calls"] == 1


def test_fingerprint_names_model_prompt_and_options_but_not_operational_knobs() -> None:
    smol = {"_target_": "canopy_lit.llm.llamacpp.LlamaCppLLM", "model": "smollm2-135m", "n_ctx": 2048, "n_threads": 1}
    fp = judge_fingerprint(smol, max_tokens=16, logprobs=5)
    assert fp == judge_fingerprint({**smol, "n_threads": 8, "calibration": {"x": 1.0}}, max_tokens=16, logprobs=5)
    assert fp != judge_fingerprint({**smol, "model": "qwen2.5-1.5b"}, max_tokens=16, logprobs=5)
    assert fp != judge_fingerprint(smol, max_tokens=32, logprobs=5)
    shown = ("q1", "Capital of France?", ["Paris"], "Paris")
    variants = [shown, ("q2", *shown[1:]), ("q1", "Capital of Italy?", *shown[2:]), (*shown[:2], ["Lyon"], "Paris"),
                (*shown[:3], "paris")]  # fmt: skip
    assert len({cache_key(*v, fp) for v in variants} | {cache_key(*shown, "other judge")}) == 6


def test_judge_summary_uses_the_f1_bootstrap_ci_keys() -> None:
    scores = [1.0, 0.0, 1.0, 1.0, 0.0]
    m = judge_summary(scores, unparsed=1)
    assert m["eval/judge"] == pytest.approx(0.6)
    assert (m["eval/judge_ci_low"], m["eval/judge_ci_high"]) == bootstrap_ci(scores)
    assert m["eval/judge_n"] == 5 and m["eval/judge_unparsed"] == 1
    assert judge_summary([], unparsed=0) == {"eval/judge_n": 0.0, "eval/judge_unparsed": 0.0}


def test_judge_run_scores_failed_as_zero_skips_choices_and_keeps_existing_metrics(tmp_path: Path) -> None:
    write_run(tmp_path, [rec("a", "gold a"), rec("b", "x", status="failed"),
                         rec("c", "(B)", scores={"accuracy": 1.0, "unparsed_choice": 0.0})])  # fmt: skip
    (tmp_path / "metrics.json").write_text(json.dumps({"eval/f1": 0.5, "eval/judge_ci_low": 9.0}))
    judge = AnswerJudge(SimulatedLLM(answer="Yes"), "fp", logprobs=0)
    out = judge_run(tmp_path, judge)
    assert judge.llm.log.summary()["calls"] == 1  # only the answered open question reaches the judge
    assert out["eval/judge"] == 0.5 and out["eval/judge_n"] == 2 and out["judged"] == 1
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["eval/f1"] == 0.5 and m["eval/judge"] == 0.5 and m["eval/judge_ci_low"] != 9.0
    (line,) = (tmp_path / JUDGEMENTS).read_text().splitlines()
    assert json.loads(line)["question_id"] == "a" and json.loads(line)["verdict"] is True
