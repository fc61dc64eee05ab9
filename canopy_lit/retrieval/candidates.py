"""Candidate pools: a question's own items ranked as the corpus index would rank them (``retriever=candidates``
or ``retriever=benchmark``, ``canopy_lit.retrieval.scopes``).

How ``CandidateRetriever`` orders a question's items is a ``CandidateRanking`` (``retrieval.candidate_ranking``,
set by the ``retrieval`` option: ``DenseRanking`` for the dense index, ``BM25Ranking`` for bm25,
``HybridRanking`` for hybrid).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.retrieval.bm25 import BM25Retriever
from canopy_lit.retrieval.hybrid import reciprocal_rank_fusion
from canopy_lit.scoring.scorers import as_float32
from canopy_lit.types import Item, Question

log = logging.getLogger(__name__)


@runtime_checkable
class CandidateRanking(Protocol):
    """How ``CandidateRetriever`` orders a question's candidates; ``name`` is the tables' label."""

    name: str

    def order(self, query: str, ids: Sequence[str], pool: CandidateRetriever) -> list[str]:
        """``ids`` best first (the pool provides the scores: ``dense_scores``, ``bm25_scores``)."""
        ...


class DenseRanking:
    """cos(f0(query), f0(item)) over the item's root text (ties: candidate order)."""

    name = "dense"

    def order(self, query: str, ids: Sequence[str], pool: CandidateRetriever) -> list[str]:
        return [ids[j] for j in np.argsort(-pool.dense_scores(query, ids), kind="stable")]


class BM25Ranking:
    """BM25 with IDF over every item of the loaded benchmark (ties: candidate order); needs no encoder."""

    name = "bm25"

    def order(self, query: str, ids: Sequence[str], pool: CandidateRetriever) -> list[str]:
        return [ids[j] for j in np.argsort(-pool.bm25_scores(query, ids), kind="stable")]


class HybridRanking:
    """Reciprocal-rank fusion of the dense and BM25 orders (``retrieval.hybrid.reciprocal_rank_fusion``).

    Args:
        rrf_k: the RRF rank offset (``retrieval.rrf_k``).
        weights: per-side weights {dense, bm25} (missing sides weigh 1).
    """

    name = "hybrid"

    def __init__(self, rrf_k: int = 60, weights: Mapping[str, float] | None = None) -> None:
        self.rrf_k = rrf_k
        self.weights = dict(weights or {})

    def order(self, query: str, ids: Sequence[str], pool: CandidateRetriever) -> list[str]:
        sides = [DenseRanking().order(query, ids, pool), BM25Ranking().order(query, ids, pool)]
        w = [self.weights.get("dense", 1.0), self.weights.get("bm25", 1.0)]
        return [i for i, _ in reciprocal_rank_fusion(sides, w, self.rrf_k)]


class CandidateRetriever:
    """Ranks the question's delivered items by cos(f0(query), f0(item)).

    Args:
        items: item id -> item (the benchmark's items).
        candidates: question id -> candidate item ids.
        encoder: ``NodeEncoder``; f0 embeds both sides (items are embedded once and memoised).
        hierarchy: renders an item's root as its text.
        router: optional ``route(query) -> [modality]`` (UniversalRAG): only candidates of the routed
            modalities are ranked; when the question has none of them, all its candidates are.
        ranking: the order of the candidates (``CandidateRanking``; default: ``DenseRanking``, f0 cosine).
        item_cache: a node-embedding cache over ``QuerySideEncoder(encoder)`` that stores the items'
            vectors on disk for other runs and jobs (the evidence study); the ranking is the same
            f0 cosine of the root text.
    """

    def __init__(
        self,
        items: Mapping[str, Item],
        candidates: Mapping[str, Sequence[str]],
        encoder: Any,
        hierarchy: Hierarchy,
        router: Any | None = None,
        ranking: CandidateRanking | None = None,
        item_cache: Any | None = None,
    ) -> None:
        self.items = items
        self.candidates = candidates
        self.encoder = encoder
        self.hierarchy = hierarchy
        self.router = router
        self.ranking: CandidateRanking = ranking if ranking is not None else DenseRanking()
        self.item_cache = item_cache
        self._emb: dict[str, np.ndarray] = {}
        self._bm25: BM25Retriever | None = None
        self._bm25_row: dict[str, int] = {}

    def bm25_scores(self, query: str, ids: Sequence[str]) -> np.ndarray:
        """BM25 scores of ``ids``: (len(ids),); the index over every item is built once, on first use."""
        if self._bm25 is None:
            self._bm25 = BM25Retriever.from_items(self.items.values())
            self._bm25_row = {i: r for r, i in enumerate(self._bm25.corpus.ids)}
        return self._bm25.scores(query)[[self._bm25_row[i] for i in ids]]

    def dense_scores(self, query: str, ids: Sequence[str]) -> np.ndarray:
        """cos(f0(query), f0(item)) of ``ids``: (len(ids),); item vectors are memoised."""
        q = as_float32(self.encoder.encode_queries([query]))[0]
        return self._embed(ids) @ q

    def _embed(self, ids: Sequence[str]) -> np.ndarray:
        missing = [i for i in ids if i not in self._emb]
        if missing and self.item_cache is not None:
            trees = [self.hierarchy.build(self.items[i]) for i in missing]
            for i, e in zip(missing, self.item_cache.embed_trees(trees, [[0]] * len(trees)), strict=True):
                self._emb[i] = e[0]
        elif missing:
            texts = [self.hierarchy.node_text(self.hierarchy.build(self.items[i]), 0) for i in missing]
            for i, e in zip(missing, as_float32(self.encoder.encode_queries(texts)), strict=True):
                self._emb[i] = e
        return np.stack([self._emb[i] for i in ids])

    def retrieve(
        self, query: str, k: int, exclude: Collection[str] = (), question: Question | None = None
    ) -> list[Item]:
        if question is None:
            raise ValueError("CandidateRetriever ranks a question's own items: pass the question")
        ids = [i for i in self.candidates.get(question.id, []) if i not in exclude and i in self.items]
        if not ids:
            return []
        if self.router is not None:
            routed = set(self.router.route(query))
            ids = [i for i in ids if self.items[i].modality.value in routed] or ids
        return [self.items[i] for i in self.ranking.order(query, ids, self)[:k]]
