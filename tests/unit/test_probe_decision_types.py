"""The refinement probe reports decision accuracy by decision type (stop vs descend) on real HotpotQA trees."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from canopy_lit.data import load_benchmark
from canopy_lit.eval.probe import RefinementProbe
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.refine import parent_relative
from canopy_lit.types import Tree


class ParentFirstScorer:
    """s(q, v) = -depth(v): every parent beats its children, so every "stop" decision holds and every
    "descend" decision (a gold child must reach its parent) fails."""

    def embed_query(self, text: str) -> np.ndarray:
        return np.zeros(1, np.float32)

    def score(self, query, trees: Sequence[Tree], nodes: Sequence[Sequence[int]] | None = None) -> list[np.ndarray]:
        out = []
        for j, tree in enumerate(trees):
            ids = range(len(tree)) if nodes is None else nodes[j]
            out.append(np.array([-float(tree.depth[v]) for v in ids], np.float32))
        return out


def test_probe_splits_decisions_into_stop_and_descend() -> None:
    bench = load_benchmark("hotpotqa")
    probe = RefinementProbe(Hierarchy(2), ParentFirstScorer())
    for q in list(bench.questions)[:30]:
        probe.add(q, bench.items)
    m = probe.metrics()
    n_stop, n_descend = m["probe/n_nodes/stop"], m["probe/n_nodes/descend"]
    assert n_stop > 0 and n_descend > 0 and n_stop + n_descend == m["probe/n_nodes"]
    assert m["probe/decision_accuracy/stop"] == 1.0
    assert m["probe/decision_accuracy/descend"] == 0.0
    assert m["probe/decision_accuracy"] == n_stop / m["probe/n_nodes"]


class DepthScorer(ParentFirstScorer):
    """s(q, v) = depth(v): every child beats its parent by exactly 1."""

    def score(self, query, trees: Sequence[Tree], nodes: Sequence[Sequence[int]] | None = None) -> list[np.ndarray]:
        return [-s for s in super().score(query, trees, nodes)]


def test_probe_judges_decisions_under_the_descend_margin() -> None:
    # Children lead parents by 1: δ = 0 descends to every leaf, δ = 1.5 keeps every root whole.
    bench = load_benchmark("hotpotqa")
    questions = list(bench.questions)[:30]
    metrics = {}
    for delta in (0.0, 1.5):
        probe = RefinementProbe(Hierarchy(2), DepthScorer(), descend_margin=delta)
        for q in questions:
            probe.add(q, bench.items, bench.candidates.get(q.id, ()))
        metrics[delta] = probe.metrics()
    low, high = metrics[0.0], metrics[1.5]
    # δ = 0: every stop is wrong (children are refined); a descend is right only where no child is gold-free
    assert low["probe/decision_accuracy/stop"] == 0.0 and low["probe/decision_accuracy/descend"] < 0.2
    # split to the leaves, all kept: nothing is removed, so no item counts as pruned
    assert low["probe/gold_recall"] == 1.0 and low["probe/pruned_share"] == 0.0
    # under δ = 1.5 refinement never descends: every stop decision is right, every descend wrong
    assert high["probe/decision_accuracy/stop"] == 1.0 and high["probe/decision_accuracy/descend"] == 0.0
    assert high["probe/gold_recall"] == 1.0 and high["probe/kept_token_ratio"] == 1.0
    assert high["probe/distractor_kept_token_ratio"] == 1.0 and high["probe/pruned_share"] == 0.0


class ItemSeededScorer(ParentFirstScorer):
    """Scores drawn from a generator seeded by the item id: refinement keeps some gold and cuts some."""

    def score(self, query, trees: Sequence[Tree], nodes: Sequence[Sequence[int]] | None = None) -> list[np.ndarray]:
        out = []
        for j, tree in enumerate(trees):
            s = np.random.default_rng(zlib.crc32(tree.item.id.encode())).random(len(tree)).astype(np.float32)
            out.append(s if nodes is None else s[list(nodes[j])])
        return out


def test_probe_question_rows_match_an_independent_recount() -> None:
    # probe_questions.jsonl feeds the paired bootstrap: each row must hold what a plain recount from the
    # trees gives, and the pooled ratios must agree with the probe's separate per-depth and per-kind lists.
    bench = load_benchmark("hotpotqa")
    hierarchy, scorer, delta = Hierarchy(2), ItemSeededScorer(), 0.05
    probe = RefinementProbe(hierarchy, scorer, descend_margin=delta)
    questions = list(bench.questions)[:30]
    for q in questions:
        probe.add(q, bench.items, bench.candidates.get(q.id, ()))
    m, rows = probe.metrics(), {r["question"]: r for r in probe.question_rows}
    assert list(rows) == [q.id for q in questions if any(g for g in q.gold.values())]
    for q in questions:
        gold = {iid: set(g) for iid, g in q.gold.items() if g and iid in bench.items}
        if not gold:
            continue
        leaves = kept_leaves = 0
        for iid, g in gold.items():
            tree = hierarchy.build(bench.items[iid])
            kept = parent_relative(tree, scorer.score(None, [tree])[0], delta)
            leaves += len(g)
            kept_leaves += len(g & {leaf for v in kept for leaf in tree.leaf_range(v)})
        assert (rows[q.id]["gold_leaves"], rows[q.id]["gold_leaves_kept"]) == (leaves, kept_leaves), q.id
    assert 0.0 < m["probe/gold_recall"] < 1.0  # the scorer cuts some gold: the recount is not all-or-nothing
    depths = [k.rsplit("_", 1)[1] for k in m if k.startswith("probe/n_nodes/depth_")]
    n_by_depth = [m[f"probe/n_nodes/depth_{d}"] for d in depths]
    acc_by_depth = [m[f"probe/decision_accuracy/depth_{d}"] for d in depths]
    assert sum(n_by_depth) == m["probe/n_nodes"] == sum(r["decisions"] for r in rows.values())
    assert np.isclose(np.dot(n_by_depth, acc_by_depth) / sum(n_by_depth), m["probe/decision_accuracy"])
    stops = sum(r["stops"] for r in rows.values())
    assert stops == m["probe/n_nodes/stop"] > 0
    assert np.isclose(sum(r["stops_correct"] for r in rows.values()) / stops, m["probe/decision_accuracy/stop"])
    assert all(isinstance(v, int) for r in rows.values() for k, v in r.items() if k != "question")  # JSON-ready
    for name in ("gold_recall", "decision_accuracy"):  # intervals over questions around each pooled ratio
        assert m[f"probe/{name}_ci95_low"] < m[f"probe/{name}"] < m[f"probe/{name}_ci95_high"]
