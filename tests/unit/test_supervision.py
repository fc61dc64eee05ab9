"""V_i and P(v) (METHOD.md §1.2): property tests on random trees and gold sets, and hand-computed trees."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.refine import descends, parent_relative
from canopy_lit.supervision import (
    decision_correct,
    gold_counts,
    instances_for,
    preference_pairs,
    visited_nodes,
)
from canopy_lit.types import Item, Tree


def tree_of(n: int, b: int) -> Tree:
    return Hierarchy(b).build(Item("t", "text", sentences=[f"Sentence {i}." for i in range(n)]))


@st.composite
def tree_and_gold(draw, max_leaves: int = 48):
    n = draw(st.integers(1, max_leaves))
    b = draw(st.integers(2, 5))
    gold = draw(st.sets(st.integers(0, n - 1), max_size=n))
    return tree_of(n, b), sorted(gold)


def leaves(tree: Tree, v: int) -> set[int]:
    return set(range(int(tree.starts[v]), int(tree.ends[v])))


def brute_visited(tree: Tree, gold: set[int]) -> list[int]:
    """The definition, read literally: internal, overlaps G, no fully-gold proper ancestor."""
    out = []
    for v in range(len(tree)):
        if tree.is_leaf(v) or not leaves(tree, v) & gold:
            continue
        if any(leaves(tree, a) <= gold for a in tree.ancestors(v)):
            continue
        out.append(v)
    return out


def brute_pairs(tree: Tree, v: int, gold: set[int]) -> set[tuple[int, int]]:
    kids = tree.children[v]
    if leaves(tree, v) <= gold:
        return {(v, c) for c in kids}
    g = [c for c in kids if leaves(tree, c) & gold]
    n = [c for c in kids if not leaves(tree, c) & gold]
    return {(x, v) for x in g} | {(v, y) for y in n} | {(x, y) for x in g for y in n}


@given(tree_and_gold())
def test_visited_nodes_match_the_definition(case) -> None:
    tree, gold = case
    assert visited_nodes(tree, gold) == brute_visited(tree, set(gold))


@given(tree_and_gold())
def test_pairs_follow_the_fully_and_partly_gold_rules(case) -> None:
    tree, gold = case
    gs = set(gold)
    for v in visited_nodes(tree, gold):
        pairs = preference_pairs(tree, v, gold)
        assert len(pairs) == len(set(pairs)), "no duplicate preferences"
        assert set(pairs) == brute_pairs(tree, v, gs)
        kids = set(tree.children[v])
        assert all(a in kids | {v} and b in kids | {v} and a != b for a, b in pairs)
        if leaves(tree, v) <= gs:  # fully gold: stop here, v beats every child
            assert len(pairs) == len(kids) and all(a == v for a, _ in pairs)
        else:  # partly gold: winners never gold-free, losers never beat a gold child
            ng = sum(1 for c in kids if leaves(tree, c) & gs)
            assert len(pairs) == ng + (len(kids) - ng) + ng * (len(kids) - ng)
            assert all(leaves(tree, a) & gs for a, _ in pairs)
            assert all(b == v or not leaves(tree, b) & gs for _, b in pairs)


@given(tree_and_gold())
def test_counts_as_array_give_the_same_pairs(case) -> None:
    tree, gold = case
    counts = gold_counts(tree, gold)
    assert counts[0] == len(gold)
    for v in visited_nodes(tree, gold):
        assert preference_pairs(tree, v, counts) == preference_pairs(tree, v, gold)


@given(tree_and_gold())
def test_instances_one_per_visited_node_and_none_without_gold(case) -> None:
    tree, gold = case
    inst = instances_for("q", "question", tree, gold, "bench")
    assert [x.node for x in inst] == visited_nodes(tree, gold)
    assert all(x.pairs for x in inst), "every visited node has at least one preference"
    if not gold or tree.n_leaves == 1:
        assert inst == []
    else:
        assert inst[0].node == 0, "the root is visited whenever gold exists and the tree has depth"


@given(tree_and_gold())
def test_a_scorer_satisfying_every_pair_makes_refinement_keep_exactly_the_gold(case) -> None:
    """Training target == inference rule: all P(v) hold -> Algorithm 1 keeps all gold, no gold-free leaf."""
    tree, gold = case
    gs = set(gold)
    if not gs:
        return
    # Oracle: depth on the visited region (nodes overlapping gold under partly-gold ancestors), -1 elsewhere.
    scores = np.full(len(tree), -1.0)
    for v in range(len(tree)):
        if leaves(tree, v) & gs and all(not leaves(tree, a) <= gs for a in tree.ancestors(v)):
            scores[v] = tree.depth[v]
    for v in visited_nodes(tree, gold):
        assert decision_correct(tree, scores, preference_pairs(tree, v, gold))
    kept = parent_relative(tree, scores)
    kept_leaves = set().union(*(leaves(tree, v) for v in kept))
    assert kept_leaves == gs


@given(tree_and_gold(), st.sampled_from([-0.2, 0.0, 0.15]), st.randoms(use_true_random=False))
def test_a_decision_is_judged_correct_iff_refinement_acts_ideally_under_the_margin(case, delta, rnd) -> None:
    """decision_correct(δ) == "parent-relative refinement with δ does at v what the gold asks".

    Ideal action at a visited v: fully gold -> keep v (refine no child); partly gold -> refine exactly
    the gold children. Random scores (on a coarse grid, so ties occur) and δ in {-0.2, 0, 0.15}.
    """
    tree, gold = case
    scores = np.array([rnd.choice([0.0, 0.1, 0.15, 0.2, 0.3, 0.5]) for _ in range(len(tree))], dtype=np.float32)
    counts = gold_counts(tree, gold)
    for v in visited_nodes(tree, gold):
        kids = tree.children[v]
        refined = {c for c in kids if descends(scores[c], scores[v], delta)}  # refinement's own rule
        full = counts[v] == tree.ends[v] - tree.starts[v]
        ideal = set() if full else {c for c in kids if counts[c] > 0}
        assert decision_correct(tree, scores, preference_pairs(tree, v, counts), delta) == (refined == ideal)


def test_gold_leaves_do_not_depend_on_branching() -> None:
    item = Item("t", "text", text="One sentence here. Another one follows. A third closes. And a fourth.")
    trees = [Hierarchy(b).build(item) for b in (2, 3, 4)]
    assert (
        [leaf.text for leaf in trees[0].leaves]
        == [leaf.text for leaf in trees[1].leaves]
        == [leaf.text for leaf in trees[2].leaves]
    )


# Hand-computed: 4 leaves, B = 2 -> 0:[0,4) 1:[0,2) 2:[2,4) 3:[0,1) 4:[1,2) 5:[2,3) 6:[3,4)


def test_hand_computed_single_gold_leaf() -> None:
    tree = tree_of(4, 2)
    assert visited_nodes(tree, [0]) == [0, 1]
    assert set(preference_pairs(tree, 0, [0])) == {(1, 0), (0, 2), (1, 2)}
    assert set(preference_pairs(tree, 1, [0])) == {(3, 1), (1, 4), (3, 4)}


def test_hand_computed_fully_gold_child_stops_the_walk() -> None:
    tree = tree_of(4, 2)
    assert visited_nodes(tree, [0, 1]) == [0, 1]
    assert set(preference_pairs(tree, 1, [0, 1])) == {(1, 3), (1, 4)}  # keep the context
    assert visited_nodes(tree, [0, 1, 2, 3]) == [0]  # whole item gold: one decision, at the root
    assert set(preference_pairs(tree, 0, [0, 1, 2, 3])) == {(0, 1), (0, 2)}


def test_hand_computed_gold_in_both_halves() -> None:
    tree = tree_of(4, 2)
    assert visited_nodes(tree, [1, 2]) == [0, 1, 2]
    assert set(preference_pairs(tree, 0, [1, 2])) == {(1, 0), (2, 0)}  # no gold-free child
    assert set(preference_pairs(tree, 2, [1, 2])) == {(5, 2), (2, 6), (5, 6)}


def test_hand_computed_uneven_split_and_b3() -> None:
    tree = tree_of(5, 2)  # 0:[0,5) 1:[0,3) 2:[3,5)
    assert (tree.starts[1], tree.ends[1], tree.starts[2], tree.ends[2]) == (0, 3, 3, 5)
    assert visited_nodes(tree, [4]) == [0, 2]
    tree3 = tree_of(6, 3)  # root -> [0,2) [2,4) [4,6)
    pairs = set(preference_pairs(tree3, 0, [2]))
    assert pairs == {(2, 0), (0, 1), (0, 3), (2, 1), (2, 3)}


def test_unlocated_gold_yields_no_instance_and_bad_leaf_is_an_error() -> None:
    tree = tree_of(4, 2)
    assert instances_for("q", "x", tree, [], "b") == []
    with pytest.raises(IndexError, match="outside item"):
        gold_counts(tree, [4])
