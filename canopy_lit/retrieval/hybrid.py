"""Hybrid retrieval: weighted reciprocal-rank fusion (RRF) of BM25 and dense rankings.

RRF (Cormack et al., 2009): ``score(d) = sum_r w_r / (rrf_k + rank_r(d))`` with 1-based ranks; an
item missing from a ranking contributes nothing for it. Ranks, not raw scores, are fused, so BM25
and cosine scales never need calibrating against each other.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

from annotated_types import Ge

from canopy_lit.retrieval.base import Retrieval, SingleQueryMixin, record_batch
from canopy_lit.retrieval.bm25 import build_bm25_retriever
from canopy_lit.retrieval.retriever import build_retriever

Id = TypeVar("Id", bound=Hashable)


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[Id]], weights: Sequence[float] | None = None, rrf_k: float = 60
) -> list[tuple[Id, float]]:
    """Fuse ranked id lists (best first) into one ranking of (id, fused score), best first.

    The one RRF of the project: item ids here, clip indices in CARVE's fixed-fusion baseline. Ties keep
    the order of first appearance (the first ranking's order first), so the result is deterministic.
    """
    weights = [1.0] * len(rankings) if weights is None else list(weights)
    if len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    if rrf_k < 0:
        raise ValueError(f"rrf_k must be >= 0, got {rrf_k}")
    fused: dict[Id, float] = {}
    for ranking, w in zip(rankings, weights, strict=True):
        for rank, item_id in enumerate(ranking, 1):
            fused[item_id] = fused.get(item_id, 0.0) + w / (rrf_k + rank)
    order = sorted(enumerate(fused.items()), key=lambda t: (-t[1][1], t[0]))
    return [pair for _, pair in order]


@dataclass
class HybridRetriever(SingleQueryMixin):
    """RRF of several retrievers over the same corpus (same interface as ``FaissRetriever``).

    Args:
        retrievers: name -> retriever (e.g. ``{"dense": FaissRetriever, "bm25": BM25Retriever}``).
        weights: name -> RRF weight (missing names weigh 1).
        rrf_k: RRF rank offset (60 in the original paper; smaller trusts the top ranks more).
        depth: items fetched from each retriever before fusion (>= k; deeper = more fusion candidates).
    """

    retrievers: Mapping[str, Any]
    weights: Mapping[str, float] = field(default_factory=dict)
    rrf_k: int = 60
    depth: int = 100
    stats: dict[str, float] = field(default_factory=lambda: {"queries": 0, "seconds": 0.0})

    def __post_init__(self) -> None:
        if not self.retrievers:
            raise ValueError("HybridRetriever needs at least one retriever")
        unknown = sorted(set(self.weights) - set(self.retrievers))
        if unknown:
            raise ValueError(f"retrieval.weights names {unknown}; retrievers are {sorted(self.retrievers)}")

    @property
    def corpus(self) -> Any:
        """The shared corpus (the first retriever's)."""
        return next(iter(self.retrievers.values())).corpus

    def retrieve_batch(
        self, queries: Sequence[str], k: int, exclude: Sequence[Collection[str]] | None = None
    ) -> list[Retrieval]:
        """Each retriever's top ``max(depth, k)`` per query, fused by RRF; scores are the fused scores."""
        t0 = time.perf_counter()
        queries = list(queries)
        depth = max(self.depth, k)
        names = list(self.retrievers)
        runs = {n: self.retrievers[n].retrieve_batch(queries, depth, exclude) for n in names}
        weights = [float(self.weights.get(n, 1.0)) for n in names]
        out = []
        for i, q in enumerate(queries):
            items = {it.id: it for n in names for it in runs[n][i].items}
            fused = reciprocal_rank_fusion([runs[n][i].ids for n in names], weights, self.rrf_k)[:k]
            routed = runs[names[0]][i].groups  # every side searched the same partitions (SharedRoute)
            out.append(Retrieval(q, [items[j] for j, _ in fused], [s for _, s in fused], routed))
        return record_batch(self.stats, out, t0)


class SharedRoute:
    """One routing decision per query for every side of a hybrid retriever.

    Each side routes on its own (``route_queries``); sharing this wrapper makes them agree even when the
    router would not (an uncached or sampling LLM router asked twice), and asks it once per query text.
    """

    def __init__(self, router: Any) -> None:
        self.router = router
        self._seen: dict[str, list[str]] = {}

    def restrict(self, groups: Sequence[str]) -> None:
        if hasattr(self.router, "restrict"):
            self.router.restrict(groups)
        self._seen.clear()

    def route(self, query: str) -> list[str]:
        if query not in self._seen:
            choice = self.router.route(query)
            self._seen[query] = [choice] if isinstance(choice, str) else list(choice)
        return self._seen[query]


def build_hybrid_retriever(
    encoder: Any,
    benchmarks: Sequence[str] = ("nq", "hotpotqa", "ottqa", "tatqa"),
    cache_dir: str | Path | None = None,
    rrf_k: Annotated[int, Ge(0)] = 60,  # 1-based ranks, so rrf_k = 0 is still defined
    depth: Annotated[int, Ge(1)] = 100,
    weights: Mapping[str, float] | None = None,
    bm25: Mapping[str, Any] | None = None,
    benchmark_options: Mapping[str, Mapping[str, Any]] | None = None,
    routing: bool = False,
    router: Any = None,
    loaded: Mapping[str, Any] | None = None,
    corpus: str | Path | None = None,
    corpus_options: dict[str, Any] | None = None,
    **dense: Any,
) -> HybridRetriever:
    """Dense (``build_retriever``) + BM25 (``build_bm25_retriever``) over one corpus, fused by RRF.

    Args:
        encoder: ``NodeEncoder`` for the dense side.
        benchmarks: shared by both sides (one
            corpus: the union of ``benchmarks``, or your own file at ``corpus``).
        cache_dir: see ``benchmarks``.
        benchmark_options: see ``benchmarks``.
        loaded: see ``benchmarks``.
        corpus: see ``benchmarks``.
        corpus_options: see ``benchmarks``.
        rrf_k: see ``HybridRetriever`` (weights keys: ``dense``, ``bm25``).
        depth: see ``rrf_k``.
        weights: see ``rrf_k``.
        bm25: ``build_bm25_retriever`` options (k1, b, method, stemmer, stopwords, n_threads).
        routing: route each query to the modalities ``router`` picks, on both sides (one
            decision per query, ``SharedRoute``): a side left unrouted would fuse other modalities back in.
        router: see ``routing``.
        **dense: the remaining ``build_retriever`` options (index, index_options, ...).
    """
    if routing and router is None:
        raise ValueError("retrieval.routing=true needs a router (the LLM layer's ModalityRouter)")
    shared = {"benchmarks": benchmarks, "cache_dir": cache_dir, "benchmark_options": benchmark_options,
              "loaded": loaded, "corpus": corpus, "corpus_options": corpus_options,
              "routing": routing, "router": SharedRoute(router) if routing else None}  # fmt: skip
    sides = {
        "dense": build_retriever(encoder, **shared, **dense),
        "bm25": build_bm25_retriever(**shared, **dict(bm25 or {})),
    }
    return HybridRetriever(sides, dict(weights or {}), rrf_k=rrf_k, depth=depth)
