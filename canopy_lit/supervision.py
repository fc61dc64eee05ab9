"""Gold leaves -> the nodes an ideal refinement visits (V_i) -> preference pairs P(v) (METHOD.md §1.2)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.refine import descends
from canopy_lit.types import Item, Question, Tree

Pair = tuple[int, int]  # (winner node id, loser node id): winner ≻ loser


class PairKind(IntEnum):
    """What a preference pair compares; the training batch carries these codes per pair (``pair_kind``).

    P(v) holds three kinds (:func:`preference_pairs`), hard negatives a fourth; ``PADDING`` (0) marks
    a batch's empty pair slots.
    """

    PADDING = 0
    PARENT_OVER_CHILD = 1  # v ≻ c: a fully gold v over each child, a partly gold v over a gold-free child n
    CHILD_OVER_PARENT = 2  # g ≻ v: a gold child over its partly gold parent (ties hold, as in refinement)
    GOLD_OVER_SIBLING = 3  # g ≻ n: a gold child over a gold-free sibling
    HARD_NEGATIVE = 4  # a gold node of {v} ∪ children(v) over a node of a distractor item


def pair_kind(tree: Tree, winner: int, loser: int) -> PairKind:
    """The kind of the P(v) pair ``winner ≻ loser`` of ``tree``, from the two nodes' places in the tree.

    Raises:
        ValueError: the nodes are neither parent and child nor siblings (no P(v) holds such a pair).
    """
    if tree.parent[winner] == loser:
        return PairKind.CHILD_OVER_PARENT
    if tree.parent[loser] == winner:
        return PairKind.PARENT_OVER_CHILD
    if winner != loser and tree.parent[winner] == tree.parent[loser] >= 0:
        return PairKind.GOLD_OVER_SIBLING
    raise ValueError(
        f"item {tree.item.id!r}: pair {winner} ≻ {loser} is neither parent / child nor siblings: no PairKind"
    )


def gold_counts(tree: Tree, gold_leaves: Iterable[int]) -> np.ndarray:
    """(num_nodes,) number of gold leaves under each node."""
    mask = np.zeros(tree.n_leaves + 1, dtype=np.int64)
    for g in gold_leaves:
        if not 0 <= g < tree.n_leaves:
            raise IndexError(f"gold leaf {g} outside item {tree.item.id!r} with {tree.n_leaves} leaves")
        mask[g + 1] = 1
    csum = np.cumsum(mask)
    return csum[tree.ends] - csum[tree.starts]


def visited_nodes(tree: Tree, gold_leaves: Iterable[int]) -> list[int]:
    """V_i: internal nodes overlapping the gold with no fully-gold proper ancestor (breadth-first order)."""
    counts = gold_counts(tree, gold_leaves)
    sizes = tree.ends - tree.starts
    out: list[int] = []
    stack = [0]
    while stack:  # only descend below partly-gold nodes: a fully-gold node stops the walk
        v = stack.pop()
        if counts[v] == 0 or tree.is_leaf(v):
            continue
        out.append(v)
        if counts[v] < sizes[v]:
            stack.extend(reversed(tree.children[v]))
    return sorted(out)


def preference_pairs(tree: Tree, v: int, gold_leaves: Iterable[int] | np.ndarray) -> list[Pair]:
    """P(v): fully gold -> v ≻ every child; partly gold -> g ≻ v, v ≻ n, g ≻ n (kinds: :func:`pair_kind`).

    ``gold_leaves`` may also be the precomputed ``gold_counts`` array.
    """
    counts = gold_leaves if isinstance(gold_leaves, np.ndarray) and len(gold_leaves) == len(tree) else gold_counts(tree, gold_leaves)
    kids = tree.children[v]
    size = int(tree.ends[v] - tree.starts[v])
    if counts[v] == size:
        return [(v, c) for c in kids]
    gold = [c for c in kids if counts[c] > 0]
    free = [c for c in kids if counts[c] == 0]
    return [(g, v) for g in gold] + [(v, n) for n in free] + [(g, n) for g in gold for n in free]


@dataclass
class Instance:
    """One training instance (q, v, P(v)) on the gold item ``tree``.

    ``hard_negatives`` (opt-in, :func:`add_hard_negatives`): (distractor tree, node id) of nodes from
    the question's non-gold items; every gold-containing node of {v} ∪ children(v) must beat each of
    them (:attr:`hard_pairs`). They are kept apart from ``pairs``: P(v) alone is the refinement decision.
    """

    question_id: str
    question: str
    tree: Tree
    node: int
    pairs: list[Pair]
    benchmark: str = ""
    hard_negatives: list[tuple[Tree, int]] = field(default_factory=list)

    @property
    def depth(self) -> int:
        return int(self.tree.depth[self.node])

    @property
    def pair_kinds(self) -> list[PairKind]:
        """The kind of each pair of ``pairs``, in order."""
        return [pair_kind(self.tree, a, b) for a, b in self.pairs]

    @property
    def stop(self) -> bool:
        """A "stop" decision: v is fully gold, so P(v) = v ≻ every child (a partly gold v has g ≻ v pairs)."""
        return bool(self.pairs) and all(a == self.node for a, _ in self.pairs)

    def gold_nodes(self) -> list[int]:
        """Nodes of {v} ∪ children(v) holding gold, read off P(v).

        v ∈ V_i always overlaps the gold; a fully gold v has only gold children (all of them), a
        partly gold one exactly the children g of its g ≻ v pairs.
        """
        kids = self.tree.children[self.node]
        if self.stop:
            return [self.node, *kids]
        return [self.node, *(c for c in kids if (c, self.node) in self.pairs)]

    @property
    def hard_pairs(self) -> list[tuple[int, int]]:
        """(gold node id in ``tree``, index into ``hard_negatives``): every gold node ≻ every hard negative."""
        return [(g, k) for g in self.gold_nodes() for k in range(len(self.hard_negatives))]


def instances_for(
    question_id: str, question: str, tree: Tree, gold_leaves: Sequence[int], benchmark: str = ""
) -> list[Instance]:
    """All (q, v) instances of one gold item; empty gold (span not located) yields none."""
    if not gold_leaves:
        return []
    counts = gold_counts(tree, gold_leaves)
    return [
        Instance(question_id, question, tree, v, preference_pairs(tree, v, counts), benchmark)
        for v in visited_nodes(tree, gold_leaves)
    ]


def pair_holds(tree: Tree, scores: np.ndarray, winner: int, loser: int, descend_margin: float = 0.0) -> bool:
    """Does the scorer agree with ``winner ≻ loser`` as refinement would act on it?

    A child beats its parent when it scores >= the parent + δ (refinement keeps it); a parent beats
    a child when the child scores below the parent + δ (refinement drops it); any other preference
    needs a strictly higher score. δ (``descend_margin``) = 0 is the paper's rule.
    """
    w, lo = float(scores[winner]), float(scores[loser])
    if tree.parent[winner] == loser:
        return descends(w, lo, descend_margin)
    if tree.parent[loser] == winner:
        return not descends(lo, w, descend_margin)
    return w > lo


def decision_correct(tree: Tree, scores: np.ndarray, pairs: Sequence[Pair], descend_margin: float = 0.0) -> bool:
    """A refinement decision at v is correct iff every preference in P(v) holds (under δ)."""
    return all(pair_holds(tree, scores, a, b, descend_margin) for a, b in pairs)


def pick_hard_negatives(
    inst: Instance, distractors: Sequence[str], tree_of: Callable[[str], Tree], n: int
) -> list[tuple[Tree, int]]:
    """Up to ``n`` distinct distractor nodes for (q, v), the same on every run and machine.

    Seeded by (question, gold item, v), not a global RNG, so the choice does not depend on the
    order instances are built in. Distractor items are visited in a seeded order, round-robin, each
    giving one node per visit: a random node at v's depth, else its root (a shallower tree). Fewer
    than ``n`` only when the distractors run out of such nodes; trees are built (``tree_of``) only
    for the items visited.
    """
    if n <= 0 or not distractors:
        return []
    rng = random.Random(f"{inst.question_id}\0{inst.tree.item.id}\0{inst.node}")  # str seeds: stable hash
    order = sorted(distractors)  # sorted first: the result must not depend on the candidate order
    rng.shuffle(order)
    depth = inst.depth
    picked: list[tuple[Tree, int]] = []
    used: set[tuple[str, int]] = set()
    while len(picked) < n:
        before = len(picked)
        for item_id in order:
            if len(picked) == n:
                break
            tree = tree_of(item_id)
            pool = [u for u in range(len(tree)) if tree.depth[u] == depth and (item_id, u) not in used]
            if not pool and (item_id, tree.root) not in used:
                pool = [tree.root]
            if pool:
                u = rng.choice(pool)
                used.add((item_id, u))
                picked.append((tree, u))
        if len(picked) == before:  # every distractor exhausted
            break
    return picked


def add_hard_negatives(
    instances: Sequence[Instance],
    questions: Iterable[Question],
    candidates: Mapping[str, Sequence[str]],
    items: Mapping[str, Item],
    hierarchy: Hierarchy,
    n: int,
    tree_cache: dict[str, Tree] | None = None,
) -> int:
    """Attach ``n`` hard negatives to each instance (in place) from its question's distractor items.

    Distractors: the items delivered with the question (``candidates``) that are not gold and are in
    ``items``; a question without any gets none. Trees come from ``hierarchy`` (the gold trees' own).
    Returns the number of hard-negative nodes attached.
    """
    trees = tree_cache if tree_cache is not None else {}
    gold = {q.id: set(q.gold) for q in questions}

    def tree_of(item_id: str) -> Tree:
        if item_id not in trees:
            trees[item_id] = hierarchy.build(items[item_id])
        return trees[item_id]

    added = 0
    for inst in instances:
        gold_ids = gold.get(inst.question_id, set())
        delivered = dict.fromkeys(candidates.get(inst.question_id, ()))
        distractors = [i for i in delivered if i not in gold_ids and i in items]
        inst.hard_negatives = pick_hard_negatives(inst, distractors, tree_of, n)
        added += len(inst.hard_negatives)
    return added


@dataclass
class InstanceStats:
    """What ``training_instances`` saw: questions, gold items, instances, and items it had to skip."""

    questions: int = 0
    gold_items: int = 0
    instances: int = 0
    skipped_items: dict[str, int] = field(default_factory=dict)


def training_instances(
    questions: Iterable[Question],
    items: Mapping[str, Item],
    hierarchy: Hierarchy,
    benchmark: str = "",
    tree_cache: dict[str, Tree] | None = None,
    stats: InstanceStats | None = None,
) -> list[Instance]:
    """All (q, v, P(v)) instances of the gold items of ``questions``, trees built by ``hierarchy``.

    The one instance builder of training (the datamodule), the stats command and the tests, so
    they cannot drift apart. Gold items whose span was not located (empty leaf list) are
    whole-gold and yield nothing (METHOD.md §1.2); a gold item missing from ``items`` is counted
    in ``stats.skipped_items["missing_item"]``, not fatal.

    Args:
        benchmark: label of every instance (default: each question's own ``benchmark``).
        tree_cache: item id -> tree, shared across calls (e.g. the splits of one benchmark).
        stats: counts added to in place.

    Raises:
        ValueError: a gold leaf index outside its item (names question and item).
    """
    trees = tree_cache if tree_cache is not None else {}
    out: list[Instance] = []
    for q in questions:
        if stats is not None:
            stats.questions += 1
        for item_id, gold in q.gold.items():
            item = items.get(item_id)
            if item is None:
                if stats is not None:
                    stats.skipped_items["missing_item"] = stats.skipped_items.get("missing_item", 0) + 1
                continue
            inst: list[Instance] = []
            if gold:  # an unlocated span yields no instance: no tree to build
                if item_id not in trees:
                    trees[item_id] = hierarchy.build(item)
                try:
                    inst = instances_for(q.id, q.text, trees[item_id], gold, benchmark or q.benchmark)
                except IndexError as err:
                    raise ValueError(f"{benchmark or q.benchmark}: question {q.id!r}, item {item_id!r}: {err}") from err
            if stats is not None:
                stats.gold_items += 1
                stats.instances += len(inst)
            out.extend(inst)
    return out
