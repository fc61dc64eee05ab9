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

The refiners live in ``rule.py`` (Algorithm 1, keep-whole, the protocol), ``flat.py`` (leaf selection) and
``lingua.py``; ``aggregation.py`` holds the check that keeps an aggregation question's tables whole; the ``refine`` group's ``_target_`` names them here (``canopy_lit.refine.ParentRelativeRefiner``).
"""

from canopy_lit.refine.aggregation import AggregationCheck, AggregationClassifier
from canopy_lit.refine.flat import (
    ExtractiveRefiner,
    FlatMatchedRefiner,
    FlatTopMRefiner,
    best_leaves,
    by_tree,
    leaf_ids,
    leaf_scores,
)
from canopy_lit.refine.lingua import LongLLMLinguaRefiner
from canopy_lit.refine.rule import (
    TIE_TOLERANCE,
    KeepWholeRefiner,
    LazyRefiner,
    NodeScoreFn,
    ParentRelativeRefiner,
    Refiner,
    descends,
    drop_items,
    keep_whole,
    parent_relative,
    parent_relative_lazily,
)

__all__ = [
    "TIE_TOLERANCE", "AggregationCheck", "AggregationClassifier", "ExtractiveRefiner", "FlatMatchedRefiner", "FlatTopMRefiner", "KeepWholeRefiner", "LazyRefiner",
    "LongLLMLinguaRefiner", "NodeScoreFn", "ParentRelativeRefiner", "Refiner", "best_leaves", "by_tree", "descends",
    "drop_items", "keep_whole", "leaf_ids", "leaf_scores", "parent_relative", "parent_relative_lazily",
]  # fmt: skip
