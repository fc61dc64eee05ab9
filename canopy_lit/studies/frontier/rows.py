"""The frontier study's paired comparisons on test: budgets, operating point, item drop, LongLLMLingua, scorers."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from canopy_lit.eval.evidence_stats import compare_runs
from canopy_lit.studies.frontier.points import (
    BENCHMARKS,
    K_REF,
    POOLED_SCORERS,
    Point,
    canopy_points,
    chosen_on,
    keep_whole,
)

# --- paired comparisons on test -------------------------------------------------------------------


def ci_cell(d: dict[str, float], key: str, scale: float = 100.0, digits: int = 1) -> str:
    lo, hi = d[f"{key}_ci_low"], d[f"{key}_ci_high"]
    star = "" if lo <= 0 <= hi else " *"
    return f"{scale * d[key]:+.{digits}f} [{scale * lo:+.{digits}f}, {scale * hi:+.{digits}f}]{star}"


def verdict(d: dict[str, float]) -> str:
    if d["answer_recall_diff_ci_low"] > 0:
        return "wins"
    if d["answer_recall_diff_ci_high"] < 0:
        return "loses"
    return "ties"


def nearest(points: Sequence[Point], tokens: float) -> Point:
    return min(points, key=lambda p: (abs(p.tokens - tokens), p.tokens))


def budget_rows(points: Sequence[Point], chosen: dict[str, dict[str, dict]]) -> list[dict]:
    """Per benchmark and budget δ chosen on validation (``chosen[bench]["fθ"]["budgets"]``; budgets that share
    a δ share one row, ``budgets``): CANOPY fθ vs flat at its tokens and vs keep-whole at fewer k (paired)."""
    rows = []
    for bench in BENCHMARKS:
        kw, canopy = keep_whole(points, bench), canopy_points(points, bench, "fθ")
        flats = {p.delta: p for p in canopy_points(points, bench, "fθ", "flat_matched")}
        # fewer whole items only where they are fewer tokens (NQ: one candidate a question, every k the same)
        fewer_k = [p for p in points if p.benchmark == bench and p.method == "keep_whole" and p.k < K_REF]
        fewer_k = [p for p in fewer_k if kw is not None and p.tokens < kw.tokens]
        by_delta: dict[float, list[float]] = {}
        for budget, delta in ((chosen.get(bench) or {}).get("fθ") or {}).get("budgets", {}).items():
            by_delta.setdefault(float(delta), []).append(float(budget))
        if kw is None or not canopy:
            continue
        for delta, budgets in sorted(by_delta.items()):
            c = next((p for p in canopy if p.delta == delta), None)
            if c is None:
                continue
            row = {"benchmark": bench, "budgets": sorted(budgets), "canopy": c, "keep_whole": kw,
                   "chosen_on": chosen_on(chosen[bench]["fθ"], short=True)}  # fmt: skip
            if c.delta in flats:
                row["flat"] = flats[c.delta]
                row["vs_flat"] = compare_runs(c.folder, flats[c.delta].folder)
            if fewer_k:
                row["kw_fewer"] = kw_k = nearest(fewer_k, c.tokens)
                row["vs_kw_fewer"] = compare_runs(c.folder, kw_k.folder)
            rows.append(row)
    return rows


def items_dropped(folder: Path) -> tuple[float, float]:
    """(items delivered, items dropped whole) per question of a run: a dropped item keeps no leaf range."""
    n = items = dropped = 0
    with open(folder / "predictions.jsonl", encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            n += 1
            for kept in (record.get("rounds") or [{}])[0].get("kept", []):
                items += 1
                dropped += not kept.get("leaf_ranges")
    return items / max(n, 1), dropped / max(n, 1)


def item_drop_rows(points: Sequence[Point]) -> list[dict]:
    """Per item-drop run: paired against CANOPY at the same δ, scorer and k without it (what dropping costs),
    against CANOPY at the δ nearest in tokens (whether dropping items spends tokens better than refining
    harder) and against flat top-m (same scorer) at the nearest tokens."""
    rows = []
    for p in sorted((p for p in points if p.method == "item_drop"), key=lambda p: (list(BENCHMARKS).index(p.benchmark),
                                                                                  p.item_margin or 0.0)):  # fmt: skip
        curve = canopy_points(points, p.benchmark, p.scorer or "")
        base = next((c for c in curve if c.delta == p.delta), None)
        flats = [f for f in points if f.benchmark == p.benchmark and f.method == "flat_top_m" and f.scorer == p.scorer]
        row: dict = {"point": p, "keep_whole": keep_whole(points, p.benchmark), "base": base,
                     "items": items_dropped(p.folder)}  # fmt: skip
        if base is not None:
            row["vs_base"] = compare_runs(p.folder, base.folder)
        if curve:
            row["canopy"] = other = nearest(curve, p.tokens)
            row["vs_canopy"] = compare_runs(p.folder, other.folder)
        if flats:
            row["flat"] = flat = nearest(flats, p.tokens)
            row["vs_flat"] = compare_runs(p.folder, flat.folder)
        rows.append(row)
    return rows


def lingua_rows(points: Sequence[Point]) -> list[dict]:
    """Per LongLLMLingua run: paired against CANOPY fθ at the δ nearest in tokens, flat top-m (fθ) at the
    nearest tokens and keep-whole k = 5 (what its compression costs), with its refine time per question."""
    rows = []
    for p in sorted((p for p in points if p.method == "longllmlingua"),
                    key=lambda p: (list(BENCHMARKS).index(p.benchmark), p.rate or 0.0)):  # fmt: skip
        row: dict = {"point": p, "keep_whole": keep_whole(points, p.benchmark)}
        curve = canopy_points(points, p.benchmark, "fθ")
        flats = [f for f in points if f.benchmark == p.benchmark and f.method == "flat_top_m" and f.scorer == "fθ"]
        for key, pool in (("canopy", curve), ("flat", flats)):
            if pool:
                row[key] = other = nearest(pool, p.tokens)
                row[f"vs_{key}"] = compare_runs(p.folder, other.folder)
        if row["keep_whole"] is not None:
            row["vs_kw"] = compare_runs(p.folder, row["keep_whole"].folder)
        rows.append(row)
    return rows


def operating_rows(points: Sequence[Point], chosen: dict[str, dict[str, dict]]) -> list[dict]:
    """Per benchmark and scorer: CANOPY at the validation-chosen δ (and at δ = 0) vs keep-whole, test."""
    rows = []
    for bench, by_scorer in chosen.items():
        kw = keep_whole(points, bench)
        if kw is None:
            continue
        for scorer, op in by_scorer.items():
            for delta, label in ((op["delta"], "operating point"), (0.0, "paper rule δ = 0")):
                c = next((p for p in canopy_points(points, bench, scorer) if p.delta == delta), None)
                if c is not None:
                    rows.append({"benchmark": bench, "scorer": scorer, "label": label, "op": op, "canopy": c,
                                 "keep_whole": kw, "vs_kw": compare_runs(c.folder, kw.folder)})  # fmt: skip
    return rows


SCORER_BUDGET = "0.6"  # the second goal: within 5 points of keep-whole at <= 60% of its tokens


def scorer_rows(points: Sequence[Point], chosen: dict[str, dict[str, dict]]) -> list[dict]:
    """Per benchmark and fθ of the scorer study (``POOLED_SCORERS``, beside per-node fθ), at its operating point
    and at its 60% budget's δ (both chosen on validation): paired against keep-whole k = 5, against flat leaves
    at its own tokens with its own scores, and against per-node fθ's CANOPY at the δ nearest in tokens."""
    rows = []
    for bench in BENCHMARKS:
        kw = keep_whole(points, bench)
        base = canopy_points(points, bench, "fθ")
        for scorer in ("fθ", *POOLED_SCORERS):
            op = (chosen.get(bench) or {}).get(scorer)
            if op is None or kw is None or (scorer == "fθ" and not any(
                    (chosen.get(bench) or {}).get(s) for s in POOLED_SCORERS)):  # fmt: skip
                continue
            curve = {c.delta: c for c in canopy_points(points, bench, scorer)}
            flats = {f.delta: f for f in canopy_points(points, bench, scorer, "flat_matched")}
            budget = (op.get("budgets") or {}).get(SCORER_BUDGET)
            for label, delta in (("operating point", op["delta"]), ("60% budget", budget)):
                c = curve.get(delta) if delta is not None else None
                if c is None:
                    continue
                row = {"benchmark": bench, "scorer": scorer, "label": label, "canopy": c, "keep_whole": kw,
                       "vs_kw": compare_runs(c.folder, kw.folder)}  # fmt: skip
                if delta in flats:
                    row["flat"] = flats[delta]
                    row["vs_flat"] = compare_runs(c.folder, flats[delta].folder)
                if scorer != "fθ" and base:
                    row["per_node"] = other = nearest(base, c.tokens)
                    row["vs_per_node"] = compare_runs(c.folder, other.folder)
                rows.append(row)
    return rows
