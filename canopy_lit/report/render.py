"""Study tables as markdown: cells (scores in %, tokens as integers), the systems x benchmarks pivot and one
renderer per table kind. ``report.tables`` builds the rows and calls these."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from canopy_lit.markdown import md_table
from canopy_lit.report.runs import Run

PROBE_METRICS: tuple[tuple[str, str], ...] = (
    ("n_questions", "probe/n_questions"),
    ("n_items", "probe/n_items"),
    ("n_nodes", "probe/n_nodes"),
    ("decision_accuracy", "probe/decision_accuracy"),
    ("gold_recall", "probe/gold_recall"),
    ("pruned_share", "probe/pruned_share"),
    ("kept_token_ratio", "probe/kept_token_ratio"),
    ("distractor_kept_token_ratio", "probe/distractor_kept_token_ratio"),
)


def depth_order(key: str) -> tuple[int, str]:
    m = re.search(r"depth_(\d+)$", key)
    return (int(m.group(1)) if m else -1, key)


def wide_rows(rows: Sequence[Mapping[str, Any]], axes: Sequence[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Systems x benchmarks from ``qa_rows`` output: per benchmark EM, F1 (or Acc) and tokens, then averages.

    Returns:
        (rows, benchmark names in column order).
    """
    benches = sorted({r["benchmark"] for r in rows if r["benchmark"] != "average"})
    out: dict[tuple[str, ...], dict[str, Any]] = {}
    for r in rows:
        key = (r["method"], *(r[a] for a in axes))
        w = out.setdefault(key, {"method": r["method"], **{a: r[a] for a in axes}})
        tag = "avg" if r["benchmark"] == "average" else r["benchmark"]
        for name in ("em", "f1", "match", "judge", "accuracy", "evidence_tokens", "llm_calls", "rounds",
                     "followup_duplicate_rate"):
            w[f"{tag}/{name}"] = r.get(name)
    return list(out.values()), benches


PERCENT = {"em", "f1", "match", "judge", "accuracy", "followup_duplicate_rate", "duplicate_rate_all_rounds",
           "decision_accuracy", "gold_recall", "pruned_share", "answer_recall", "answer_recall_content", "item_recall",
           "truncated_questions"}


TITLES = {
    "em": "EM",
    "f1": "F1",
    "match": "Match",
    "judge": "Judge",
    "accuracy": "Acc",
    "evidence_tokens": "tokens",
    "kept_token_ratio": "kept ratio",
    "llm_calls": "LLM calls",
    "rounds": "rounds",
    "followup_duplicate_rate": "follow-up dup %",
    "duplicate_rate_all_rounds": "dup % all rounds",
    "latency_s": "latency s",
    "n": "n",
    "failed": "failed",
    "n_questions": "questions",
    "n_items": "items",
    "n_nodes": "nodes",
    "decision_accuracy": "decision acc",
    "gold_recall": "gold recall",
    "pruned_share": "pruned %",
    "distractor_kept_token_ratio": "distractor kept ratio",
}


def fmt(name: str, v: Any) -> str:
    """A cell: scores and shares in %, tokens as integers, other numbers to 2 decimals."""
    base = name.split("/")[-1]
    if v is None or v == "" or (isinstance(v, float) and math.isnan(v)):
        return ""
    if not isinstance(v, (int, float)):
        return str(v)
    if base in PERCENT or base.startswith("acc_depth_"):
        return f"{100 * v:.1f}"
    if base in ("evidence_tokens", "tokens", "n", "failed", "n_questions", "n_items", "n_nodes"):
        return f"{v:.0f}"
    return f"{v:.2f}"


def _ci(row: Mapping[str, Any], name: str) -> str:
    lo, hi = (fmt(name, row.get(f"{name}_ci_{end}")) for end in ("low", "high"))
    return f"[{lo}, {hi}]" if lo and hi else ""


def _count(v: Any) -> float:
    """A count cell as a number: 0 where the run has none (absent, or not a number in its metrics.json)."""
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else 0.0


def _present(rows: Sequence[Mapping[str, Any]], name: str) -> bool:
    return any(r.get(name) is not None for r in rows)


