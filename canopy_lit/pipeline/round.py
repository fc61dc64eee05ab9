"""One round of CANOPY compression: score the round's trees against the query, refine, keep.

``compress_round`` is the one implementation of "trees in, kept regions out": the evidence loop calls it
once per round and ``canopy_lit.compress`` once per call, so both give the same evidence for the same trees,
query, scorer and refiner. It makes no LLM call and cuts nothing to a budget (``reader.budget`` does).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.pipeline.trace import StageTimer
from canopy_lit.refine import LazyRefiner, Refiner
from canopy_lit.scoring.scorers import NodeScorer
from canopy_lit.types import Evidence, Tree


def compress_round(
    query: str,
    trees: Sequence[Tree],
    refiner: Refiner,
    hierarchy: Hierarchy,
    scorer: NodeScorer | None = None,
    flags: Sequence[bool] | None = None,
    round: int = 0,
    timer: StageTimer | None = None,
) -> list[Evidence]:
    """The evidence each tree keeps for ``query``: one ``Evidence`` per tree, in the trees' order.

    Args:
        query: the round's query (the question, or the controller's follow-up).
        trees: region trees of the round's new items, in rank order.
        refiner: parent-relative, keep-whole, flat top-m, or a text-compressing refiner.
        hierarchy: renders nodes (a text-compressing refiner renders with it).
        scorer: node scorer; required when ``refiner.needs_scores``.
        flags: per tree, True = an aggregation table kept whole (None = none).
        round: the round index the evidence is stamped with.
        timer: encoder time goes to its ``encode`` stage, the rest to ``refine`` (None = not timed).

    Returns:
        ``Evidence(tree, node_ids, round, text)`` per tree; ``node_ids`` is empty when the refiner kept
        nothing of it (a text-compressing refiner that dropped the item, flat top-m choosing none of its leaves).

    Raises:
        ValueError: the refiner needs scores and no scorer is given.
    """
    timer = timer if timer is not None else StageTimer()
    flags = list(flags) if flags is not None else [False] * len(trees)
    if not trees:
        return []
    kept = _refine(query, trees, refiner, scorer, flags, timer)
    texts: list[str | None] = [None] * len(trees)
    compressed = bool(getattr(refiner, "compresses_text", False))
    if compressed:
        with timer("refine"):
            texts = list(refiner.compress(query, trees, kept, hierarchy))  # type: ignore[attr-defined]
    return [
        Evidence(tree, [] if compressed and text is None else ids, round, text)
        for tree, ids, text in zip(trees, kept, texts, strict=True)
    ]


def _refine(
    query: str,
    trees: Sequence[Tree],
    refiner: Refiner,
    scorer: NodeScorer | None,
    flags: list[bool],
    timer: StageTimer,
) -> list[list[int]]:
    """Kept node ids per tree; f0(query) is embedded once for the round."""
    if not refiner.needs_scores:
        with timer("refine"):
            return refiner(list(trees), None, flags)
    if scorer is None:
        raise ValueError(f"refiner {type(refiner).__name__} needs node scores but no scorer/encoder is configured")
    with timer("encode"):
        q = scorer.embed_query(query)
    if refiner.lazy:
        lazy: LazyRefiner = refiner  # type: ignore[assignment]  # ``lazy`` promises refine_lazily

        def score_nodes(requests: Sequence[Sequence[int]]) -> list[np.ndarray]:
            with timer("encode"):
                return scorer.score(q, trees, requests)

        t0 = timer.seconds["encode"]
        start = time.perf_counter()
        kept = lazy.refine_lazily(list(trees), score_nodes, flags)
        timer.seconds["refine"] += time.perf_counter() - start - (timer.seconds["encode"] - t0)
        return kept
    with timer("encode"):
        scores = scorer.score(q, trees)
    with timer("refine"):
        return refiner(list(trees), scores, flags)
