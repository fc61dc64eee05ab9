"""Algorithm 1 (parent-relative refinement, eager and lazy), keep-whole, the ``Refiner`` protocol and the two
refiners built on them: ``ParentRelativeRefiner`` (CANOPY) and ``KeepWholeRefiner``."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Annotated, Protocol

import numpy as np
from annotated_types import Interval

from canopy_lit.types import Tree

TIE_TOLERANCE = 1e-5
"""How far below ``s(v) + δ`` a child may score and still count as scoring >= it.

The same node's score differs by ~1e-7 between encoder batches (padding changes the float32 kernels), so
a strict ``>=`` at a near-tie (most often an exact tie: a child whose encoder input equals its parent's
after truncation) would flip with lazy vs eager scoring or with ``max_batch_tokens``. 1e-5 is ~100x that
noise and far below any score gap or δ step that matters (δ grids step by 0.02)."""


def descends(child: float, parent: float, descend_margin: float = 0.0) -> bool:
    """Algorithm 1's test, the one rule every caller applies: is ``child`` >= ``parent`` + δ (in float64, up
    to ``TIE_TOLERANCE``)?"""
    return float(child) >= float(parent) + descend_margin - TIE_TOLERANCE


def parent_relative(tree: Tree, scores: Sequence[float] | np.ndarray, descend_margin: float = 0.0) -> list[int]:
    """Algorithm 1: keep and refine every child scoring >= its parent; if none does, keep the parent.

    Args:
        tree: the item's region tree.
        scores: (num_nodes,) node scores s(q, v), indexed by node id.
        descend_margin: δ; a child is kept iff s(c) >= s(v) + δ (up to ``TIE_TOLERANCE``, so a decision
            does not depend on how the encoder batched the nodes). 0 is the paper's rule; δ > 0 keeps
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
            if descends(s[c], sv, descend_margin):
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
                up = [c for c in t.children[v] if descends(s[c], s[v], descend_margin)]
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


def drop_items(
    kept: Sequence[list[int]], scores: Sequence[np.ndarray], item_margin: float
) -> list[list[int]]:
    """Item-level pruning after refinement: an item whose best kept node scores more than ``item_margin``
    below the round's best item is dropped whole (its list emptied).

    Args:
        kept: (num_items,) kept node ids per item (``parent_relative``'s output).
        scores: (num_items,) arrays of node scores indexed by node id; NaN where a node was never scored.
        item_margin: how far below the round's best item an item may score and stay (>= 0).

    Returns:
        ``kept`` with the dropped items' lists empty. The best item always stays; an item none of whose kept
        nodes was scored (a table kept whole for an aggregation question) is never dropped.
    """
    best = [
        max((float(s[v]) for v in ids if not np.isnan(s[v])), default=math.nan)
        for ids, s in zip(kept, scores, strict=True)
    ]
    top = max((b for b in best if not math.isnan(b)), default=math.nan)
    if math.isnan(top):
        return [list(ids) for ids in kept]
    return [
        [] if b < top - item_margin - TIE_TOLERANCE else list(ids) for ids, b in zip(kept, best, strict=True)
    ]


class ParentRelativeRefiner:
    """CANOPY's refiner. Tables of aggregation questions (``aggregation[j]``) are kept whole.

    Args:
        lazy: let the pipeline score only the nodes the refinement reads (``refine_lazily``);
            same decisions, fewer node encodings when nothing is cached. False = score every node.
        descend_margin: δ of ``parent_relative`` (0 = the paper): an inference-time knob, chosen on
            a validation probe, that trades kept tokens for gold recall without retraining.
        item_margin: None (the paper: every item keeps a node) or drop each item whose best kept node scores
            more than this below the round's best item (``drop_items``): a document compressor's pruning of
            irrelevant passages, for practitioners.
    """

    needs_scores = True

    def __init__(
        self,
        lazy: bool = True,
        descend_margin: Annotated[float, Interval(ge=-1.0, le=1.0)] = 0.0,  # on cosines: |δ| > 1 is a typo
        item_margin: Annotated[float, Interval(ge=0.0, le=2.0)] | None = None,  # a cosine gap over 2 drops nothing
    ) -> None:
        if item_margin is not None and not (math.isfinite(item_margin) and item_margin >= 0):
            raise ValueError(f"item_margin must be None or a finite number >= 0, got {item_margin}")
        self.lazy = lazy
        self.descend_margin = float(descend_margin)
        self.item_margin = None if item_margin is None else float(item_margin)

    def __call__(
        self, trees: Sequence[Tree], scores: Sequence[np.ndarray], aggregation: Sequence[bool] | None = None
    ) -> list[list[int]]:
        agg = aggregation or [False] * len(trees)
        kept = [
            [0] if a else parent_relative(t, s, self.descend_margin) for t, s, a in zip(trees, scores, agg, strict=True)
        ]
        if self.item_margin is None:
            return kept
        # an aggregation table counts as unscored, as in the lazy path (its nodes are never read there)
        seen = [np.full(len(s), np.nan, np.float32) if a else np.asarray(s, np.float32) for s, a in zip(scores, agg, strict=True)]
        return drop_items(kept, seen, self.item_margin)

    def refine_lazily(
        self, trees: Sequence[Tree], score_nodes: NodeScoreFn, aggregation: Sequence[bool] | None = None
    ) -> list[list[int]]:
        """Same decisions as ``__call__``, encoding only the nodes the refinement reads."""
        kept, scores = parent_relative_lazily(trees, score_nodes, aggregation, self.descend_margin)
        return kept if self.item_margin is None else drop_items(kept, scores, self.item_margin)


class KeepWholeRefiner:
    """Whole items: the "w/o projection" ablation and the vanilla-RAG evidence."""

    needs_scores = False
    lazy = False

    def __call__(
        self,
        trees: Sequence[Tree],
        scores: Sequence[np.ndarray] | None = None,
        aggregation: Sequence[bool] | None = None,
    ) -> list[list[int]]:
        return [[0] for _ in trees]
