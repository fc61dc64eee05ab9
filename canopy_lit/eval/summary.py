"""Flat metrics of a run (``eval/*``, ``time/*``) from its per-question records, and the run's table.md."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from canopy_lit.eval.records import plain_config, run_axes
from canopy_lit.markdown import md_table
from canopy_lit.metrics import (
    bootstrap_ci,
    choice_accuracy,
    choice_letter,
    exact_match,
    f1_score,
    match_score,
)
from canopy_lit.types import STAGES

log = logging.getLogger(__name__)


def score_record(rec: Mapping[str, Any], choices: int | None = None) -> dict[str, float]:
    """EM / F1 / Match (gold contained in the prediction) for open answers, accuracy for multiple choice.

    Multiple choice also records ``unparsed_choice`` (1 when no option letter could be read: the
    question scores 0, and the share of such replies is reported as ``eval/unparsed_choice``).
    """
    pred, answers = rec.get("prediction") or "", rec.get("answers") or []
    if choices:
        return {
            "accuracy": choice_accuracy(pred, answers[0] if answers else "", choices),
            "unparsed_choice": float(choice_letter(pred, choices) is None),
        }
    return {"em": exact_match(pred, answers), "f1": f1_score(pred, answers), "match": match_score(pred, answers)}


def duplicate_rates(records: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Shares of retrieved items that were already held, pooled over questions.

    ``followup_duplicate_rate``: duplicates / items retrieved in rounds >= 2 (the paper's figure;
    absent when no question reached a second round). ``duplicate_rate_all_rounds``: the same over
    every round, round 1 included (it has no duplicates, so this is always the lower of the two).
    """
    retrieved = [0, 0]  # [round 1, rounds >= 2]
    dups = [0, 0]
    for r in records:
        for i, rd in enumerate(r.get("rounds") or []):
            retrieved[i > 0] += len(rd.get("retrieved") or [])
            dups[i > 0] += int(rd.get("duplicates") or 0)
    total = sum(retrieved)
    out = {"duplicate_rate_all_rounds": sum(dups) / total if total else 0.0}
    if retrieved[1]:
        out["followup_duplicate_rate"] = dups[1] / retrieved[1]
    return out


# Per-question flags in ``scores`` reported as a share of questions, without a confidence interval.
_COUNTED = {"unparsed_choice"}


