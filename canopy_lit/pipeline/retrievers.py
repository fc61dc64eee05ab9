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
    """

    def __init__(
        self,
        items: Mapping[str, Item],
        candidates: Mapping[str, Sequence[str]],
        encoder: Any,
        hierarchy: Hierarchy,
        router: Any | None = None,
    ) -> None:
        self.items = items
        self.candidates = candidates
        self.encoder = encoder
        self.hierarchy = hierarchy
        self.router = router
        self._emb: dict[str, np.ndarray] = {}

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
        q = _numpy(self.encoder.encode_queries([query]))[0]
        scores = self._embed(ids) @ q
        order = np.argsort(-scores, kind="stable")[:k]
        return [self.items[ids[j]] for j in order]
