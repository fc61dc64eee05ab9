"""Refiners: turn node scores of retrieved items into the evidence forest (METHOD.md §1.1 step 5).

All refiners share one call shape, so "no compression", "flat top-m" and the baselines are
plain config swaps (``refine=keep_whole``, ``refine=flat_top_m`` ...) of the same stage::

    refiner(trees, scores, aggregation) -> list of retained node ids per tree

``scores[j]`` is a 1-D array of s(q, v) over the node ids of ``trees[j]``. An empty id list means
nothing of that item is kept (flat top-m); the loop drops such items from the evidence.

The options of the ``refine`` group:

    ParentRelativeRefiner  CANOPY (Algorithm 1): a child is kept iff it scores >= its parent (+ δ)
    KeepWholeRefiner       whole items ("w/o projection", vanilla RAG)
    FlatTopMRefiner        the m best leaves across the question's items (METHOD.md §1.3)
    FlatMatchedRefiner     the best leaves up to CANOPY's token count for the same scores
    ExtractiveRefiner      RECOMP-style: the m best leaves, scoring leaves only
    LongLLMLinguaRefiner   LongLLMLingua: whole items, compressed at the token level by a small causal LM

The three flat ones rank leaves with one helper, ``best_leaves``. Which encoder scores the nodes
(fθ, or f0 for RECOMP) is the ``scorer`` group's choice, not the refiner's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from canopy_lit.hierarchy import ELISION, Hierarchy, TokenCounter
from canopy_lit.llm.tokenizers import token_counter
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

    def __init__(self, lazy: bool = True, descend_margin: float = 0.0, item_margin: float | None = None) -> None:
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


class FlatTopMRefiner:
    """Leaf-level top-m over all items of a question (the flat baseline of METHOD.md §1.3).

    An item none of whose leaves is among the top m gets ``[]``: the loop then gives the critic
    and the reader no block for it (not a bare header) and counts no tokens for it.

    Args:
        m: number of leaves kept across the question's items (ties broken by item, then leaf order).
    """

    needs_scores = True
    lazy = False

    def __init__(self, m: int = 10) -> None:
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
        descend_margin: float = 0.0,
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

    def __init__(self, m: int = 5) -> None:
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


class LongLLMLinguaRefiner:
    """LongLLMLingua (Jiang et al., 2024): question-aware coarse (item) + fine (token) compression of the
    round's whole items by a small causal LM, at a target rate (``canopy_lit.longllmlingua``).

    Its evidence is compressed text, not regions: ``__call__`` keeps every item whole (the root) and the
    loop then asks ``compress`` for each item's block (``compresses_text``); an item the coarse step drops
    gets no block. Titles, captions and table headers pass through verbatim (they reach the reader with
    any region under every other refiner); the rest of each block is compressed. Scores are not read, so
    no node scorer is loaded; aggregation flags are ignored (the compressor has no table rule).

    Args:
        model: the compressor's causal LM, an offline asset (``smollm2-135m``) or a GGUF path.
        rate: target share of the items' tokens kept (ρ; the paper's Table 7 runs 0.55).
        condition_in_question: where the question conditions the token perplexities (LongLLMLingua's knob).
        dynamic_context_compression_ratio: how much the kept rate rises with an item's coarse rank.
        context_budget: slack on the coarse step's token budget (``"+100"``).
        iterative_size: tokens per step of the iterative fine compression.

    Raises:
        ImportError: one line naming the ``lingua`` extra when ``llmlingua`` (or ``gguf``) is missing.
    """

    needs_scores = False
    lazy = False
    compresses_text = True

    def __init__(
        self,
        model: str = "smollm2-135m",
        rate: float = 0.55,
        condition_in_question: str = "after_condition",
        dynamic_context_compression_ratio: float = 0.3,
        context_budget: str = "+100",
        iterative_size: int = 200,
    ) -> None:
        from canopy_lit.longllmlingua import LongLLMLingua, lm_name, require_llmlingua

        require_llmlingua()  # at build time, before any question runs
        self.compressor = LongLLMLingua(
            model, rate, condition_in_question, dynamic_context_compression_ratio, context_budget, iterative_size
        )
        self.label = f"LongLLMLingua ({lm_name(model)})"

    def __call__(
        self,
        trees: Sequence[Tree],
        scores: Sequence[np.ndarray] | None = None,
        aggregation: Sequence[bool] | None = None,
    ) -> list[list[int]]:
        return [[0] for _ in trees]

    def compress(
        self, query: str, trees: Sequence[Tree], kept: Sequence[Sequence[int]], hierarchy: Hierarchy
    ) -> list[str | None]:
        """Each item's block: its head verbatim + its kept regions' text compressed (None: dropped whole)."""
        heads, bodies = [], []
        for tree, ids in zip(trees, kept, strict=True):
            head = hierarchy.evidence_text(tree, []).removesuffix(ELISION)
            full = hierarchy.evidence_text(tree, list(ids))
            head = head if full.startswith(head) else ""
            heads.append(head)
            bodies.append(full[len(head):])
        return self.compressor(query, heads, bodies)
