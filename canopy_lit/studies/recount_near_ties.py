"""What the near-tie tolerance of the descend rule moves in the committed probe runs (no model rerun).

    python -m canopy_lit.studies.recount_near_ties [experiments/runs/<study>.zip ...]   # default: every archive

Refinement descends into a child c of v when s(c) >= s(v) + δ. That was a strict float comparison; it is now
taken up to ``canopy_lit.refine.TIE_TOLERANCE`` (1e-5), because the same node's score moves by ~1e-7 with
how the encoder batched it. For every probe run folder with ``probe_nodes.jsonl`` (one row per node of each
gold item's tree, its score minus the root's, so every parent/child difference is exact up to the row's
float precision), this counts the parent/child comparisons, those that are exact ties, those inside the
tolerance band [-1e-5, 0) (the only ones whose outcome changed), and the gold items whose kept set is
different under the strict rule and under the tolerant one, with ``probe/pruned_share`` under both, and how
far ``probe/decision_accuracy`` can move at most (a comparison in the band per decision, of ``probe/n_nodes``).

Prints one line per run and a total; reads the archives only (unpacked into a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from canopy_lit.eval.probe import drops_a_leaf, shape_of
from canopy_lit.refine import rule as refine  # the rule reads TIE_TOLERANCE from its own module
from canopy_lit.report.archive import run_folders, unpack
from canopy_lit.studies import PROJECT_ROOT as ROOT

FIELDS = ("comparisons", "exact_ties", "in_band", "items", "items_changed", "pruned_strict", "pruned_tolerant")


def _kept(shape: Any, scores: Sequence[float], delta: float, tolerance: float) -> list[int]:
    saved = refine.TIE_TOLERANCE
    refine.TIE_TOLERANCE = tolerance  # the rule reads it at call time
    try:
        return refine.parent_relative(shape, scores, delta)
    finally:
        refine.TIE_TOLERANCE = saved


def near_tie_counts(node_rows: Iterable[Mapping[str, Any]], branching: int, delta: float, where: str) -> dict[str, int]:
    """``FIELDS`` counted over one run's per-node rows (grouped by question and item, breadth-first)."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in node_rows:
        groups.setdefault((str(row["question"]), str(row["item"])), []).append(row)
    out = dict.fromkeys(FIELDS, 0)
    for (qid, iid), rows in groups.items():
        shape = shape_of([int(r["depth"]) for r in rows], branching, f"{where}: question {qid}, item {iid}")
        scores = [float(r["root_relative"]) for r in rows]
        for v in range(len(shape)):
            for c in shape.children[v]:
                gap = scores[c] - (scores[v] + delta)
                out["comparisons"] += 1
                out["exact_ties"] += gap == 0
                out["in_band"] += -refine.TIE_TOLERANCE <= gap < 0
        strict, tolerant = _kept(shape, scores, delta, 0.0), _kept(shape, scores, delta, refine.TIE_TOLERANCE)
        leaves = [sum(int(shape.ends[v] - shape.starts[v]) for v in kept) for kept in (strict, tolerant)]
        out["items"] += 1
        out["items_changed"] += strict != tolerant
        out["pruned_strict"] += drops_a_leaf(leaves[0], shape.n_leaves)
        out["pruned_tolerant"] += drops_a_leaf(leaves[1], shape.n_leaves)
    return out


def _run_settings(run: Path) -> tuple[int, float]:
    cfg = yaml.safe_load((run / ".hydra" / "config.yaml").read_text(encoding="utf-8"))
    return int(cfg["tree"]["branching"]), float(cfg["refine"]["descend_margin"])


def recount_archive(archive: Path) -> list[tuple[str, dict[str, int]]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="canopy-near-ties-") as tmp:
        folder = unpack(archive, Path(tmp) / archive.stem)
        for run in run_folders(folder):
            nodes = run / "probe_nodes.jsonl"
            if not nodes.is_file():
                continue
            lines = [json.loads(x) for x in nodes.read_text(encoding="utf-8").splitlines() if x.strip()]
            branching, delta = _run_settings(run)
            counts = near_tie_counts(lines, branching, delta, str(nodes))
            # a decision is one node of V_i; only a comparison in the band can change one
            counts["decisions"] = int(json.loads((run / "metrics.json").read_text(encoding="utf-8"))["probe/n_nodes"])
            rows.append((run.relative_to(folder).as_posix(), counts))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("archives", nargs="*", type=Path, help="study archives (default: experiments/runs/*.zip)")
    args = ap.parse_args(argv)
    total, worst = dict.fromkeys(FIELDS, 0), 0.0
    for archive in args.archives or sorted((ROOT / "experiments" / "runs").glob("*.zip")):
        for rel, c in recount_archive(archive):
            total = {k: total[k] + c[k] for k in FIELDS}
            worst = max(worst, c["in_band"] / c["decisions"])
            if c["in_band"] or c["items_changed"]:
                print(f"{archive.name} {rel}: {c['in_band']} of {c['comparisons']} comparisons in [-1e-5, 0), "
                      f"{c['items_changed']} of {c['items']} items kept otherwise, pruned "
                      f"{c['pruned_strict']} -> {c['pruned_tolerant']}; decision accuracy moves by at most "
                      f"{100 * c['in_band'] / c['decisions']:.2f} points ({c['decisions']} decisions)")  # fmt: skip
    print(f"total: {total['comparisons']} parent/child comparisons, {total['exact_ties']} exact ties, "
          f"{total['in_band']} in [-1e-5, 0); {total['items_changed']} of {total['items']} gold items kept otherwise; "
          f"pruned {total['pruned_strict']} -> {total['pruned_tolerant']}; decision accuracy of any run moves by at "
          f"most {100 * worst:.2f} points")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
