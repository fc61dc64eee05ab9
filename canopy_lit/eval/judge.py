"""LLM-as-judge answer correctness (``eval/judge``) over evaluation run folders, cached and resumable.

EM / F1 / Match reward surface overlap; a judge model asks whether the prediction *means* one of the
gold answers (``prompts.answer_judge``: question, gold answers, prediction -> Yes / No). Each verdict
is appended and fsynced to ``judgements.jsonl`` beside the run's ``predictions.jsonl``, keyed by
everything the judge is shown and who judges: question id, question text, gold answers, prediction and
judge fingerprint (the judge model's config, prompt and generation options). A rerun calls the judge
only for what is new, a killed run loses nothing, and a corrected gold answer, another judge model or
prompt never reuses a stale verdict. The judged questions are exactly the run's (``eval/n``: the ids of
its latest evaluation, ``harness.QUESTION_IDS``), not every record an earlier run left in the folder.
The score goes into the run's ``metrics.json`` as ``eval/judge`` with the bootstrap CI keys of
``eval/f1``, plus ``eval/judge_unparsed`` (replies with no readable verdict; they score 0) and
``eval/judge_n``.

Post hoc (any backend of ``configs/llm``; the run folder is locked while it is judged)::

    python -m canopy_lit.eval.judge RUN_DIR [RUN_DIR ...] [llm=llamacpp_smollm2] [llm.KEY=VALUE] [judge.KEY=VALUE]

or during evaluation with ``judge.enabled=true`` (``configs/evaluate.yaml``; the run's own LLM).
Multiple-choice questions are not judged (their accuracy is already exact). The judge role itself
(``AnswerJudge``, its fingerprint and cache key) is ``canopy_lit.llm.judge``, built by
``canopy_lit.pipeline.build.build_judge``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from rich.progress import track

from canopy_lit.eval.harness import read_question_ids
from canopy_lit.eval.records import RecordLog, RunLock, RunLocked, read_predictions
from canopy_lit.eval.summary import judge_summary
from canopy_lit.io import atomic_write_text
from canopy_lit.llm.base import LLMError
from canopy_lit.llm.judge import AnswerJudge, cache_key
from canopy_lit.pipeline.build import build_judge
from canopy_lit.schema import CONFIG_DIR

JUDGEMENTS = "judgements.jsonl"


def run_records(run_dir: Path) -> list[dict[str, Any]]:
    """The records of the questions of a run folder's latest evaluation, in its order.

    ``predictions.jsonl`` also keeps records of earlier runs into the folder (a larger ``limit``,
    questions since skipped by the reader); the run's own ids are in ``harness.QUESTION_IDS``. A folder
    without that file (written by an older version, or by a runner of its own) is judged whole.
    """
    records = read_predictions(run_dir / "predictions.jsonl")
    if not records:
        raise FileNotFoundError(f"{run_dir}: no predictions.jsonl records to judge")
    ids = read_question_ids(run_dir)
    if ids is None:
        return records
    by_id = {str(r["id"]): r for r in records}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise ValueError(
            f"{len(missing)} of the run's {len(ids)} questions have no record in predictions.jsonl "
            f"(first: {missing[0]!r}); finish the run (rerun the same command) before judging it"
        )
    return [by_id[i] for i in ids]


def judge_run(run_dir: str | Path, judge: AnswerJudge, *, progress: bool = False) -> dict[str, Any]:
    """Judge every open-answer question of a run folder and merge ``eval/judge*`` into its metrics.json.

    The questions judged are the run's (``run_records``). Verdicts already in ``judgements.jsonl`` for
    the same question, gold, prediction and judge are reused; new ones are appended one fsynced line
    each, so an interrupted call (a backend error propagates) keeps what it judged and a rerun judges
    only the rest. Failed questions score 0 without a call.

    Returns:
        the ``eval/judge*`` metrics plus ``judged`` (new calls) and ``cached`` (reused verdicts).

    Raises:
        FileNotFoundError: no ``predictions.jsonl`` records in ``run_dir``.
        ValueError: a question of the run has no record (the run has not finished).
    """
    run_dir = Path(run_dir)
    records = run_records(run_dir)
    open_answer = [r for r in records if "accuracy" not in (r.get("scores") or {})]
    scores: list[float] = []
    unparsed = judged = cached = 0
    with RecordLog(run_dir / JUDGEMENTS) as book:
        for rec in track(open_answer, description="judge", disable=not progress):
            if rec.get("status") != "ok":
                scores.append(0.0)  # failed questions score 0, as for EM / F1
                continue
            qid, pred = str(rec["id"]), str(rec.get("prediction") or "")
            question, answers = str(rec.get("question") or ""), [str(a) for a in rec.get("answers") or []]
            key = cache_key(qid, question, answers, pred, judge.fingerprint)
            if key in book:
                verdict = book.done[key].get("verdict")
                cached += 1
            else:
                j = judge(qid, question, answers, pred)
                book.append(asdict(j))
                verdict = j.verdict
                judged += 1
            unparsed += verdict is None
            scores.append(float(verdict is True))
    metrics = judge_summary(scores, unparsed)
    path = run_dir / "metrics.json"
    merged = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    merged = {k: v for k, v in merged.items() if not k.startswith("eval/judge")}  # no stale CI of another judge
    merged.update(metrics)
    atomic_write_text(path, json.dumps(merged, indent=2, sort_keys=True) + "\n")
    return {**metrics, "judged": judged, "cached": cached}


def _line(run_dir: Path, m: Mapping[str, Any]) -> str:
    if "eval/judge" not in m:
        return f"{run_dir}: nothing to judge (multiple-choice or empty run)"
    return (
        f"{run_dir}: eval/judge {m['eval/judge']:.3f} [{m['eval/judge_ci_low']:.3f}, {m['eval/judge_ci_high']:.3f}] "
        f"n={int(m['eval/judge_n'])} unparsed={int(m['eval/judge_unparsed'])} "
        f"(judged now {m['judged']}, cached {m['cached']})"
    )


_USAGE = (
    "usage: python -m canopy_lit.eval.judge RUN_DIR [RUN_DIR ...] [llm=NAME] [llm.KEY=VALUE] [judge.KEY=VALUE]\n"
    "  LLM-as-judge eval/judge for evaluation run folders (configs/llm/NAME.yaml; default: evaluate.yaml's llm);\n"
    "  verdicts cached in RUN_DIR/judgements.jsonl, metrics merged into RUN_DIR/metrics.json."
)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m canopy_lit.eval.judge RUN_DIR... [overrides]``: exit 0 done, 1 a run failed, 2 usage."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_USAGE, file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    overrides = [a for a in args if "=" in a]
    run_dirs = [Path(a) for a in args if "=" not in a]
    missing = [d for d in run_dirs if not (d / "predictions.jsonl").is_file()]
    if not run_dirs or missing:
        print(f"judge: error: no predictions.jsonl in {', '.join(map(str, missing)) or '(no RUN_DIR given)'}",
              file=sys.stderr)  # fmt: skip
        return 2
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("evaluate", overrides=overrides)
    judge = build_judge(cfg)
    status = 0
    try:
        for run_dir in run_dirs:
            try:
                with RunLock(run_dir):  # not while an evaluation (or another judge) writes this folder
                    print(_line(run_dir, judge_run(run_dir, judge, progress=sys.stderr.isatty())))
            except (RunLocked, LLMError, ValueError) as err:
                print(f"judge: error: {run_dir}: {err}", file=sys.stderr)
                status = 1
    finally:
        close = getattr(judge.llm, "close", None)
        if close:
            close()
    return status


if __name__ == "__main__":
    sys.exit(main())
