"""The refinement probe reports decision accuracy by decision type (stop vs descend) on real HotpotQA trees."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from canopy_lit.data import load_benchmark
from canopy_lit.eval.probe import QUESTION_COUNTS, RefinementProbe
from canopy_lit.hierarchy import Hierarchy
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
    assert low["probe/gold_recall"] == 1.0 and low["probe/pruned_share"] > 0.5  # split to the leaves, all kept
    # under δ = 1.5 refinement never descends: every stop decision is right, every descend wrong
    assert high["probe/decision_accuracy/stop"] == 1.0 and high["probe/decision_accuracy/descend"] == 0.0
    assert high["probe/gold_recall"] == 1.0 and high["probe/kept_token_ratio"] == 1.0
    assert high["probe/distractor_kept_token_ratio"] == 1.0 and high["probe/pruned_share"] == 0.0


def test_probe_question_rows_add_up_to_every_pooled_ratio() -> None:
    # The per-question counts (probe_questions.jsonl) behind the paired bootstrap must pool to the metrics.
    bench = load_benchmark("hotpotqa")
    probe = RefinementProbe(Hierarchy(2), DepthScorer(), descend_margin=0.5)
    questions = list(bench.questions)[:30]
    for q in questions:
        probe.add(q, bench.items, bench.candidates.get(q.id, ()))
    m, rows = probe.metrics(), probe.question_rows
    assert [r["question"] for r in rows] == [q.id for q in questions if any(g for g in q.gold.values())]
    total = {k: sum(r[k] for r in rows) for k in QUESTION_COUNTS}
    assert total["gold_leaves_kept"] / total["gold_leaves"] == m["probe/gold_recall"]
    assert total["kept_tokens"] / total["whole_tokens"] == m["probe/kept_token_ratio"]
    assert total["distractor_kept_tokens"] / total["distractor_whole_tokens"] == m["probe/distractor_kept_token_ratio"]
    assert total["decisions_correct"] / total["decisions"] == m["probe/decision_accuracy"]
    assert total["stops"] == m["probe/n_nodes/stop"]
    assert total["stops_correct"] / total["stops"] == m["probe/decision_accuracy/stop"]
    assert all(isinstance(v, int) for r in rows for k, v in r.items() if k != "question")  # JSON-ready
    for name in ("gold_recall", "decision_accuracy"):  # intervals over questions around each pooled ratio
        assert m[f"probe/{name}_ci95_low"] <= m[f"probe/{name}"] <= m[f"probe/{name}_ci95_high"]
    assert m["probe/gold_recall_ci95_low"] == 1.0  # every gold leaf kept in every question: no spread
    assert m["probe/decision_accuracy_ci95_low"] < m["probe/decision_accuracy_ci95_high"]
