"""Leaf selection: the three refiners that rank leaves across a question's items with ``best_leaves``
(flat top-m, flat at CANOPY's token count, RECOMP-style extractive)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import numpy as np
from annotated_types import Ge, Interval

from canopy_lit.hierarchy import Hierarchy, TokenCounter
from canopy_lit.llm.tokenizers import token_counter
from canopy_lit.refine.rule import NodeScoreFn, ParentRelativeRefiner, Refiner
from canopy_lit.types import Tree


def leaf_ids(tree: Tree) -> np.ndarray:
    """Node ids of the leaf nodes, ordered by leaf index."""
    n = tree.ends - tree.starts
    ids = np.flatnonzero(n == 1)
    return ids[np.argsort(tree.starts[ids], kind="stable")]


def leaf_scores(trees: Sequence[Tree], scores: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The leaves' entries of full node scores: (n_leaves_j,) per tree, aligned with ``leaf_ids``."""
    return [np.asarray(s)[leaf_ids(t)] for t, s in zip(trees, scores, strict=True)]


def best_leaves(
    trees: Sequence[Tree],
    scores: Sequence[np.ndarray],
    m: int | None = None,
    skip: Sequence[bool] | None = None,
) -> list[tuple[int, int]]:
    """``(tree index, leaf node id)`` of the leaves of all trees, best score first: the top ``m`` (all when None).

    Args:
        trees: the round's region trees.
        scores: (n_leaves_j,) leaf scores per tree, aligned with ``leaf_ids(trees[j])`` (``leaf_scores``).
        m: how many to return (None = every leaf, for a selection that goes on past a count).
        skip: trees that offer no leaf (e.g. tables kept whole for an aggregation question).

    Ties go to the earlier tree, then the earlier leaf, so a selection is the same on every run.
    """
    skip = skip or [False] * len(trees)
    ids = [leaf_ids(t) for t in trees]
    ranked = [
        (float(s[k]), j, k)
        for j, (s, off) in enumerate(zip(scores, skip, strict=True))
        if not off
        for k in range(len(ids[j]))
    ]
    ranked.sort(key=lambda x: (-x[0], x[1], x[2]))
    return [(j, int(ids[j][k])) for _, j, k in ranked[:m]]


def by_tree(trees: Sequence[Tree], picked: Sequence[tuple[int, int]]) -> list[list[int]]:
    """Node ids per tree, in leaf order, of ``(tree index, node id)`` pairs (``best_leaves``)."""
    chosen: list[list[int]] = [[] for _ in trees]
    for j, v in picked:
        chosen[j].append(v)
    return [sorted(c, key=lambda i: int(t.starts[i])) for t, c in zip(trees, chosen, strict=True)]


class FlatTopMRefiner:
    """Leaf-level top-m over all items of a question (the flat baseline of METHOD.md §1.3).

    An item none of whose leaves is among the top m gets ``[]``: the loop then gives the critic
    and the reader no block for it (not a bare header) and counts no tokens for it.

    Args:
        m: number of leaves kept across the question's items (ties broken by item, then leaf order).
    """

    needs_scores = True
    lazy = False

    def __init__(self, m: Annotated[int, Ge(1)] = 10) -> None:
        if m < 1:
            raise ValueError(f"refine.m must be >= 1, got {m}")
        self.m = m

    def __call__(
        self, trees: Sequence[Tree], scores: Sequence[np.ndarray], aggregation: Sequence[bool] | None = None
    ) -> list[list[int]]:
        agg = list(aggregation or [False] * len(trees))
        kept = by_tree(trees, best_leaves(trees, leaf_scores(trees, scores), self.m, skip=agg))
        return [[0] if a else k for k, a in zip(kept, agg, strict=True)]


