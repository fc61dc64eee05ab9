"""Answer metrics and run summaries on hand-computed cases."""

from __future__ import annotations

import pytest

from canopy_lit.eval.summary import duplicate_rates, markdown_table, score_record, summarize
from canopy_lit.metrics import (
    bootstrap_ci,
    choice_accuracy,
    choice_letter,
    exact_match,
    f1_score,
    normalize_answer,
)


def test_squad_normalisation_and_em() -> None:
    assert normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert exact_match("the eiffel tower", ["Eiffel Tower"]) == 1.0
    assert exact_match("Paris, France", ["Paris"]) == 0.0


def test_f1_by_hand() -> None:
    # pred tokens {paris, france}, gold {paris}: P = 1/2, R = 1 -> F1 = 2/3
    assert f1_score("Paris France", ["Paris"]) == pytest.approx(2 / 3)
    assert f1_score("London", ["Paris", "London"]) == 1.0
    assert f1_score("", ["Paris"]) == 0.0


def test_choice_letter_parsing() -> None:
    assert choice_letter("(B) a red car") == "B"
    assert choice_letter("Answer: C.") == "C"
    assert choice_letter("I think it is E") is None
    assert choice_accuracy("(D)", "D") == 1.0 and choice_accuracy("A", "(B)") == 0.0


def test_hotpotqa_yes_no_rule_in_f1() -> None:
    # hotpot_evaluate_v1.py: yes / no / noanswer on either side and different -> F1 0, not token overlap.
    assert f1_score("yes it is", ["yes"]) == 0.0
    assert f1_score("no", ["no way"]) == 0.0 and f1_score("noanswer", ["the answer"]) == 0.0
    assert f1_score("Yes.", ["yes"]) == 1.0 and exact_match("Yes.", ["yes"]) == 1.0
    assert f1_score("yes it is", ["no", "yes it is"]) == 1.0  # best gold still wins
    assert f1_score("yes sir", ["sir yes"]) == 1.0  # neither side is a bare yes/no


def test_unparsed_choice_scores_zero_and_is_counted() -> None:
    assert choice_letter("a man rides a horse") is None  # an answer in words is no option letter
    assert choice_letter("A man rides a horse.") is None and choice_letter("b") == "B"
    assert choice_accuracy("a man rides a horse", "A") == 0.0
    recs = []
    for qid, pred in (("1", "A"), ("2", "a man rides a horse"), ("3", "(B) a dog"), ("4", "the answer is unclear")):
        r = {"id": qid, "status": "ok", "prediction": pred, "answers": ["A"]}
        r["scores"] = score_record(r, choices=4)
        recs.append(r)
    m = summarize(recs)
    assert m["eval/accuracy"] == 0.25 and m["eval/unparsed_choice"] == 0.5
    assert "eval/unparsed_choice_ci_low" not in m


def test_bootstrap_ci_brackets_the_mean() -> None:
    lo, hi = bootstrap_ci([0, 1, 1, 0, 1, 1, 1, 0, 1, 1])
    assert lo <= 0.7 <= hi and 0 <= lo < hi <= 1


def rec(qid: str, status: str = "ok", em: float = 1.0, tokens: int = 100, dups: int = 0) -> dict:
    return {
        "id": qid,
        "status": status,
        "scores": {"em": em, "f1": em},
        "evidence_tokens": tokens,
        "llm_calls": {"reader": 1, "critic": 2},
        "rounds": [{"retrieved": ["a", "b"], "duplicates": dups, "kept": [{"kept_tokens": 5, "item_tokens": 10}]}],
        "latency_s": 2.0,
        "time_s": {"reader": 1.5},
    }


def test_summary_counts_failures_as_zero_and_averages_costs() -> None:
    m = summarize([rec("1"), rec("2", em=0.0, tokens=300, dups=1), rec("3", status="failed")])
    assert m["eval/n"] == 3 and m["eval/failed"] == 1
    assert m["eval/em"] == pytest.approx(1 / 3)
    assert m["eval/evidence_tokens"] == 200
    assert m["eval/llm_calls"] == 3 and m["eval/llm_calls/critic"] == 2
    assert m["eval/duplicate_rate_all_rounds"] == pytest.approx(1 / 4)
    assert "eval/followup_duplicate_rate" not in m and "eval/duplicate_rate" not in m  # no round 2 anywhere
    assert m["eval/kept_token_ratio"] == pytest.approx(0.5)
    assert m["time/reader_s"] == 3.0


def test_kept_token_ratio_is_what_the_reader_got_after_the_cap() -> None:
    cut = rec("1")
    cut["rounds"] = [{"retrieved": ["a", "b"], "duplicates": 0, "kept": [
        {"kept_tokens": 100, "item_tokens": 200, "delivered_tokens": 40, "cap": "regions"},
        {"kept_tokens": 50, "item_tokens": 200, "delivered_tokens": 0, "cap": "dropped"},
    ]}]  # fmt: skip
    assert summarize([cut])["eval/kept_token_ratio"] == pytest.approx(40 / 400)


