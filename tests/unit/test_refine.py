"""Parent-relative refinement (Algorithm 1) and its baselines: invariants and hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.refine import (
    TIE_TOLERANCE,
    FlatTopMRefiner,
    KeepWholeRefiner,
    ParentRelativeRefiner,
    leaf_ids,
    parent_relative,
    parent_relative_lazily,
)
from canopy_lit.types import Item, Tree


def tree_of(n: int, b: int = 2) -> Tree:
    return Hierarchy(b).build(Item(f"i{n}", "text", sentences=[f"s{i}." for i in range(n)]))


@st.composite
def tree_and_scores(draw):
    n = draw(st.integers(1, 64))
    b = draw(st.integers(2, 4))
    tree = tree_of(n, b)
    # Few distinct values so that ties (>= vs >) are exercised often.
    scores = np.array(
        draw(st.lists(st.sampled_from([0.1, 0.2, 0.3, 0.5]), min_size=len(tree), max_size=len(tree)))
    )
    return tree, scores


@given(tree_and_scores())
def test_forest_is_nonempty_non_ancestral_and_in_leaf_order(ts) -> None:
    tree, scores = ts
    kept = parent_relative(tree, scores)
    assert kept
    ancestors = {a for v in kept for a in tree.ancestors(v)}
    assert not ancestors & set(kept)
    starts = [int(tree.starts[v]) for v in kept]
    assert starts == sorted(starts)
    # Retained ranges never overlap.
    for a, b in zip(kept, kept[1:]):
        assert tree.ends[a] <= tree.starts[b]


@given(tree_and_scores())
def test_each_decision_follows_the_rule(ts) -> None:
    tree, scores = ts
    kept = set(parent_relative(tree, scores))
    for v in kept:
        # A retained node has no child scoring >= itself (else it would have been refined).
        assert all(scores[c] < scores[v] for c in tree.children[v])
        # Every ancestor step on the path to v was a kept child (scored >= its parent).
        for a in [v, *tree.ancestors(v)][:-1]:
            assert scores[a] >= scores[tree.parent[a]]


class RecordingScores:
    """``score_nodes`` over fixed full score arrays, recording every request."""

    def __init__(self, scores: list[np.ndarray]) -> None:
        self.scores = scores
        self.requests: list[list[list[int]]] = []

    def __call__(self, requests):
        self.requests.append([list(r) for r in requests])
        return [s[list(r)] for s, r in zip(self.scores, requests)]


@given(st.lists(tree_and_scores(), min_size=1, max_size=4), st.lists(st.booleans(), min_size=4, max_size=4))
def test_lazy_refinement_equals_eager_and_scores_each_node_at_most_once(batch, skip) -> None:
    trees, scores = [t for t, _ in batch], [s for _, s in batch]
    skip = skip[: len(trees)]
    fn = RecordingScores(scores)
    kept, partial = parent_relative_lazily(trees, fn, skip)
    for t, s, k, p, sk in zip(trees, scores, kept, partial, skip):
        assert k == ([0] if sk else parent_relative(t, s))
        scored = ~np.isnan(p)
        assert np.allclose(p[scored], s[scored])
        if sk:
            assert not scored.any()
    for j in range(len(trees)):
        asked = [v for call in fn.requests for v in call[j]]
        assert len(asked) == len(set(asked))  # no node encoded twice
    assert len(fn.requests) <= max(int(t.depth.max()) for t in trees) + 1  # one call per tree level


def test_lazy_refinement_stops_encoding_under_a_kept_root() -> None:
    tree = tree_of(16)
    scores = -tree.depth.astype(float)  # parents always win: the root is kept
    fn = RecordingScores([scores])
    kept, partial = parent_relative_lazily([tree], fn)
    assert kept == [[0]]
    assert fn.requests == [[[0, *tree.children[0]]]]  # root + its B children, nothing deeper
    assert np.isnan(partial[0]).sum() == len(tree) - 3


@given(n=st.integers(1, 80), b=st.integers(2, 4))
def test_equal_scores_everywhere_return_the_leaves(n: int, b: int) -> None:
    tree = tree_of(n, b)
    kept = parent_relative(tree, np.full(len(tree), 0.7))
    assert kept == list(leaf_ids(tree))


@given(n=st.integers(1, 80), b=st.integers(2, 4))
def test_children_below_parents_return_the_root(n: int, b: int) -> None:
    tree = tree_of(n, b)
    assert parent_relative(tree, -tree.depth.astype(float)) == [0]


def test_hand_computed_mixed_granularity_forest() -> None:
    tree = tree_of(5)  # ids: 0=[0,5) 1=[0,3) 2=[3,5) 3=[0,2) 4=[2,3) 5=[3,4) 6=[4,5) 7=[0,1) 8=[1,2)
    scores = np.array([0.5, 0.6, 0.4, 0.55, 0.7, 0.3, 0.2, 0.9, 0.1])
    # root: child 1 (0.6 >= 0.5) kept, 2 dropped; node 1: 3 (0.55) no, 4 (0.7) yes -> refine 4 (leaf, kept)
    assert parent_relative(tree, scores) == [4]
    scores = np.array([0.5, 0.6, 0.5, 0.55, 0.58, 0.3, 0.2, 0.9, 0.1])
    # node 1: none of 3 (0.55), 4 (0.58) >= 0.6 -> keep 1; node 2 (0.5 >= 0.5) kept, its kids lower -> keep 2
    assert parent_relative(tree, scores) == [1, 2]
    scores = np.array([0.5, 0.6, 0.1, 0.6, 0.2, 0.0, 0.0, 0.7, 0.6])
    # 1 -> 3 (a tie counts as >=, so 3 is refined) -> 7 (0.7) and 8 (0.6, again a tie) both kept
    assert parent_relative(tree, scores) == [7, 8]


def test_parent_relative_accepts_lists_and_arrays_alike() -> None:
    tree = tree_of(9, 3)
    rng = np.random.default_rng(0)
    scores = rng.random(len(tree))
    assert parent_relative(tree, scores) == parent_relative(tree, scores.tolist())


def test_refiner_keeps_aggregation_tables_whole() -> None:
    trees = [tree_of(6), tree_of(4)]
    scores = [np.zeros(len(t)) for t in trees]
    out = ParentRelativeRefiner()(trees, scores, aggregation=[True, False])
    assert out[0] == [0] and out[1] == list(leaf_ids(trees[1]))


def test_keep_whole_returns_roots() -> None:
    trees = [tree_of(6), tree_of(1)]
    assert KeepWholeRefiner()(trees, None) == [[0], [0]]


def test_flat_top_m_picks_best_leaves_across_items() -> None:
    trees = [tree_of(4), tree_of(3)]
    scores = [np.zeros(len(t)) for t in trees]
    l0, l1 = leaf_ids(trees[0]), leaf_ids(trees[1])
    scores[0][l0] = [0.1, 0.9, 0.2, 0.8]
    scores[1][l1] = [0.85, 0.0, 0.3]
    out = FlatTopMRefiner(m=3)(trees, scores)
    assert out == [[int(l0[1]), int(l0[3])], [int(l1[0])]]
    with pytest.raises(ValueError):
        FlatTopMRefiner(m=0)


def test_flat_top_m_keeps_nothing_of_an_item_without_a_chosen_leaf() -> None:
    # The loop then passes no block for that item (tests/unit/test_loop.py): [] is the contract, not [0].
    trees = [tree_of(3), tree_of(2)]
    scores = [np.zeros(len(t)) for t in trees]
    scores[0][leaf_ids(trees[0])] = [0.9, 0.8, 0.7]
    scores[1][leaf_ids(trees[1])] = [0.1, 0.2]
    assert FlatTopMRefiner(m=2)(trees, scores)[1] == []


@given(tree_and_scores(), st.sampled_from([-0.15, 0.05, 0.2]))
def test_descend_margin_moves_the_threshold_and_lazy_matches_eager(ts, delta) -> None:
    tree, scores = ts
    scores = scores.astype(np.float32)  # the encoder's dtype, which the lazy path stores
    kept = parent_relative(tree, scores, descend_margin=delta)
    s = scores.tolist()  # the rule compares in float64
    tol = TIE_TOLERANCE  # a child within 1e-5 below s(v) + δ counts as reaching it (batching noise)
    for v in kept:  # a kept node has no child reaching its score + δ
        assert all(s[c] < s[v] + delta - tol for c in tree.children[v])
        for a in [v, *tree.ancestors(v)][:-1]:  # every step down cleared the margin
            assert s[a] >= s[tree.parent[a]] + delta - tol
    lazily = parent_relative_lazily([tree], lambda req: [scores[r] for r in req], descend_margin=delta)[0][0]
    assert lazily == kept
    refiner = ParentRelativeRefiner(descend_margin=delta)
    assert refiner([tree], [scores]) == [kept]
    assert refiner.refine_lazily([tree], lambda req: [scores[r] for r in req]) == [kept]


@given(tree_and_scores())
def test_descend_margin_extremes(ts) -> None:
    tree, scores = ts  # scores lie in [0.1, 0.5]
    assert parent_relative(tree, scores, descend_margin=0.0) == parent_relative(tree, scores)
    assert parent_relative(tree, scores, descend_margin=0.5) == [0]  # no child clears the parent by 0.5
    assert parent_relative(tree, scores, descend_margin=-0.5) == leaf_ids(tree).tolist()  # every child does
