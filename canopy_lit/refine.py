"""Refiners: turn node scores of retrieved items into the evidence forest (METHOD.md §1.1 step 5).

All refiners share one call shape, so "no compression" and "flat top-m" are
plain config swaps (``refine=keep_whole``, ``refine=flat_top_m``) of the same stage::

    refiner(trees, scores, aggregation) -> list of retained node ids per tree

``scores[j]`` is a 1-D array of s(q, v) over the node ids of ``trees[j]``. An empty id list means
nothing of that item is kept (flat top-m); the loop drops such items from the evidence.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from canopy_lit.types import Tree


def parent_relative(tree: Tree, scores: Sequence[float] | np.ndarray, descend_margin: float = 0.0) -> list[int]:
    """Algorithm 1: keep and refine every child scoring >= its parent; if none does, keep the parent.

    Args:
        tree: the item's region tree.
        scores: (num_nodes,) node scores s(q, v), indexed by node id.
        descend_margin: δ; a child is kept iff s(c) >= s(v) + δ. 0 is the paper's rule; δ > 0 keeps
            parents whole more often (more gold recall, more tokens), δ < 0 descends more.

    Returns:
        Retained node ids in leaf order; pairwise non-ancestral and never empty.
    """
    s = scores.tolist() if isinstance(scores, np.ndarray) else scores
    children = tree.children
    kept: list[int] = []
    stack = [0]
    while stack:  # depth-first; children pushed reversed so the output stays in leaf order
        v = stack.pop()
        sv = s[v]
        refined = False
        for c in reversed(children[v]):
            if s[c] >= sv + descend_margin:
                stack.append(c)
                refined = True
        if not refined:
            kept.append(v)
    return kept


NodeScoreFn = Callable[[Sequence[Sequence[int]]], Sequence[np.ndarray]]
"""``score_nodes(requests) -> scores``: ``requests[j]`` lists node ids of tree j; one (len,) array per tree."""


def parent_relative_lazily(
    trees: Sequence[Tree], score_nodes: NodeScoreFn, skip: Sequence[bool] | None = None, descend_margin: float = 0.0
) -> tuple[list[list[int]], list[np.ndarray]]:
    """Algorithm 1 scoring only the nodes it reads, one tree level at a time across all trees.

    The refinement reads s(v) and s(children of v) only where it descends, so the subtree under
    a kept node is never encoded. Scoring level by level keeps encoder batches large: one
    ``score_nodes`` call per tree level (<= depth + 1 calls), every tree of the round in each call.
    The result is identical to ``parent_relative`` on full scores (tested).

    Args:
        trees: the round's region trees.
        score_nodes: batched scorer of requested node ids (see ``NodeScoreFn``).
        skip: trees to keep whole without scoring (e.g. tables of aggregation questions).
        descend_margin: δ of ``parent_relative``.

    Returns:
        (kept node ids per tree in leaf order, scores per tree with NaN where a node was never scored)
    """
    skip = skip or [False] * len(trees)
    scores = [np.full(len(t), np.nan, dtype=np.float32) for t in trees]
    kept: list[list[int]] = [[0] if s else [] for s in skip]
    expand: list[list[int]] = [[] if s else [0] for s in skip]  # nodes whose children are compared next
    while any(expand):
        # The nodes to expand (only roots are unscored here) and all their children, in one request.
        requests = [
            [u for u in ex if np.isnan(s[u])] + [c for u in ex for c in t.children[u]]
            for t, s, ex in zip(trees, scores, expand, strict=True)
        ]
        for j, got in enumerate(score_nodes(requests)):
            scores[j][requests[j]] = np.asarray(got, dtype=np.float32)
        nxt: list[list[int]] = []
        for t, s, ex, out in zip(trees, scores, expand, kept, strict=True):
            deeper = []
            for v in ex:
                # float(): compare in float64 like the eager path (float32 + δ would round differently)
                up = [c for c in t.children[v] if float(s[c]) >= float(s[v]) + descend_margin]
                if up:
                    deeper.extend(up)
                else:
                    out.append(v)
            nxt.append(deeper)
        expand = nxt
    for t, out in zip(trees, kept, strict=True):
        out.sort(key=lambda v: int(t.starts[v]))
    return kept, scores


def keep_whole(tree: Tree) -> list[int]:
    """The root only ("w/o projection")."""
    return [0]


def leaf_ids(tree: Tree) -> np.ndarray:
    """Node ids of the leaf nodes, ordered by leaf index."""
    n = tree.ends - tree.starts
    ids = np.flatnonzero(n == 1)
    return ids[np.argsort(tree.starts[ids], kind="stable")]


class Refiner(Protocol):
    """What the evidence loop relies on.

    Attributes:
        needs_scores: the loop encodes nodes and passes their scores only when True (keep-whole
            reads none, so a method with it loads no node scorer).
        lazy: when True the loop calls ``refine_lazily`` (``LazyRefiner``) instead of ``__call__``
            and encodes only the nodes the refinement asks for.
    """

    needs_scores: bool
    lazy: bool

    def __call__(
        self, trees: Sequence[Tree], scores: Sequence[np.ndarray] | None, aggregation: Sequence[bool] | None = None
    ) -> list[list[int]]: ...


class LazyRefiner(Refiner, Protocol):
    """A refiner with ``lazy = True``: same decisions as ``__call__``, scoring nodes on demand."""

    def refine_lazily(
        self, trees: Sequence[Tree], score_nodes: NodeScoreFn, aggregation: Sequence[bool] | None = None
    ) -> list[list[int]]: ...


class ParentRelativeRefiner:
    """CANOPY's refiner. Tables of aggregation questions (``aggregation[j]``) are kept whole.

    Args:
        lazy: let the pipeline score only the nodes the refinement reads (``refine_lazily``);
            same decisions, fewer node encodings when nothing is cached. False = score every node.
        descend_margin: δ of ``parent_relative`` (0 = the paper): an inference-time knob, chosen on
            a validation probe, that trades kept tokens for gold recall without retraining.
    """

    name = "parent_relative"
    needs_scores = True

    def __init__(self, lazy: bool = True, descend_margin: float = 0.0) -> None:
        self.lazy = lazy
        self.descend_margin = float(descend_margin)

    def __call__(
        self, trees: Sequence[Tree], scores: Sequence[np.ndarray], aggregation: Sequence[bool] | None = None
    ) -> list[list[int]]:
        agg = aggregation or [False] * len(trees)
        return [
            [0] if a else parent_relative(t, s, self.descend_margin) for t, s, a in zip(trees, scores, agg, strict=True)
        ]

    def refine_lazily(
        self, trees: Sequence[Tree], score_nodes: NodeScoreFn, aggregation: Sequence[bool] | None = None
    ) -> list[list[int]]:
        """Same decisions as ``__call__``, encoding only the nodes the refinement reads."""
        return parent_relative_lazily(trees, score_nodes, aggregation, self.descend_margin)[0]


class KeepWholeRefiner:
    """Whole items: the "w/o projection" ablation and the vanilla-RAG evidence."""

    name = "keep_whole"
    needs_scores = False
    lazy = False

    def __call__(
        self,
        trees: Sequence[Tree],
        scores: Sequence[np.ndarray] | None = None,
        aggregation: Sequence[bool] | None = None,
    ) -> list[list[int]]:
        return [[0] for _ in trees]


class FlatTopMRefiner:
    """Leaf-level top-m over all items of a question (the flat baseline of METHOD.md §1.3).

    An item none of whose leaves is among the top m gets ``[]``: the loop then gives the critic
    and the reader no block for it (not a bare header) and counts no tokens for it.

    Args:
        m: number of leaves kept across the question's items (ties broken by item, then leaf order).
    """

    name = "flat_top_m"
    needs_scores = True
    lazy = False

    def __init__(self, m: int = 10) -> None:
        if m < 1:
            raise ValueError(f"refine.m must be >= 1, got {m}")
        self.m = m

    def __call__(
        self, trees: Sequence[Tree], scores: Sequence[np.ndarray], aggregation: Sequence[bool] | None = None
    ) -> list[list[int]]:
        agg = aggregation or [False] * len(trees)
        per_tree = [leaf_ids(t) for t in trees]
        cand = [
            (float(np.asarray(s)[ids[k]]), j, k)
            for j, (ids, s, a) in enumerate(zip(per_tree, scores, agg, strict=True))
            if not a
            for k in range(len(ids))
        ]
        cand.sort(key=lambda x: (-x[0], x[1], x[2]))
        chosen: list[list[int]] = [[] for _ in trees]
        for _, j, k in cand[: self.m]:
            chosen[j].append(int(per_tree[j][k]))
        return [
            [0] if a else sorted(c, key=lambda i: int(trees[j].starts[i]))
            for j, (c, a) in enumerate(zip(chosen, agg))
        ]
