"""Flat metrics of a run (``eval/*``, ``time/*``) from its per-question records, and the run's table.md."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from canopy_lit.eval.metrics import bootstrap_ci, choice_accuracy, exact_match, f1_score
from canopy_lit.pipeline.trace import STAGES


def score_record(rec: Mapping[str, Any], choices: int | None = None) -> dict[str, float]:
    """EM / F1 for open answers, accuracy for multiple choice (``choices`` = number of options)."""
    pred, answers = rec.get("prediction") or "", rec.get("answers") or []
    if choices:
        return {"accuracy": choice_accuracy(pred, answers[0] if answers else "", choices)}
    return {"em": exact_match(pred, answers), "f1": f1_score(pred, answers)}


def summarize(records: Iterable[Mapping[str, Any]], prefix: str = "eval") -> dict[str, float]:
    """Means over questions; failed questions count in ``eval/failed`` and score 0 (never silently dropped)."""
    recs = list(records)
    out: dict[str, float] = {f"{prefix}/n": float(len(recs))}
    if not recs:
        return out
    ok = [r for r in recs if r.get("status") == "ok"]
    out[f"{prefix}/failed"] = float(len(recs) - len(ok))
    per_metric: dict[str, list[float]] = {}
    for r in recs:
        for k, v in (r.get("scores") or {}).items():
            per_metric.setdefault(k, []).append(float(v) if r.get("status") == "ok" else 0.0)
    for k, vals in sorted(per_metric.items()):
        out[f"{prefix}/{k}"] = float(np.mean(vals))
        lo, hi = bootstrap_ci(vals)
        out[f"{prefix}/{k}_ci_low"], out[f"{prefix}/{k}_ci_high"] = lo, hi
    if ok:
        out[f"{prefix}/evidence_tokens"] = float(np.mean([r.get("evidence_tokens", 0) for r in ok]))
        out[f"{prefix}/llm_calls"] = float(np.mean([sum((r.get("llm_calls") or {}).values()) for r in ok]))
        roles = sorted({role for r in ok for role in (r.get("llm_calls") or {})})
        for role in roles:
            out[f"{prefix}/llm_calls/{role}"] = float(np.mean([(r.get("llm_calls") or {}).get(role, 0) for r in ok]))
        out[f"{prefix}/rounds"] = float(np.mean([len(r.get("rounds") or []) for r in ok]))
        retrieved = sum(len(rd.get("retrieved", [])) for r in ok for rd in r.get("rounds") or [])
        dups = sum(rd.get("duplicates", 0) for r in ok for rd in r.get("rounds") or [])
        out[f"{prefix}/duplicate_rate"] = dups / retrieved if retrieved else 0.0
        out[f"{prefix}/latency_s"] = float(np.mean([r.get("latency_s", 0.0) for r in ok]))
        kept = [k for r in ok for rd in r.get("rounds") or [] for k in rd.get("kept", [])]
        if kept:
            out[f"{prefix}/kept_token_ratio"] = float(
                sum(k["kept_tokens"] for k in kept) / max(1, sum(k["item_tokens"] for k in kept))
            )
        for stage in STAGES:
            secs = [(r.get("time_s") or {}).get(stage, 0.0) for r in ok]
            if any(secs):
                out[f"time/{stage}_s"] = float(np.sum(secs))
    return out


def markdown_table(rows: list[Mapping[str, Any]], columns: list[str], setting: str = "") -> str:
    """A markdown table; floats to 3 significant decimals, missing cells blank."""

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return "" if np.isnan(v) else f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
        return "" if v is None else str(v)

    head = f"{setting}\n\n" if setting else ""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return head + "\n".join(lines) + "\n"
