"""LLM-as-judge on real parts: the real SmolLM2-135M (llama.cpp) judging records of 3 bundled HotpotQA
questions through the post-hoc command, and ``evaluate.py judge.enabled=true`` end to end.

SmolLM2-135M is too weak to be a trustworthy judge, so the first test checks the plumbing on a real
model (verdicts read, cached, reported with CIs, a rerun makes no call), not the verdicts themselves.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from canopy_lit.data import load_split
from canopy_lit.eval.judge import JUDGEMENTS, main
from canopy_lit.eval.records import RecordLog
from canopy_lit.eval.summary import score_record
from canopy_lit.pipeline.trace import QuestionRecord

ROOT = Path(__file__).resolve().parents[2]


def hotpot_run(run_dir: Path) -> list[QuestionRecord]:
    """predictions.jsonl of 3 bundled HotpotQA test questions: right, wrong, and failed."""
    _, questions = load_split("hotpotqa", split="test")
    recs = [
        QuestionRecord(questions[0].id, questions[0].text, list(questions[0].answers), "hotpotqa",
                       prediction=questions[0].answers[0]),
        QuestionRecord(questions[1].id, questions[1].text, list(questions[1].answers), "hotpotqa",
                       prediction="the Eiffel Tower"),
        QuestionRecord(questions[2].id, questions[2].text, list(questions[2].answers), "hotpotqa",
                       status="failed", error="LLMError: backend down"),
    ]  # fmt: skip
    with RecordLog(run_dir / "predictions.jsonl") as book:
        for r in recs:
            d = r.to_dict()
            d["scores"] = score_record(d)
            book.append(d)
    (run_dir / "metrics.json").write_text(json.dumps({"eval/n": 3.0, "eval/f1": 1 / 3}))
    return recs


def test_smollm2_judges_bundled_hotpotqa_records_once(smollm2_path: Path, tmp_path: Path, capsys) -> None:
    recs = hotpot_run(tmp_path)
    assert main([str(tmp_path), "llm=llamacpp_smollm2", "llm.n_threads=1"]) == 0
    assert "judged now 2, cached 0" in capsys.readouterr().out
    lines = [json.loads(x) for x in (tmp_path / JUDGEMENTS).read_text().splitlines()]
    assert [j["question_id"] for j in lines] == [recs[0].id, recs[1].id]  # the failed one costs no call
    assert all(j["raw"].strip() and j["p_yes"] is not None for j in lines)
    m = json.loads((tmp_path / "metrics.json").read_text())
    verdicts = [j["verdict"] for j in lines]
    assert m["eval/judge"] == sum(v is True for v in verdicts) / 3  # the failed question scores 0
    assert m["eval/judge_unparsed"] == sum(v is None for v in verdicts) and m["eval/judge_n"] == 3
    assert m["eval/judge_ci_low"] <= m["eval/judge"] <= m["eval/judge_ci_high"]
    assert m["eval/f1"] == 1 / 3
    # rerun: every verdict from the cache, same metrics, no new line
    assert main([str(tmp_path), "llm=llamacpp_smollm2", "llm.n_threads=2"]) == 0  # threads: same judge
    assert "judged now 0, cached 2" in capsys.readouterr().out
    assert json.loads((tmp_path / "metrics.json").read_text()) == m
    assert len((tmp_path / JUDGEMENTS).read_text().splitlines()) == 2


def test_evaluate_with_judge_enabled_reports_eval_judge(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cmd = [sys.executable, str(ROOT / "evaluate.py"), f"hydra.run.dir={run_dir}", "progress=false",
           "method=no_retrieval", "llm=simulated", "data=hotpotqa", "data.split=test", "limit=3",
           "judge.enabled=true"]  # fmt: skip
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    m = json.loads((run_dir / "metrics.json").read_text())
    assert m["eval/judge_n"] == 3 and {"eval/judge", "eval/judge_ci_low", "eval/judge_ci_high"} <= set(m)
    lines = [json.loads(x) for x in (run_dir / JUDGEMENTS).read_text().splitlines()]
    # the simulated backend answers a yes/no prompt asked with log-probs by "No" on its first call
    assert len(lines) == 3 and all(j["verdict"] is False for j in lines) and m["eval/judge"] == 0.0
    preds = [json.loads(x) for x in (run_dir / "predictions.jsonl").read_text().splitlines()]
    assert all("judge" not in r["llm_calls"] for r in preds)  # judge calls never count as the method's
