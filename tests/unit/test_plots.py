"""Study plots: decision counts rebuilt from kept leaf ranges, and every PNG drawn from realistic runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread
from runfolders import make_multirun

from canopy_lit.report.decisions import run_decisions, tree_decisions, tree_shape
from canopy_lit.report.plots import (
    make_all,
    plot_decisions_by_modality,
    plot_probe_depth_accuracy,
    plot_root_relative_scores,
)
from canopy_lit.report.runs import find_runs


def test_tree_decisions_by_hand() -> None:
    # B=2 over 4 leaves: root [0,4) -> [0,2) [2,4); [0,2) -> [0,1) [1,2).
    # Keeping [0,1) and [2,4): root and [0,2) were split, [1,2) dropped.
    assert tree_decisions(4, 2, [(0, 1), (2, 4)]) == {"kept": 2, "split": 2, "dropped": 1}
    assert tree_decisions(4, 2, [(0, 4)]) == {"kept": 1}
    assert tree_decisions(4, 2, []) == {"dropped": 1}  # flat top-m can keep nothing of an item
    # B=3 over 7 leaves: root -> [0,3) [3,5) [5,7); keep [3,5): root split, two siblings dropped.
    assert tree_decisions(7, 3, [(3, 5)]) == {"kept": 1, "split": 1, "dropped": 2}
    with pytest.raises(ValueError, match="B=2"):
        tree_decisions(4, 2, [(1, 3)])  # not a node of the tree: the run used another B


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("plots")
    qa = [
        dict(method=m, name=b, refine=r, max_rounds=rounds, k=kk, n=3)
        for b in ("hotpotqa", "tatqa")
        for m, r, rounds in (("vanilla", "keep_whole", 1), ("canopy", "parent_relative", 2))
        for kk in (2, 4)
    ]
    make_multirun(root / "k", qa)
    make_multirun(root / "probe", [dict(probe=True, name="hotpotqa", adapter=a, n=6) for a in (None, "adapter")])
    return find_runs([root])


def test_visited_nodes_of_real_records_are_consistent(runs) -> None:
    """Every visited node is the root or a child of a split node, on real refinement records."""
    canopy = [r for r in runs if r.method == "canopy"]
    checked = 0
    for run in canopy:
        for rec in run.records():
            for rd in rec["rounds"]:
                for k in rd["kept"]:
                    c = tree_decisions(k["n_leaves"], 2, k["leaf_ranges"])
                    tree = tree_shape(k["n_leaves"], 2)
                    kept = [tree.find(s, e) for s, e in k["leaf_ranges"]]
                    split = {a for v in kept for a in tree.ancestors(v)}
                    assert c["split"] == len(split)
                    assert sum(c.values()) == 1 + sum(len(tree.children[v]) for v in split)
                    assert 1 <= c["kept"] <= tree.n_leaves
                    checked += 1
    assert checked > 0
    per_mod = run_decisions(canopy[0])
    assert set(per_mod) <= {"text", "table"} and "unmatched" not in {d for c in per_mod.values() for d in c}
    vanilla = next(r for r in runs if r.method == "vanilla")
    items = sum(len(rd["kept"]) for rec in vanilla.records() for rd in rec["rounds"])
    assert sum(c["kept"] for c in run_decisions(vanilla).values()) == items  # whole items: one kept root each


def _not_blank(path: Path) -> None:
    img = imread(path)
    assert img.shape[0] > 200 and img.shape[1] > 300
    assert float(np.std(img[..., :3])) > 0.05  # drawn, not an empty canvas


def test_make_all_draws_every_plot(runs, tmp_path: Path) -> None:
    out = make_all(runs, tmp_path)
    assert set(out) == {"quality_vs_tokens", "probe_depth_accuracy", "decisions_by_modality", "root_relative_scores"}
    for path in out.values():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        _not_blank(path)


def test_plots_without_data_are_skipped(runs, tmp_path: Path) -> None:
    qa_only = [r for r in runs if r.mode == "qa"]
    assert plot_probe_depth_accuracy(qa_only, tmp_path / "x.png") is None
    assert plot_root_relative_scores(qa_only, tmp_path / "y.png") is None
    whole_only = [r for r in qa_only if r.setting("refine") == "keep_whole"]
    assert plot_decisions_by_modality(whole_only, tmp_path / "z.png") is None  # nothing refined
    assert make_all([], tmp_path) == {}
    assert not list(tmp_path.iterdir())
