"""The ``retriever`` config group: where a round's items come from (METHOD.md §1.1 step 1).

``retriever=corpus`` is the paper's setting: one index over every benchmark's items, built by the
``retrieval`` group (dense FAISS, BM25 or hybrid, with its index knobs). ``retriever=candidates``
ranks only the question's own delivered items (HotpotQA's distractor setting, a TAT-QA document),
which isolates compression from retrieval errors; ``retriever=benchmark`` ranks every item of the
loaded benchmark file for every question (small sets, e.g. the bundled LVBench clips).

Each option's YAML targets one factory below; ``pipeline.build.build_retriever`` calls it with the
same keywords (``retrieval``, ``bench``, ``encoder``, ``hierarchy``, ``llm``), so an option uses
what it needs and ignores the rest.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.pipeline.scoring import _numpy
from canopy_lit.retrieval.base import Retriever
from canopy_lit.retrieval.bm25 import BM25Retriever
from canopy_lit.retrieval.hybrid import reciprocal_rank_fusion
from canopy_lit.retrieval.router import LLMModalityRouter
from canopy_lit.schema import PIPELINE_RETRIEVAL_KEYS
from canopy_lit.types import Item, Question


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
        self._bm25: BM25Retriever | None = None
        self._bm25_row: dict[str, int] = {}

    def _bm25_scores(self, query: str, ids: Sequence[str]) -> np.ndarray:
        """BM25 scores of ``ids``: (len(ids),); the index over every item is built once, on first use."""
        if self._bm25 is None:
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
        if self.ranking == "bm25":
            order = np.argsort(-self._bm25_scores(query, ids), kind="stable")[:k]
            return [self.items[ids[j]] for j in order]
        q = _numpy(self.encoder.encode_queries([query]))[0]
        scores = self._embed(ids) @ q
        order = np.argsort(-scores, kind="stable")
        if self.ranking == "hybrid":
            sparse = np.argsort(-self._bm25_scores(query, ids), kind="stable")
            w = [self.weights.get("dense", 1.0), self.weights.get("bm25", 1.0)]
            fused = reciprocal_rank_fusion([[ids[j] for j in order], [ids[j] for j in sparse]], w, self.rrf_k)
            return [self.items[i] for i, _ in fused[:k]]
        return [self.items[ids[j]] for j in order[:k]]


def _options(retrieval: Mapping[str, Any] | DictConfig) -> dict[str, Any]:
    out = OmegaConf.to_container(retrieval, resolve=True) if isinstance(retrieval, DictConfig) else dict(retrieval)
    assert isinstance(out, dict)
    return out


def corpus_retriever(
    retrieval: Mapping[str, Any] | DictConfig,
    encoder: Any,
    llm: Any = None,
    bench: Any = None,
    hierarchy: Hierarchy | None = None,
) -> Retriever:
    """``retriever=corpus``: the index the ``retrieval`` group targets (dense, BM25, hybrid) over its
    ``benchmarks``' union corpus, cached by content.

    Args:
        retrieval: the ``retrieval`` group (its loop keys ``k``, ``exclude_seen`` ... are not the index's).
        encoder: f0 embeds the corpus and the queries.
        llm: the modality router's LLM when ``retrieval.routing`` is on (offered only the modalities
            the index holds, one call per query text).
        bench, hierarchy: unused (the corpus is the index's, not the loaded benchmark's); accepted so
            that every retriever option is called the same way.
    """
    kwargs = _options(retrieval)
    for key in PIPELINE_RETRIEVAL_KEYS:
        kwargs.pop(key, None)
    router = LLMModalityRouter(llm) if kwargs.get("routing") else None
    return instantiate(kwargs)(encoder=encoder, router=router)


def candidate_retriever(
    retrieval: Mapping[str, Any] | DictConfig,
    bench: Any,
    encoder: Any,
    hierarchy: Hierarchy,
    llm: Any = None,
    pool: str = "candidates",
) -> CandidateRetriever:
    """``retriever=candidates`` (each question's delivered items) or ``retriever=benchmark`` (every item
    of the loaded file for every question), ranked as ``retrieval.candidate_ranking`` says.

    Args:
        retrieval: the ``retrieval`` group: ``candidate_ranking`` (dense | bm25 | hybrid, set by
            bm25.yaml / hybrid.yaml), ``rrf_k``, ``weights`` and ``routing``.
        bench: the loaded benchmark (``items``, ``candidates``, ``questions``).
        encoder: f0 embeds both sides for dense ranking.
        hierarchy: renders an item's root as its text.
        llm: the modality router's LLM, used only when the pool holds more than one modality.
        pool: ``candidates`` or ``benchmark``.
    """
    if pool not in ("candidates", "benchmark"):
        raise ValueError(f"retriever.pool must be candidates | benchmark, got {pool!r}")
    rcfg = _options(retrieval)
    pools: Mapping[str, Sequence[str]] = bench.candidates
    if pool == "benchmark":  # every item of the loaded file is a candidate of every question (small sets)
        every = list(bench.items)
        pools = {q.id: every for q in bench.questions}
    # Routing among the modalities the pool holds; a single-modality benchmark needs no router call.
    modalities = sorted({it.modality.value for it in bench.items.values()})
    router = LLMModalityRouter(llm, modalities) if rcfg.get("routing") and len(modalities) > 1 else None
    weights = rcfg.get("weights")
    return CandidateRetriever(
        bench.items, pools, encoder, hierarchy, router=router, ranking=rcfg.get("candidate_ranking", "dense"),
        rrf_k=int(rcfg.get("rrf_k", 60)), weights=dict(weights) if weights is not None else None,
    )  # fmt: skip
