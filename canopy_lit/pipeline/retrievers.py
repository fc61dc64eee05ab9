"""The ``retriever`` config group: where a round's items come from (METHOD.md §1.1 step 1).

``retriever=corpus`` is the paper's setting: one index over every benchmark's items, built by the
``retrieval`` group (dense FAISS, BM25 or hybrid, with its index knobs). ``retriever=candidates``
ranks only the question's own delivered items (HotpotQA's distractor setting, a TAT-QA document),
which isolates compression from retrieval errors; ``retriever=benchmark`` ranks every item of the
loaded benchmark file for every question (small sets, e.g. the bundled LVBench clips).

Each option's YAML targets one factory below; ``pipeline.build.build_retriever`` calls it with the
same keywords (``retrieval``, ``bench``, ``encoder``, ``hierarchy``, ``llm``, ``index``: the ``retrieval``
group's index builder, ``ranking``: its ``candidate_ranking``, ...), so an option uses what it needs and
ignores the rest.

How ``CandidateRetriever`` orders a question's items is a ``CandidateRanking`` (``retrieval.candidate_ranking``,
set by the ``retrieval`` option: ``DenseRanking`` for the dense index, ``BM25Ranking`` for bm25,
``HybridRanking`` for hybrid), so that the candidate pools are ranked as the corpus index would rank them.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from omegaconf import DictConfig

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.pipeline.scoring import as_float32
from canopy_lit.retrieval.base import Retriever
from canopy_lit.retrieval.bm25 import BM25Retriever
from canopy_lit.retrieval.hybrid import reciprocal_rank_fusion
from canopy_lit.retrieval.router import LLMModalityRouter
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


def corpus_retriever(
    retrieval: Mapping[str, Any] | DictConfig,
    encoder: Any,
    index: Callable[..., Retriever],
    llm: Any = None,
    bench: Any = None,
) -> Retriever:
    """``retriever=corpus``: the index the ``retrieval`` group targets (dense, BM25, hybrid) over its
    ``benchmarks``' union corpus, or over your own corpus file (``retrieval.corpus=PATH``), cached by content.

    With ``retrieval.corpus`` set, every question retrieves from that file's items alone (the loaded
    benchmark adds none); a gold item the file lacks is never retrieved, and counts as missed. Otherwise the
    loaded benchmark (``data=X data.path=P``, with ``data.options``) stands in for X's entry of the
    union: the corpus holds P's items, not the bundled file's. A benchmark outside ``retrieval.benchmarks``
    is not added (its questions retrieve from the others' items; one warning says so).

    Args:
        retrieval: the ``retrieval`` group (``routing``, ``benchmarks``, ``corpus``).
        encoder: f0 embeds the corpus and the queries.
        index: the ``retrieval`` group's index builder with its knobs bound (``build.build_index``).
        llm: the modality router's LLM when ``retrieval.routing`` is on (offered only the modalities
            the index holds, one call per query text).
        bench: the run's loaded benchmark (None: the union as ``retrieval.benchmark_options`` reads it).

    The corpus vectors are cached by content, so no ``item_cache``; the index ranks, so no ``ranking``.
    """
    router = LLMModalityRouter(llm) if retrieval.get("routing") else None
    kwargs: dict[str, Any] = {"encoder": encoder, "router": router}
    name = str(getattr(bench, "name", "") or "").lower()
    union = [str(b).lower() for b in (retrieval.get("benchmarks") or ())]
    if retrieval.get("corpus"):
        log.info("retriever=corpus: retrieving from %s (retrieval.corpus)", retrieval.get("corpus"))
    elif name and name in union and _accepts(index, "loaded"):
        kwargs["loaded"] = {name: bench}
    elif name and union and name not in union:
        log.warning(
            "retriever=corpus: data=%s is not in retrieval.benchmarks %s; the corpus holds only their items",
            name, union,
        )  # fmt: skip
    return index(**kwargs)


def _accepts(fn: Callable[..., Any], key: str) -> bool:
    """Whether ``fn`` (a builder or a ``functools.partial`` of one) takes keyword ``key``."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return key in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def candidate_retriever(
    retrieval: Mapping[str, Any] | DictConfig,
    bench: Any,
    encoder: Any,
    hierarchy: Hierarchy,
    llm: Any = None,
    pool: str = "candidates",
    item_cache: Any = None,
    ranking: CandidateRanking | None = None,
) -> CandidateRetriever:
    """``retriever=candidates`` (each question's delivered items) or ``retriever=benchmark`` (every item
    of the loaded file for every question), ranked by ``ranking``.

    Args:
        retrieval: the ``retrieval`` group (``routing``).
        bench: the loaded benchmark (``items``, ``candidates``, ``questions``).
        encoder: f0 embeds both sides for dense ranking.
        hierarchy: renders an item's root as its text.
        llm: the modality router's LLM, used only when the pool holds more than one modality.
        pool: ``candidates`` or ``benchmark``.
        item_cache: the items' vectors through a disk cache (``CandidateRetriever``); None = in memory.
        ranking: the ``retrieval.candidate_ranking`` block, built (None: ``DenseRanking``).
    """
    if pool not in ("candidates", "benchmark"):
        raise ValueError(f"retriever.pool must be candidates | benchmark, got {pool!r}")
    if retrieval.get("corpus"):
        log.warning("retrieval.corpus=%s is read by retriever=corpus only; retriever=%s ranks the benchmark's "
                    "own items", retrieval.get("corpus"), pool)  # fmt: skip
    pools: Mapping[str, Sequence[str]] = bench.candidates
    if pool == "benchmark":  # every item of the loaded file is a candidate of every question (small sets)
        every = list(bench.items)
        pools = {q.id: every for q in bench.questions}
    # Routing among the modalities the pool holds; a single-modality benchmark needs no router call.
    modalities = sorted({it.modality.value for it in bench.items.values()})
    router = LLMModalityRouter(llm, modalities) if retrieval.get("routing") and len(modalities) > 1 else None
    return CandidateRetriever(
        bench.items, pools, encoder, hierarchy, router=router, ranking=ranking, item_cache=item_cache
    )