def render_qa_wide(rows: Sequence[Mapping[str, Any]], axes: Sequence[str]) -> str:
    """Markdown systems x benchmarks table."""
    wide, benches = wide_rows(rows, axes)
    cols: list[tuple[str, str]] = []
    for b in [*benches, "avg"]:
        for name in ("em", "f1", "match", "judge", "accuracy", "evidence_tokens"):
            if _present(wide, f"{b}/{name}"):
                cols.append((f"{b}/{name}", f"{b if b != 'avg' else 'Avg'} {TITLES[name]}"))
    for name in ("llm_calls", "rounds", "followup_duplicate_rate"):
        for tag in ("avg", *(benches if len(benches) == 1 else ())):
            if _present(wide, f"{tag}/{name}"):
                cols.append((f"{tag}/{name}", f"{tag if tag != 'avg' else 'Avg'} {TITLES[name]}"))
    def system(row: Mapping[str, Any]) -> tuple[str, ...]:
        return (row["method"], *(row[a] for a in axes))

    # failed questions of each system over its benchmarks: a column only where some run lost questions
    failed: dict[tuple[str, ...], float] = {}
    for r in rows:
        if r["benchmark"] != "average":
            failed[system(r)] = failed.get(system(r), 0.0) + _count(r.get("failed"))
    lost = ["failed"] if any(failed.values()) else []
    header = ["method", *axes, *lost, *(t for _, t in cols)]
    body = [[w["method"], *(w[a] for a in axes), *(fmt(k, failed.get(system(w))) for k in lost),
             *(fmt(k, w.get(k)) for k, _ in cols)] for w in wide]  # fmt: skip
    return md_table(header, body)


def render_qa_long(rows: Sequence[Mapping[str, Any]], axes: Sequence[str]) -> str:
    """Markdown per-run table with 95% CIs."""
    cols: list[tuple[str, str]] = [("n", "n"), ("failed", "failed")]
    for name in ("em", "f1", "match", "judge", "accuracy"):
        if _present(rows, name):
            cols += [(name, TITLES[name]), (f"{name}:ci", f"{TITLES[name]} 95% CI")]
    for name in ("evidence_tokens", "kept_token_ratio", "llm_calls", "rounds", "followup_duplicate_rate",
                 "duplicate_rate_all_rounds", "latency_s"):
        if _present(rows, name):
            cols.append((name, TITLES[name]))
    header = ["method", *axes, "benchmark", *(t for _, t in cols)]
    body = []
    for r in rows:
        cells = [r["method"], *(r[a] for a in axes), r["benchmark"]]
        cells += [_ci(r, k.split(":")[0]) if k.endswith(":ci") else fmt(k, r.get(k)) for k, _ in cols]
        body.append(cells)
    return md_table(header, body)


def render_probe(rows: Sequence[Mapping[str, Any]], axes: Sequence[str]) -> str:
    depth_cols = sorted({k for r in rows for k in r if k.startswith("acc_depth_")}, key=depth_order)
    names = [n for n, _ in PROBE_METRICS if _present(rows, n)]
    header = ["benchmark", *axes, *(TITLES[n] for n in names), *(f"acc d={k.rsplit('_', 1)[1]}" for k in depth_cols)]
    body = [[r["benchmark"], *(r[a] for a in axes), *(fmt(n, r.get(n)) for n in [*names, *depth_cols])] for r in rows]
    return md_table(header, body)


def render_evidence(rows: Sequence[Mapping[str, Any]], axes: Sequence[str]) -> str:
    """Markdown: answer recall (95% CI) beside it without titles and headers, gold-leaf and item recall,
    reader tokens, kept ratio per run, and the share of questions the reader cap cut where it cut any."""
    axes = [a for a in axes if a not in ("refine", "scorer")]
    content = _present(rows, "answer_recall_content")  # runs recorded before it have no such column
    cut = any((r.get("truncated_questions") or 0) > 0 for r in rows)
    lost = ["failed"] if any(_count(r.get("failed")) for r in rows) else []
    header = ["benchmark", "method", *axes, "n", *lost, "answer recall", "95% CI",
              *(["answer recall w/o titles/headers", "95% CI"] if content else []), "gold recall", "item recall",
              "tokens", "tokens 95% CI", "kept ratio", *(["cap cut %"] if cut else [])]  # fmt: skip
    body = [
        [r["benchmark"], r["method"], *(r[a] for a in axes), fmt("n", r.get("n")), *(fmt(k, r.get(k)) for k in lost),
         fmt("answer_recall", r.get("answer_recall")),
         _ci(r, "answer_recall"),
         *([fmt("answer_recall_content", r.get("answer_recall_content")), _ci(r, "answer_recall_content")] if content else []),
         fmt("gold_recall", r.get("gold_recall")), fmt("item_recall", r.get("item_recall")),
         fmt("tokens", r.get("tokens")), _ci(r, "tokens"), fmt("kept_ratio", r.get("kept_ratio")),
         *([fmt("truncated_questions", r.get("truncated_questions"))] if cut else [])]  # fmt: skip
        for r in rows
    ]
    return md_table(header, body)


def render_generic(runs: Sequence[Run]) -> str:
    """Any other mode (e.g. retrieval): every metric as a column."""
    keys = sorted({k for r in runs for k in r.metrics})
    header = ["benchmark", "run", *keys]
    body = [[r.benchmark, r.path.name, *(fmt(k, r.metrics.get(k)) for k in keys)] for r in runs]
    return md_table(header, body)