def score_columns(records: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Metric -> one score per record, every metric over the same questions (all of ``records``).

    A failed question scores 0 on every metric of the run, whichever scores its record carries (a
    failed record knows only the metrics its failure path wrote, e.g. EM / F1 but not Match). A
    metric that some answered question was never scored on (a record written by another version of
    the scorer) is left out, with a warning naming it: a mean over fewer questions would not be
    comparable with the others.
    """
    names = sorted({k for r in records for k in (r.get("scores") or {})})
    answered = sum(r.get("status") == "ok" for r in records)
    columns: dict[str, list[float]] = {}
    for name in names:
        vals: list[float] = []
        unscored = 0
        for r in records:
            scores = r.get("scores") or {}
            if r.get("status") != "ok":
                vals.append(0.0)
            elif name in scores:
                vals.append(float(scores[name]))
            else:
                unscored += 1
        if unscored:
            log.warning("%s left out: %d of %d answered questions have no %r score (records written by another "
                        "version of the scorer)", name, unscored, answered, name)  # fmt: skip
            continue
        columns[name] = vals
    return columns


def summarize(records: Iterable[Mapping[str, Any]], prefix: str = "eval") -> dict[str, float]:
    """Means over questions; failed questions count in ``eval/failed`` and score 0 (never silently dropped).

    Every score (EM, F1, Match, accuracy, ...) is a mean over all ``eval/n`` questions (``score_columns``);
    costs (evidence tokens, LLM calls, rounds, latency) are means over the answered ones (a failed
    question has no cost to report, and a 0 would understate it).
    """
    recs = list(records)
    out: dict[str, float] = {f"{prefix}/n": float(len(recs))}
    if not recs:
        return out
    ok = [r for r in recs if r.get("status") == "ok"]
    out[f"{prefix}/failed"] = float(len(recs) - len(ok))
    for k, vals in score_columns(recs).items():
        out[f"{prefix}/{k}"] = float(np.mean(vals))
        if k in _COUNTED:
            continue
        lo, hi = bootstrap_ci(vals)
        out[f"{prefix}/{k}_ci_low"], out[f"{prefix}/{k}_ci_high"] = lo, hi
    if ok:
        out[f"{prefix}/evidence_tokens"] = float(np.mean([r.get("evidence_tokens", 0) for r in ok]))
        out[f"{prefix}/llm_calls"] = float(np.mean([sum((r.get("llm_calls") or {}).values()) for r in ok]))
        roles = sorted({role for r in ok for role in (r.get("llm_calls") or {})})
        for role in roles:
            out[f"{prefix}/llm_calls/{role}"] = float(np.mean([(r.get("llm_calls") or {}).get(role, 0) for r in ok]))
        if any(r.get("llm_tokens") for r in ok):
            # Prompt + completion tokens, and the prompt tokens the backend had to prefill (not served
            # from its prefix / KV cache): the cost that prefix reuse cuts.
            out[f"{prefix}/llm_tokens"] = float(np.mean([sum((r.get("llm_tokens") or {}).values()) for r in ok]))
            out[f"{prefix}/prefill_tokens"] = float(
                np.mean([sum((r.get("llm_prefill_tokens") or {}).values()) for r in ok])
            )
        out[f"{prefix}/rounds"] = float(np.mean([len(r.get("rounds") or []) for r in ok]))
        # IRCoT / critic loops: share of questions that retrieved more than once (0 = never iterated).
        out[f"{prefix}/multi_retrieval_share"] = float(np.mean([len(r.get("rounds") or []) > 1 for r in ok]))
        for name, rate in duplicate_rates(ok).items():
            out[f"{prefix}/{name}"] = rate
        out[f"{prefix}/latency_s"] = float(np.mean([r.get("latency_s", 0.0) for r in ok]))
        kept = [k for r in ok for rd in r.get("rounds") or [] for k in rd.get("kept", [])]
        if kept:  # what the reader got after the cap (records written before the cap was traced: kept)
            out[f"{prefix}/kept_token_ratio"] = float(
                sum(k.get("delivered_tokens", k["kept_tokens"]) for k in kept)
                / max(1, sum(k["item_tokens"] for k in kept))
            )
        for stage in STAGES:
            secs = [(r.get("time_s") or {}).get(stage, 0.0) for r in ok]
            if any(secs):
                out[f"time/{stage}_s"] = float(np.sum(secs))
    return out


def judge_summary(scores: Sequence[float], unparsed: int, prefix: str = "eval") -> dict[str, float]:
    """``eval/judge`` (LLM-as-judge accuracy) with the same bootstrap CI keys as ``eval/f1``.

    Args:
        scores: (n,) per-question verdicts, 1 = judged correct; failed questions and unparsed
            verdicts are 0, as failed questions are for EM / F1.
        unparsed: judge replies with no readable verdict, reported as ``eval/judge_unparsed`` (a count).
    """
    if not scores:
        return {f"{prefix}/judge_n": 0.0, f"{prefix}/judge_unparsed": float(unparsed)}
    lo, hi = bootstrap_ci(scores)
    return {
        f"{prefix}/judge": float(np.mean(scores)),
        f"{prefix}/judge_ci_low": lo,
        f"{prefix}/judge_ci_high": hi,
        f"{prefix}/judge_n": float(len(scores)),
        f"{prefix}/judge_unparsed": float(unparsed),
    }


def run_setting(cfg: Any, axes: Sequence[str]) -> str:
    """The one-line setting under a run's table: ``axis=value`` for each of ``axes`` (``run_axes`` names,
    in that order) that the run sets. The values are run.json's: f0 shows as ``scorer=f0`` with no adapter,
    an adapter interpolated toward f0 as ``scorer=fθ×s``."""
    values = run_axes(plain_config(cfg))
    shown = {a: f"{v:g}" if isinstance(v, float) else str(v) for a in axes if (v := values.get(a)) is not None}
    return " ".join(f"{a}={v}" for a, v in shown.items())


def markdown_table(rows: list[Mapping[str, Any]], columns: list[str], setting: str = "") -> str:
    """A markdown table; floats to 3 significant decimals, missing cells blank."""

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return "" if np.isnan(v) else f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
        return "" if v is None else str(v)

    head = f"{setting}\n\n" if setting else ""
    return head + md_table(columns, [[cell(r.get(c)) for c in columns] for r in rows])