class FlatMatchedRefiner:
    """Flat baseline at a matched budget: the best-scoring leaves until the reference's token count.

    For each call (one question's round), the ``reference`` refiner (CANOPY with the δ of the run it
    is matched to) runs on the same scores; its evidence is counted in the reader's tokens; then
    leaves of all items are added in score order, each only if the total stays within that count (a
    leaf that does not fit is skipped, smaller ones may still fit). Flat evidence is thus never longer
    than CANOPY's. Both are charged what the reader is handed: an item of which nothing is kept gets
    no block from the loop, so it costs nothing (not even its title). Tables flagged for aggregation
    are kept whole by both and count against the budget.

    Args:
        tokenizer: the reader's tokenizer spec (``token_counter``), e.g. ``qwen2.5-1.5b``.
        reference: the refiner whose token count is matched (default: parent-relative with
            ``descend_margin``).
        hierarchy: renders evidence as the loop renders it (``refine=flat_matched`` passes the run's
            ``tree``); default builders otherwise.
        descend_margin: δ of the CANOPY run this one is matched to (its ``refine.descend_margin``).
    """

    needs_scores = True
    lazy = False  # every leaf is a candidate: score every node

    def __init__(
        self,
        tokenizer: str,
        reference: Refiner | None = None,
        hierarchy: Hierarchy | None = None,
        descend_margin: Annotated[float, Interval(ge=-1.0, le=1.0)] = 0.0,
    ) -> None:
        if reference is not None and descend_margin:
            raise ValueError("refine.descend_margin sets the default reference's δ: set it on refine.reference")
        self.tokenizer = tokenizer
        self.reference = reference or ParentRelativeRefiner(lazy=False, descend_margin=descend_margin)
        self.hierarchy = hierarchy or Hierarchy()
        self.last_budget = 0  # tokens of the reference's evidence in the latest call (for records)

    @property
    def count(self) -> TokenCounter:
        return token_counter(self.tokenizer)

    def _tokens(self, tree: Tree, kept: Sequence[int]) -> int:
        """Reader tokens of the block the loop renders for ``kept`` (none when nothing is kept)."""
        if not kept:
            return 0
        return self.count(self.hierarchy.evidence_text(tree, sorted(kept, key=lambda i: int(tree.starts[i]))))

    def __call__(
        self, trees: Sequence[Tree], scores: Sequence[np.ndarray], aggregation: Sequence[bool] | None = None
    ) -> list[list[int]]:
        """Kept leaf ids per tree (leaf order); ``scores[j]``: (num_nodes_j,) s(q, v)."""
        agg = list(aggregation or [False] * len(trees))
        budget = sum(
            self._tokens(t, k) for t, k in zip(trees, self.reference(trees, scores, agg), strict=True)
        )
        self.last_budget = budget
        chosen: list[list[int]] = [[0] if a else [] for a in agg]
        cost = [self._tokens(t, c) for t, c in zip(trees, chosen, strict=True)]
        total = sum(cost)
        for j, v in best_leaves(trees, leaf_scores(trees, scores), skip=agg):
            # On past a full budget too: a leaf that closes an elided gap may cost nothing. A leaf costs at
            # least its own tokens less a few merged at the seams: skip hopeless ones without re-rendering
            # the item (the exact check below decides the rest).
            if self.count(self.hierarchy.evidence_text(trees[j], [v])) - 8 > budget - total + cost[j]:
                continue
            new = self._tokens(trees[j], [*chosen[j], v])
            if total - cost[j] + new <= budget:
                chosen[j].append(v)
                total += new - cost[j]
                cost[j] = new
        return [sorted(c, key=lambda i: int(t.starts[i])) for t, c in zip(trees, chosen, strict=True)]


class ExtractiveRefiner:
    """RECOMP-style extractive compression: the top-m leaves (sentences, table rows) across all of a
    round's items, scored leaf by leaf.

    RECOMP's extractive compressor scores every sentence of the retrieved documents against the
    question and hands the reader the top few, concatenated; it has no hierarchy, no critic and no
    table-aggregation classifier. Only leaves are scored (``refine_lazily`` never asks for an inner
    node), and tables are treated like any other item: the aggregation flags of the loop are ignored
    (``configs/method/recomp.yaml`` also turns the check off, so no LLM call is made). Its scorer is
    f0 on both sides (``refine=extractive`` selects ``scorer=f0``), so the baseline never borrows
    CANOPY's trained fθ; ``scorer=ftheta`` scores its nodes through ``encoder.adapter`` instead (give
    it a flat selector trained on the same gold sentences for "hierarchy vs flat").

    Args:
        m: leaves kept across the round's items (RECOMP keeps the top few sentences); ties are
            broken by item, then leaf order.

    Example:
        >>> kept = ExtractiveRefiner(m=5)(trees, scores)   # scores[j]: (len(trees[j]),)
    """

    needs_scores = True
    lazy = True  # the loop then calls ``refine_lazily``: leaves only are encoded

    def __init__(self, m: Annotated[int, Ge(1)] = 5) -> None:
        if m < 1:
            raise ValueError(f"refine.m must be >= 1, got {m}")
        self.m = int(m)

    def select(self, trees: Sequence[Tree], scores: Sequence[np.ndarray]) -> list[list[int]]:
        """Kept leaf node ids per tree (leaf order) from (n_leaves_j,) scores aligned with ``leaf_ids``."""
        return by_tree(trees, best_leaves(trees, scores, self.m))

    def __call__(
        self, trees: Sequence[Tree], scores: Sequence[np.ndarray], aggregation: Sequence[bool] | None = None
    ) -> list[list[int]]:
        """Top-m leaves from full node scores (``scores[j]``: (num_nodes_j,)); ``aggregation`` is ignored."""
        return self.select(trees, leaf_scores(trees, scores))

    def refine_lazily(
        self, trees: Sequence[Tree], score_nodes: NodeScoreFn, aggregation: Sequence[bool] | None = None
    ) -> list[list[int]]:
        """Same selection as ``__call__``, encoding the leaves only (one ``score_nodes`` call)."""
        requests = [leaf_ids(t).tolist() for t in trees]
        got = score_nodes(requests) if any(requests) else [np.zeros(0, np.float32) for _ in trees]
        return self.select(trees, [np.asarray(s, dtype=np.float32) for s in got])
