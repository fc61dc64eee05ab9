"""Item sources for the loop: the unified FAISS corpus, or the items delivered with each question.

``scope=corpus`` is the paper's setting (one index over every benchmark's items);
``scope=candidates`` ranks only the question's own items (HotpotQA's distractor
setting, a TAT-QA document), which isolates compression from retrieval errors.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.pipeline.scoring import _numpy
from canopy_lit.types import Item, Question


class CorpusRetriever:
    """Adapts a ``FaissRetriever`` (unified index) to the loop's ``retrieve(query, k, exclude, question)``."""

    def __init__(self, retriever: Any) -> None:
        self.retriever = retriever

    def retrieve(self, query: str, k: int, exclude: Collection[str], question: Question) -> list[Item]:
        return list(self.retriever.retrieve(query, k, exclude))


class CandidateRetriever:
    """Ranks the question's delivered items by cos(f0(query), f0(item)).

    Args:
        items: item id -> item (the benchmark's items).
        candidates: question id -> candidate item ids.
        encoder: ``NodeEncoder``; f0 embeds both sides (items are embedded once and memoised).
        hierarchy: renders an item's root as its text.
        router: optional ``route(query) -> [modality]`` (UniversalRAG): only candidates of the routed
            modalities are ranked; when the question has none of them, all its candidates are.
        ranking: ``dense`` (f0 cosine), ``bm25`` (BM25, IDF over ``items``) or ``hybrid``
            (reciprocal-rank fusion of the two, ``rrf_k`` and ``weights`` {dense, bm25}).
    """

    def __init__(
        self,
        items: Mapping[str, Item],
        candidates: Mapping[str, Sequence[str]],
        encoder: Any,
        hierarchy: Hierarchy,
        router: Any | None = None,
        ranking: str = "dense",
        rrf_k: int = 60,
        weights: Mapping[str, float] | None = None,
    ) -> None:
        if ranking not in ("dense", "bm25", "hybrid"):
            raise ValueError(f"retrieval.candidate_ranking must be dense | bm25 | hybrid, got {ranking!r}")
        self.items = items
        self.candidates = candidates
        self.encoder = encoder
        self.hierarchy = hierarchy
        self.router = router
        self.ranking = ranking
        self.rrf_k = rrf_k
        self.weights = dict(weights or {})
        self._emb: dict[str, np.ndarray] = {}
        self._bm25: Any = None
        self._bm25_row: dict[str, int] = {}

    def _bm25_scores(self, query: str, ids: Sequence[str]) -> np.ndarray:
        """BM25 scores of ``ids``: (len(ids),); the index over every item is built once, on first use."""
        if self._bm25 is None:
            from canopy_lit.retrieval.bm25 import BM25Retriever

            self._bm25 = BM25Retriever.from_items(self.items.values())
            self._bm25_row = {i: r for r, i in enumerate(self._bm25.corpus.ids)}
        return self._bm25.scores(query)[[self._bm25_row[i] for i in ids]]

    def _embed(self, ids: Sequence[str]) -> np.ndarray:
        missing = [i for i in ids if i not in self._emb]
        if missing:
            texts = [self.hierarchy.node_text(self.hierarchy.build(self.items[i]), 0) for i in missing]
            for i, e in zip(missing, _numpy(self.encoder.encode_queries(texts)), strict=True):
                self._emb[i] = e
        return np.stack([self._emb[i] for i in ids])

    def retrieve(self, query: str, k: int, exclude: Collection[str], question: Question) -> list[Item]:
        ids = [i for i in self.candidates.get(question.id, []) if i not in exclude and i in self.items]
        if not ids:
            return []
        if self.router is not None:
            routed = set(self.router.route(query))
            ids = [i for i in ids if self.items[i].modality.value in routed] or ids
        if self.ranking == "bm25":
            order = np.argsort(-self._bm25_scores(query, ids), kind="stable")[:k]
            return [self.items[ids[j]] for j in order]
        q = _numpy(self.encoder.encode_queries([query]))[0]
        scores = self._embed(ids) @ q
        order = np.argsort(-scores, kind="stable")
        if self.ranking == "hybrid":
            from canopy_lit.retrieval.hybrid import reciprocal_rank_fusion

            sparse = np.argsort(-self._bm25_scores(query, ids), kind="stable")
            w = [self.weights.get("dense", 1.0), self.weights.get("bm25", 1.0)]
            fused = reciprocal_rank_fusion([[ids[j] for j in order], [ids[j] for j in sparse]], w, self.rrf_k)
            return [self.items[i] for i, _ in fused[:k]]
        return [self.items[ids[j]] for j in order[:k]]
