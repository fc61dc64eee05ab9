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
Multiple-choice questions are not judged (their accuracy is already exact).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from canopy_lit.eval.harness import read_question_ids
from canopy_lit.eval.records import RecordLog, read_predictions
from canopy_lit.eval.summary import judge_summary
from canopy_lit.io import atomic_write_text
from canopy_lit.llm import prompts
from canopy_lit.llm.base import LLM
from canopy_lit.llm.parsing import PARSE_STATS, ParseStats, p_yes, parse_label

JUDGEMENTS = "judgements.jsonl"
# Backend knobs that change speed or plumbing, not the judge's replies: left out of the fingerprint.
_OPERATIONAL_KEYS = frozenset({
    "_convert_", "n_threads", "n_parallel", "n_batch", "timeout", "max_retries", "max_concurrency",
    "calibration", "cache_prompt", "api_key_env", "tokenizer", "multimodal",
})  # fmt: skip


def judge_fingerprint(llm_config: Mapping[str, Any] | str, *, max_tokens: int, logprobs: int) -> str:
    """A short hash naming the judge: its model config (minus operational knobs), prompt and options.

    Args:
        llm_config: the resolved ``llm`` config (``_target_``, model, base URL, context, seed, ...),
            or any string that names the judge model (library use without a config).
    """
    if isinstance(llm_config, Mapping):
        ident: Any = {k: llm_config[k] for k in sorted(llm_config) if k not in _OPERATIONAL_KEYS}
    else:
        ident = str(llm_config)
    probe = prompts.answer_judge("{question}", ["{gold}"], "{prediction}")  # the template, not one question
    blob = json.dumps({"llm": ident, "prompt": probe, "max_tokens": max_tokens, "logprobs": logprobs},
                      sort_keys=True, default=str)  # fmt: skip
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cache_key(question_id: str, question: str, answers: Sequence[str], prediction: str, fingerprint: str) -> str:
    """The verdict's identity: everything the judge prompt shows, and the judge."""
    blob = json.dumps([question_id, question, [str(a) for a in answers], prediction, fingerprint])
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


@dataclass
class Judgement:
    """One verdict, as stored in ``judgements.jsonl`` (``id`` is the cache key, not the question id).

    Attributes:
        verdict: True = correct, False = wrong, None = no readable verdict (scores 0).
        p_yes: P(yes) / (P(yes) + P(no)) of the first reply token when log-probs were asked (for analysis).
    """

    id: str
    question_id: str
    answers: list[str]
    prediction: str
    judge: str
    verdict: bool | None
    raw: str
    p_yes: float | None = None


class AnswerJudge:
    """Asks ``llm`` whether a prediction is correct; verdict read with ``parsing.parse_label``.

    Args:
        llm: any backend of the ``LLM`` protocol (calls are logged under the role ``judge``).
        fingerprint: names the judge model in cache keys (``judge_fingerprint``).
        max_tokens: reply budget (the verdict is its first word).
        logprobs: top alternatives per token to ask for (0 for servers without log-probs); only
            recorded as ``p_yes``, the verdict comes from the text.
        stats: parse counter (``kind="judge"``).
    """

    def __init__(
        self,
        llm: LLM,
        fingerprint: str,
        *,
        max_tokens: int = 16,
        logprobs: int = 5,
        stats: ParseStats | None = None,
    ) -> None:
        self.llm = llm
        self.fingerprint = fingerprint
        self.max_tokens = max_tokens
        self.logprobs = logprobs
        self.stats = stats or PARSE_STATS

    def __call__(self, question_id: str, question: str, answers: Sequence[str], prediction: str) -> Judgement:
        reply = self.llm.chat(
            prompts.answer_judge(question, answers, prediction),
            role="judge", max_tokens=self.max_tokens, logprobs=self.logprobs, temperature=0.0,
        )  # fmt: skip
        label, parsed = parse_label(reply.text, prompts.JUDGE_LABELS, default="no", kind="judge", stats=self.stats)
        return Judgement(
            id=cache_key(question_id, question, answers, prediction, self.fingerprint),
            question_id=question_id,
            answers=[str(a) for a in answers],
            prediction=prediction,
            judge=self.fingerprint,
            verdict=(label == "yes") if parsed else None,
            raw=reply.text,
            p_yes=p_yes(reply.top_logprobs[0]) if reply.top_logprobs else None,
        )


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
    from rich.progress import track

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


def judge_from_config(cfg: Mapping[str, Any], llm: LLM | None = None) -> AnswerJudge:
    """An ``AnswerJudge`` from an evaluate config (``llm`` group + ``judge`` block).

    Args:
        cfg: composed evaluate config; ``cfg.judge`` holds ``max_tokens`` / ``logprobs``.
        llm: an already built backend for ``cfg.llm`` (evaluation reuses the run's); None builds one.
    """
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    jcfg = cfg.get("judge") or {}
    max_tokens, logprobs = int(jcfg.get("max_tokens", 16)), int(jcfg.get("logprobs", 5))
    llm_cfg = OmegaConf.to_container(cfg["llm"], resolve=True) if OmegaConf.is_config(cfg["llm"]) else dict(cfg["llm"])
    fp = judge_fingerprint(llm_cfg, max_tokens=max_tokens, logprobs=logprobs)
    return AnswerJudge(llm if llm is not None else instantiate(cfg["llm"]), fp, max_tokens=max_tokens,
                       logprobs=logprobs)  # fmt: skip


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
    from hydra import compose, initialize_config_dir

    from canopy_lit.eval.records import RunLock, RunLocked
    from canopy_lit.llm.base import LLMError
    from canopy_lit.schema import CONFIG_DIR

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
    judge = judge_from_config(cfg)
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
