"""Parent-relative refinement (Algorithm 1) and its baselines: invariants and hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.refine import (
    FlatTopMRefiner,
    KeepWholeRefiner,
    ParentRelativeRefiner,
    leaf_ids,
    parent_relative,
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
    scores = np.array(draw(st.lists(st.sampled_from([0.1, 0.2, 0.3, 0.5]), min_size=len(tree), max_size=len(tree))))
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
