"""The frontier study's run points and the operating point chosen on validation."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from canopy_lit.report.archive import ensure_unpacked

RUNS = Path("experiments") / "runs"
VAL, TEST = RUNS / "frontier_val", RUNS / "frontier"
OPERATING_POINT = Path("experiments") / "tables" / "frontier_operating_point.json"
TABLES = Path("experiments") / "tables"
FIGURE = Path("experiments") / "img" / "frontier.png"
DOCS = (Path("README.md"), Path("experiments") / "frontier.md")
BENCHMARKS = {"hotpotqa": "HotpotQA", "nq": "NQ", "ottqa": "OTT-QA", "tatqa": "TAT-QA (zero-shot)"}
# The adapter never trained on these: their δ comes from the in-domain benchmarks' choices, not their data.
ZERO_SHOT = ("tatqa",)
# The paper's compression: reader tokens -14% to -28% of keep-whole's; aim at the middle.
BAND, TARGET = (0.72, 0.86), 0.79
BUDGETS = (0.4, 0.6, 0.8)
K_REF = 5
SCORERS = {"fθ": "ftheta", "f0": "f0"}  # run.json label -> the scorer config that made it
# the scorer study's fθs (scripts/scorers.sh): nodes embedded otherwise (run.json ``node_pooling``), each with
# its own adapter; labelled "fθ <pooling>", chosen on validation like fθ, never in ``operating-points``
POOLED_SCORERS = ("fθ late", "fθ cross")


def scorer_label(run: dict) -> str | None:
    """fθ | f0 | "fθ late" | "fθ cross": run.json's scorer, with the node pooling when it is not per node."""
    scorer, pooling = run.get("scorer"), run.get("node_pooling")
    return f"{scorer} {pooling}" if scorer and pooling else scorer


@dataclass(frozen=True)
class Point:
    """One run folder of the study: a method at one setting, with its metrics."""

    folder: Path
    benchmark: str
    method: str  # canopy | flat_matched | flat_top_m | keep_whole | extractive
    scorer: str | None  # fθ | f0 (None: not a node-scoring method)
    delta: float | None
    k: int
    m: int | None
    metrics: dict[str, float]
    rate: float | None = None  # LongLLMLingua's target rate ρ
    compressor: str | None = None  # LongLLMLingua's LM (an asset name or a GGUF path)
    item_margin: float | None = None  # CANOPY with item drop: how far below the best item an item may score

    def metric(self, key: str) -> float:
        return float(self.metrics.get(f"evidence/{key}", float("nan")))

    @property
    def tokens(self) -> float:
        return self.metric("tokens")


METHODS = {"parent_relative": "canopy", "flat_matched": "flat_matched", "flat_top_m": "flat_top_m",
           "keep_whole": "keep_whole", "extractive": "extractive", "longllmlingua": "longllmlingua"}  # fmt: skip


def load_points(folder: Path) -> list[Point]:
    """Every finished run folder under ``folder`` (unpacked from ``<folder>.zip`` first)."""
    ensure_unpacked([folder])
    points = []
    for run_json in sorted(folder.glob("*/run.json")):
        run, metrics_file = json.loads(run_json.read_text()), run_json.parent / "metrics.json"
        if not metrics_file.is_file() or run.get("refine") not in METHODS:
            continue
        method = "item_drop" if run.get("item_margin") is not None else METHODS[run["refine"]]
        points.append(Point(
            folder=run_json.parent, benchmark=run["benchmark"], method=method,
            scorer=scorer_label(run) if method in ("canopy", "flat_matched", "flat_top_m", "item_drop") else None,
            delta=float(run["descend_margin"]) if method in ("canopy", "flat_matched", "item_drop") else None,
            k=int(run["k"]), m=int(run["m"]) if run.get("m") is not None else None,
            metrics=json.loads(metrics_file.read_text()),
            rate=run.get("rate"), compressor=run.get("compressor"), item_margin=run.get("item_margin"),
        ))  # fmt: skip
    return points


