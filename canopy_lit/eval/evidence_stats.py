"""Statistics of evidence runs: per-question scores, the run's ``evidence/*`` metrics, and two runs compared.

Every interval is a 95% bootstrap over questions from ``canopy_lit.metrics`` (BCa, as for QA and
probe metrics): ``bootstrap_ci`` for means, ``ratio_bootstrap_ci`` for pooled ratios (gold recall,
kept ratio, a token ratio) and ``paired_bootstrap_ci`` for a difference over the same questions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from canopy_lit.eval.harness import read_question_ids
from canopy_lit.eval.records import read_predictions
from canopy_lit.metrics import bootstrap_ci, paired_bootstrap_ci, ratio_bootstrap_ci
from canopy_lit.types import STAGES, Question

EVIDENCE_COLUMNS = [
    "evidence/n",
    "evidence/answer_recall",
    "evidence/answer_recall_content",
    "evidence/gold_recall",
    "evidence/item_recall",
    "evidence/tokens",
    "evidence/kept_ratio",
]


def score_evidence(rec: Mapping[str, Any], question: Question) -> dict[str, float]:
    """Per-question scores of an evidence record (the harness stores them under ``scores``)."""
    ev = rec.get("evidence") or {}
    out: dict[str, float] = {"tokens": float(ev.get("tokens", 0))}
    if ev.get("answer_found") is not None:
        out["answer_recall"] = float(ev["answer_found"])
    if ev.get("answer_found_content") is not None:
        out["answer_recall_content"] = float(ev["answer_found_content"])
    if ev.get("gold_items"):
        out["item_recall"] = ev["gold_items_retrieved"] / ev["gold_items"]
    if ev.get("gold_leaves"):
        out["gold_recall"] = ev["gold_leaves_kept"] / ev["gold_leaves"]
    return out


def summarize_evidence(records: Sequence[Mapping[str, Any]], prefix: str = "evidence") -> dict[str, float]:
    """Flat ``evidence/*`` metrics (+ 95% CIs) and ``time/*`` from the run's records.

    Failed questions count in ``evidence/failed`` and as evidence without the answer.
    """
    recs = list(records)
    ok = [r for r in recs if r.get("status") == "ok"]
    out: dict[str, float] = {f"{prefix}/n": float(len(recs)), f"{prefix}/failed": float(len(recs) - len(ok))}
    if not recs:
        return out
    evs = [r.get("evidence") or {} for r in ok]

    def put(name: str, vals: Sequence[float]) -> None:
        if vals:
            out[f"{prefix}/{name}"] = float(np.mean(vals))
            out[f"{prefix}/{name}_ci_low"], out[f"{prefix}/{name}_ci_high"] = bootstrap_ci(vals)

    found = [float(e["answer_found"]) for e in evs if e.get("answer_found") is not None]
    found += [0.0] * (len(recs) - len(ok))  # a failed question delivered no evidence
    put("answer_recall", found)
    out[f"{prefix}/answer_recall_n"] = float(len(found))
    # The same questions, the answer looked up in the items' regions only (titles and headers left out).
    content = [float(e["answer_found_content"]) for e in evs if e.get("answer_found_content") is not None]
    if content:
        put("answer_recall_content", content + [0.0] * (len(recs) - len(ok)))
    for kind in sorted({str(e["answer_type"]) for e in evs if e.get("answer_type")}):
        sub = [
            float(e["answer_found"])
            for e in evs
            if e.get("answer_type") == kind and e.get("answer_found") is not None
        ]
        if sub:
            out[f"{prefix}/answer_recall/{kind}"] = float(np.mean(sub))
    put("item_recall", [e["gold_items_retrieved"] / e["gold_items"] for e in evs if e.get("gold_items")])
    for name, num, den in (
        ("gold_recall", "gold_leaves_kept", "gold_leaves"),
        ("kept_ratio", "kept_tokens", "item_tokens"),
    ):
        n, d = [float(e.get(num, 0)) for e in evs], [float(e.get(den, 0)) for e in evs]
        if sum(d):
            out[f"{prefix}/{name}"] = sum(n) / sum(d)
            out[f"{prefix}/{name}_ci_low"], out[f"{prefix}/{name}_ci_high"] = ratio_bootstrap_ci(n, d)
    put("tokens", [float(e.get("tokens", 0)) for e in evs])
    if evs and all("truncated_items" in e for e in evs):
        # The reader cap's effect: items cut or dropped per question, the share of questions it cut.
        out[f"{prefix}/tokens_before_cap"] = float(np.mean([e["tokens_before_cap"] for e in evs]))
        out[f"{prefix}/truncated_items"] = float(np.mean([e["truncated_items"] for e in evs]))
        out[f"{prefix}/truncated_questions"] = float(np.mean([e["truncated_items"] > 0 for e in evs]))
    budgets = [float(e["budget_tokens"]) for e in evs if "budget_tokens" in e]
    if budgets:
        out[f"{prefix}/budget_tokens"] = float(np.mean(budgets))
    out[f"{prefix}/latency_s"] = float(np.mean([r.get("latency_s", 0.0) for r in ok])) if ok else 0.0
    for stage in STAGES:
        secs = [(r.get("time_s") or {}).get(stage, 0.0) for r in ok]
        if any(secs):
            out[f"time/{stage}_s"] = float(np.sum(secs))
    return out


# --- paired comparison of two runs ---------------------------------------------------------------


def _paired_difference(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """mean(a - b) over paired questions and its 95% paired bootstrap CI (nan without questions)."""
    if not len(a):
        return float("nan"), float("nan"), float("nan")
    lo, hi = paired_bootstrap_ci(a, b)
    return float(np.mean(np.asarray(a, float) - np.asarray(b, float))), lo, hi


def scored_records(run_dir: str | Path) -> list[dict[str, Any]]:
    """The records of the questions a run folder's latest evaluation scored, in that run's order.

    ``predictions.jsonl`` also keeps records of earlier runs into the folder (another ``limit``, questions
    since dropped); the run's own questions are those of ``question_ids.json``, the ones its metrics.json
    and the judge count. A question of that list without a record (an interrupted run) is left out, as
    metrics.json leaves it out; a folder without the list (an older version, a runner of its own) counts
    every record.
    """
    records = read_predictions(Path(run_dir) / "predictions.jsonl")
    ids = read_question_ids(run_dir)
    if ids is None:
        return records
    by_id = {str(r["id"]): r for r in records}
    return [by_id[i] for i in ids if i in by_id]


def compare_runs(run_a: str | Path, run_b: str | Path) -> dict[str, float]:
    """Run A against run B on the questions both scored (``scored_records``; paired by id).

    Returns:
        ``answer_recall_diff`` (A - B, in [−1, 1]) with ``_ci_low`` / ``_ci_high`` over the questions
        measurable in both (a failed question: answer not found); ``answer_recall_content_diff`` the same
        with the answer looked up in the items' regions only (titles and headers left out; runs that
        recorded it); ``token_ratio`` = tokens A / tokens B (sum over questions) with its CI, both over the
        ``n_tokens`` questions that both runs answered (a failed question delivered no evidence to count)
        with tokens from B; ``n`` paired questions, ``n_answer`` of them with a measurable answer.
    """
    recs = [{str(r["id"]): r for r in scored_records(p)} for p in (run_a, run_b)]
    ids = [i for i in recs[0] if i in recs[1]]
    if not ids:
        raise ValueError(f"{run_a} and {run_b} share no recorded question")

    def ev(r: Mapping[str, Any]) -> Mapping[str, Any]:
        failed = {"answer_found": False, "answer_found_content": False, "tokens": 0}
        return r.get("evidence") or {} if r.get("status") == "ok" else failed

    pairs = [(ev(recs[0][i]), ev(recs[1][i])) for i in ids]
    both = [
        (x, y) for x, y in pairs if x.get("answer_found") is not None and y.get("answer_found") is not None
    ]
    diff, lo, hi = _paired_difference(
        [float(x["answer_found"]) for x, _ in both], [float(y["answer_found"]) for _, y in both]
    )
    # One question set for the ratio and its interval: the interval cannot pool a zero denominator.
    answered = [i for i in ids if recs[0][i].get("status") == "ok" and recs[1][i].get("status") == "ok"]
    tok = [(float(ev(recs[0][i]).get("tokens", 0)), float(ev(recs[1][i]).get("tokens", 0))) for i in answered]
    tok = [(a, b) for a, b in tok if b > 0]
    ta, tb = [a for a, _ in tok], [b for _, b in tok]
    rlo, rhi = ratio_bootstrap_ci(ta, tb) if tok else (float("nan"), float("nan"))
    content: dict[str, float] = {}
    if all("answer_found_content" in e for pair in both for e in pair):
        cdiff, clo, chi = _paired_difference(
            [float(x["answer_found_content"]) for x, _ in both], [float(y["answer_found_content"]) for _, y in both]
        )
        content = {
            "answer_recall_content_diff": cdiff,
            "answer_recall_content_diff_ci_low": clo,
            "answer_recall_content_diff_ci_high": chi,
        }
    return {
        "n": float(len(ids)),
        "n_answer": float(len(both)),
        "answer_recall_diff": diff,
        "answer_recall_diff_ci_low": lo,
        "answer_recall_diff_ci_high": hi,
        **content,
        "n_tokens": float(len(tok)),
        "token_ratio": sum(ta) / sum(tb) if tok else float("nan"),
        "token_ratio_ci_low": rlo,
        "token_ratio_ci_high": rhi,
    }
