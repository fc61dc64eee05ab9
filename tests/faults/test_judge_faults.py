"""LLM-as-judge under faults: unreadable verdicts, an interrupted judge, another judge model, a busy
run folder and a dead judge backend. Nothing may crash, be judged twice, or reuse a stale verdict.

Judges are the project's ``SimulatedLLM`` (canned replies, chosen per test) and, for the dead
backend, the OpenAI-compatible backend pointed at a closed loopback port.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from evaluate_runner import DEAD_SERVER
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from canopy_lit.eval.judge import JUDGEMENTS, judge_run, main
from canopy_lit.eval.records import RecordLog, RunLock
from canopy_lit.llm.base import LLMError
from canopy_lit.llm.judge import AnswerJudge, judge_fingerprint
from canopy_lit.llm.simulated import SimulatedLLM
from canopy_lit.schema import CONFIG_DIR


def make_run(run_dir: Path, n: int = 5) -> Path:
    with RecordLog(run_dir / "predictions.jsonl") as book:
        for i in range(n):
            book.append({"id": f"q{i}", "question": f"What is {i}?", "answers": [str(i)], "benchmark": "unit",
                         "prediction": str(i), "status": "ok", "scores": {"em": 1.0, "f1": 1.0}})  # fmt: skip
    (run_dir / "metrics.json").write_text(json.dumps({"eval/n": float(n), "eval/f1": 1.0}))
    return run_dir


def judgements(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / JUDGEMENTS).read_text().splitlines() if x.strip()]


class _DiesAfter(SimulatedLLM):
    """A judge backend that answers ``n`` calls, then fails as a server going down would."""

    def __init__(self, n: int) -> None:
        super().__init__(answer="Yes")
        self.left = n

    def chat(self, messages, **kw):  # type: ignore[override]
        if self.left == 0:
            raise LLMError("openai backend: POST http://127.0.0.1:9/v1/chat/completions failed: ConnectError")
        self.left -= 1
        return super().chat(messages, **kw)


def test_unparsable_verdicts_are_counted_score_zero_and_never_crash(tmp_path: Path, capsys) -> None:
    run = make_run(tmp_path, n=4)
    status = main([str(run), "llm=simulated", "llm.answer=It depends on the source.", "judge.logprobs=0"])
    assert status == 0
    m = json.loads((run / "metrics.json").read_text())
    assert m["eval/judge_unparsed"] == 4 and m["eval/judge"] == 0.0 and m["eval/judge_n"] == 4
    assert m["eval/f1"] == 1.0  # the run's own metrics stay
    assert all(j["verdict"] is None for j in judgements(run))
    assert "unparsed=4" in capsys.readouterr().out


def test_interrupted_judge_resumes_with_only_the_rest(tmp_path: Path) -> None:
    run = make_run(tmp_path, n=5)
    with pytest.raises(LLMError):
        judge_run(run, AnswerJudge(_DiesAfter(2), "fp", logprobs=0))
    assert [j["question_id"] for j in judgements(run)] == ["q0", "q1"]  # fsynced as they came
    with (run / JUDGEMENTS).open("a") as fh:  # a SIGKILL in the middle of the third line
        fh.write('{"id": "torn", "question_id": "q2", "verd')
    again = SimulatedLLM(answer="Yes")
    out = judge_run(run, AnswerJudge(again, "fp", logprobs=0))
    assert again.log.summary()["calls"] == 3 and (out["judged"], out["cached"]) == (3, 2)
    assert sorted(j["question_id"] for j in judgements(run)) == [f"q{i}" for i in range(5)]  # each once
    assert out["eval/judge"] == 1.0 and out["eval/judge_n"] == 5


def test_another_judge_model_gets_its_own_cache_entries(tmp_path: Path) -> None:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        smol, qwen = (OmegaConf.to_container(compose("evaluate", overrides=[f"llm={name}"]).llm, resolve=True)
                      for name in ("llamacpp_smollm2", "llamacpp_qwen1.5b"))  # fmt: skip
    fp_smol, fp_qwen = (judge_fingerprint(c, max_tokens=16, logprobs=0) for c in (smol, qwen))
    assert fp_smol != fp_qwen
    run = make_run(tmp_path, n=3)
    says_yes, says_no = SimulatedLLM(answer="Yes"), SimulatedLLM(answer="No")
    assert judge_run(run, AnswerJudge(says_yes, fp_smol, logprobs=0))["eval/judge"] == 1.0
    # the other model's verdicts are not reused: it is asked about every question
    assert judge_run(run, AnswerJudge(says_no, fp_qwen, logprobs=0))["eval/judge"] == 0.0
    assert says_no.log.summary()["calls"] == 3
    # and the first model's verdicts are still there for it
    again = judge_run(run, AnswerJudge(SimulatedLLM(answer="No"), fp_smol, logprobs=0))
    assert again["eval/judge"] == 1.0 and again["cached"] == 3
    assert len(judgements(run)) == 6


def test_changed_prediction_is_judged_again(tmp_path: Path) -> None:
    run = make_run(tmp_path, n=2)
    judge_run(run, AnswerJudge(SimulatedLLM(answer="Yes"), "fp", logprobs=0))
    with RecordLog(run / "predictions.jsonl") as book:  # a retried question with a new prediction
        book.append({"id": "q1", "question": "What is 1?", "answers": ["1"], "benchmark": "unit",
                     "prediction": "one", "status": "ok", "scores": {"em": 0.0, "f1": 0.0}})  # fmt: skip
    out = judge_run(run, AnswerJudge(SimulatedLLM(answer="Yes"), "fp", logprobs=0))
    assert (out["judged"], out["cached"]) == (1, 1)


def test_busy_run_folder_and_dead_backend_exit_1_without_touching_metrics(tmp_path: Path, capsys) -> None:
    run = make_run(tmp_path / "run", n=2)
    before = (run / "metrics.json").read_text()
    with RunLock(run):  # an evaluation is writing this folder
        assert main([str(run), "llm=simulated"]) == 1
    assert "run folder in use" in capsys.readouterr().err
    assert main([str(run), "llm=openai", f"llm.base_url={DEAD_SERVER}", "llm.max_retries=0"]) == 1
    err = capsys.readouterr().err
    assert "judge: error:" in err and "failed after 1 attempt(s): ConnectError" in err
    assert (run / "metrics.json").read_text() == before
    assert not (run / JUDGEMENTS).exists() or judgements(run) == []
    assert main([str(tmp_path / "nowhere"), "llm=simulated"]) == 2  # no predictions.jsonl: usage error


def _hotpot_run(run_dir: Path, n: int) -> tuple[list, list[dict]]:
    """(questions, records) of an evaluation of the first ``n`` real HotpotQA questions (reader: the gold)."""
    from canopy_lit.data import load_benchmark
    from canopy_lit.eval.harness import run_questions
    from canopy_lit.pipeline.trace import QuestionRecord

    questions = load_benchmark("hotpotqa").questions[:n]
    records = run_questions(
        questions, lambda q: QuestionRecord(q.id, q.text, q.answers, q.benchmark, prediction=q.answers[0]),
        run_dir, progress=False,
    )  # fmt: skip
    return questions, records


def test_corrected_gold_answer_is_judged_again(tmp_path: Path) -> None:
    """The verdict cache keyed on id + prediction reused a verdict given against the old gold."""
    questions, _ = _hotpot_run(tmp_path, 3)
    first = judge_run(tmp_path, AnswerJudge(SimulatedLLM(answer="Yes"), "fp", logprobs=0))
    assert (first["judged"], first["cached"]) == (3, 0)
    q = questions[1]
    with RecordLog(tmp_path / "predictions.jsonl") as book:  # the question rerun after its gold was corrected
        old = book.done[q.id]
        book.append({**old, "answers": ["a corrected gold answer"]})
    says_no = SimulatedLLM(answer="No")
    again = judge_run(tmp_path, AnswerJudge(says_no, "fp", logprobs=0))
    assert (again["judged"], again["cached"]) == (1, 2) and again["eval/judge"] == pytest.approx(2 / 3)
    assert judgements(tmp_path)[-1]["answers"] == ["a corrected gold answer"]


def test_judge_covers_exactly_the_runs_questions(tmp_path: Path, capsys) -> None:
    """A folder evaluated on 3 questions, then on 2 (``limit``): eval/n is 2, and the judge
    judged all 3 records of predictions.jsonl (judge_n 3)."""
    from canopy_lit.eval.summary import summarize

    _hotpot_run(tmp_path, 3)
    questions, recs = _hotpot_run(tmp_path, 2)
    (tmp_path / "metrics.json").write_text(json.dumps(summarize(recs)))
    out = judge_run(tmp_path, AnswerJudge(SimulatedLLM(answer="Yes"), "fp", logprobs=0))
    assert out["eval/judge_n"] == json.loads((tmp_path / "metrics.json").read_text())["eval/n"] == 2
    assert sorted(j["question_id"] for j in judgements(tmp_path)) == sorted(q.id for q in questions)
    # a run that has not finished (an id of the run without a record) is not judged on part of its questions
    from canopy_lit.eval.harness import QUESTION_IDS

    (tmp_path / QUESTION_IDS).write_text(json.dumps([q.id for q in questions] + ["never-answered"]))
    assert main([str(tmp_path), "llm=simulated"]) == 1
    err = capsys.readouterr().err
    assert f"judge: error: {tmp_path}: 1 of the run's 3 questions have no record in predictions.jsonl" in err
    assert "'never-answered'" in err