def test_followup_duplicate_rate_counts_rounds_two_and_later_only() -> None:
    # One question: round 1 fetches its one item, the only follow-up re-fetches it.
    one = {"id": "q", "status": "ok", "rounds": [{"retrieved": ["a"], "duplicates": 0}, {"retrieved": ["a"], "duplicates": 1}]}
    m = summarize([one])
    assert m["eval/followup_duplicate_rate"] == 1.0  # every follow-up item was already held
    assert m["eval/duplicate_rate_all_rounds"] == 0.5  # the old number, now under its honest name
    # Pooled over questions: 3 of the 4 follow-up items were held; 3 of 7 over all rounds.
    two = {"id": "r", "status": "ok", "rounds": [
        {"retrieved": ["b", "c"], "duplicates": 0}, {"retrieved": ["b"], "duplicates": 1},
        {"retrieved": ["d", "c"], "duplicates": 1}]}  # fmt: skip
    assert duplicate_rates([one, two]) == {"duplicate_rate_all_rounds": 3 / 7, "followup_duplicate_rate": 3 / 4}


def test_markdown_table() -> None:
    t = markdown_table([{"method": "canopy", "eval/f1": 0.51234}], ["method", "eval/f1"], "k = 10")
    assert t.splitlines()[0] == "k = 10" and "| canopy | 0.512 |" in t


def test_summary_reports_prefilled_tokens_per_question() -> None:
    """eval/prefill_tokens: prompt tokens the backend prefilled (not served from its prefix cache), per question."""
    a = {**rec("1"), "llm_tokens": {"critic": 900, "reader": 500}, "llm_prefill_tokens": {"critic": 600, "reader": 100}}
    b = {**rec("2"), "llm_tokens": {"critic": 300, "reader": 300}, "llm_prefill_tokens": {"critic": 300, "reader": 0}}
    m = summarize([a, b])
    assert m["eval/llm_tokens"] == pytest.approx((1400 + 600) / 2)
    assert m["eval/prefill_tokens"] == pytest.approx((700 + 300) / 2)
    assert "eval/prefill_tokens" not in summarize([rec("1")])  # records without LLM accounting


def test_every_score_is_over_the_same_questions_when_some_failed(tmp_path, caplog) -> None:
    """2 answered + 2 failed real HotpotQA questions. Failed records carry no Match score, so
    Match was a mean over the 2 answered questions only (1.0 next to EM 0.5)."""
    from canopy_lit.data import load_benchmark
    from canopy_lit.eval.harness import run_questions
    from canopy_lit.pipeline.trace import QuestionRecord
    from canopy_lit.types import Question

    questions = load_benchmark("hotpotqa").questions[:4]

    def answer(q: Question) -> QuestionRecord:
        if q.id in (questions[1].id, questions[3].id):
            raise RuntimeError("reader backend unreachable")
        return QuestionRecord(q.id, q.text, q.answers, q.benchmark, prediction=f"it is {q.answers[0]}")

    recs = run_questions(questions, answer, tmp_path, progress=False)
    m = summarize(recs)
    assert m["eval/n"] == 4 and m["eval/failed"] == 2
    assert (m["eval/em"], m["eval/match"]) == (0.0, 0.5)  # "it is <gold>": no exact match, gold contained
    assert m["eval/match_ci_high"] <= 1.0 and m["eval/f1"] < 0.5
    # a failed record written by any version (EM / F1 only) still scores 0 on Match
    old_failed = {"id": "x", "status": "failed", "scores": {"em": 0.0, "f1": 0.0}}
    assert summarize([*recs, old_failed])["eval/match"] == pytest.approx(2 / 5)
    # an answered record never scored on Match: the metric is left out and named, not averaged over fewer
    unscored = {**recs[0], "id": "y", "scores": {"em": 1.0, "f1": 1.0}}
    with caplog.at_level("WARNING"):
        m = summarize([*recs, unscored])
    assert "eval/match" not in m and m["eval/em"] == pytest.approx(1 / 5)
    assert "match left out: 1 of 3 answered questions have no 'match' score" in caplog.text


def test_a_resumed_run_in_another_file_order_gives_the_same_metrics(tmp_path) -> None:
    """Real HotpotQA questions answered in the question order, then the same records written in reverse
    order (a resumed run that re-answered some questions appends them last) and resumed: the records come
    back in the question order, so the bootstrap intervals (resampled by position) are the same."""
    import json

    from canopy_lit.data import load_benchmark
    from canopy_lit.eval.harness import run_questions
    from canopy_lit.pipeline.trace import QuestionRecord
    from canopy_lit.types import Question

    questions = load_benchmark("hotpotqa").questions[:40]

    def answer(q: Question) -> QuestionRecord:  # right on every third question
        right = int(q.id in {x.id for x in questions[::3]})
        return QuestionRecord(q.id, q.text, q.answers, q.benchmark, prediction=q.answers[0] if right else "no")

    straight = run_questions(questions, answer, tmp_path / "a", progress=False)
    lines = (tmp_path / "a" / "predictions.jsonl").read_text().splitlines()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "predictions.jsonl").write_text("".join(line + "\n" for line in reversed(lines)))
    resumed = run_questions(questions, answer, tmp_path / "b", progress=False)
    assert [r["id"] for r in resumed] == [q.id for q in questions] == [r["id"] for r in straight]
    assert [json.loads(line)["id"] for line in lines] == [q.id for q in questions]
    assert summarize(resumed) == summarize(straight)