def keep_whole(points: Sequence[Point], bench: str, k: int = K_REF) -> Point | None:
    return next((p for p in points if p.benchmark == bench and p.method == "keep_whole" and p.k == k), None)


def canopy_points(points: Sequence[Point], bench: str, scorer: str, method: str = "canopy") -> list[Point]:
    """CANOPY (or flat at its tokens) over δ at k = 5, by δ."""
    sel = [p for p in points if p.benchmark == bench and p.method == method and p.scorer == scorer and p.k == K_REF]
    return sorted(sel, key=lambda p: p.delta or 0.0)


# --- the operating point, from validation ---------------------------------------------------------


def _median_delta(deltas: Sequence[float]) -> float:
    """The median of grid δs (the lower middle one for an even count, so the result is a run of the grid)."""
    ordered = sorted(deltas)
    return ordered[(len(ordered) - 1) // 2]


def choose(points: Sequence[Point]) -> dict[str, dict[str, dict]]:
    """benchmark -> scorer -> {delta, token_ratio, in_band, n, candidates, budgets}: per in-domain benchmark
    the δ nearest TARGET of keep-whole's validation tokens, preferring δs inside BAND, and (fθ) the δ nearest
    each of BUDGETS; per zero-shot benchmark the median of the in-domain choices (``pooled_from``)."""
    out: dict[str, dict[str, dict]] = {}
    for bench in BENCHMARKS:
        kw = keep_whole(points, bench)
        if kw is None or bench in ZERO_SHOT:
            continue
        for scorer in (*SCORERS, *POOLED_SCORERS):
            cands = canopy_points(points, bench, scorer)
            if not cands:
                continue
            ratios = {p.delta: p.tokens / kw.tokens for p in cands}
            inside = [d for d, r in ratios.items() if BAND[0] <= r <= BAND[1]]
            best = min(inside or ratios, key=lambda d: (abs(ratios[d] - TARGET), d))
            out.setdefault(bench, {})[scorer] = {
                "delta": best, "token_ratio": round(ratios[best], 4), "in_band": bool(inside),
                "n": int(cands[0].metric("n")),
                "candidates": {f"{d:g}": round(r, 4) for d, r in sorted(ratios.items())},
            }  # fmt: skip
            if scorer.startswith("fθ"):  # per-node fθ and the scorer study's
                out[bench][scorer]["budgets"] = {
                    f"{b:g}": min(ratios, key=lambda d, b=b: (abs(ratios[d] - b), d)) for b in BUDGETS
                }
    for bench in ZERO_SHOT:
        for scorer in (*SCORERS, *POOLED_SCORERS):
            own = {b: by[scorer] for b, by in out.items() if b not in ZERO_SHOT and scorer in by}
            if not own:
                continue
            op = {"delta": _median_delta([o["delta"] for o in own.values()]),
                  "pooled_from": {b: o["delta"] for b, o in own.items()}}  # fmt: skip
            if all("budgets" in o for o in own.values()):
                op["budgets"] = {
                    f"{b:g}": _median_delta([o["budgets"][f"{b:g}"] for o in own.values()]) for b in BUDGETS
                }
            out.setdefault(bench, {})[scorer] = op
    return out


def write_operating_point(root: Path, chosen: dict[str, dict[str, dict]]) -> Path:
    path = root / OPERATING_POINT
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(chosen, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def read_operating_point(root: Path) -> dict[str, dict[str, dict]]:
    path = root / OPERATING_POINT
    return json.loads(path.read_text()) if path.is_file() else {}


def chosen_on(op: dict, short: bool = False) -> str:
    """How an operating point's δ (``short``: its budgets' δs) was chosen, in words."""
    if "pooled_from" in op:
        if short:
            return "median of the in-domain choices"
        return "median of the in-domain choices (" + ", ".join(
            f"{BENCHMARKS[b]} {d:g}" for b, d in op["pooled_from"].items()
        ) + "), no data of its own"
    return f"{op['n']} validation questions"
