"""The refinement probe reports decision accuracy by decision type (stop vs descend) on real HotpotQA trees."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from canopy_lit.data import load_benchmark
from canopy_lit.eval.probe import RefinementProbe
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
