"""The retrieval stage's interface: ``Retriever`` (what the evidence loop calls) and ``Retrieval`` (one result).

Kept free of index, encoder and torch imports so that the loop and the candidate retrievers can code
against it cheaply; the implementations are ``FaissRetriever`` (retriever.py), ``BM25Retriever``
(bm25.py), ``HybridRetriever`` (hybrid.py) and the pipeline's ``CandidateRetriever``.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from canopy_lit.types import Item, Question


@dataclass
class Retrieval:
    """One query's result: items best first, their cosine scores and the partitions searched."""

    query: str
    items: list[Item]
    scores: list[float]
    groups: list[str] | None = None  # None = every partition (no routing)
    seconds: float = 0.0

    @property
    def ids(self) -> list[str]:
        return [it.id for it in self.items]

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Item]:
        return iter(self.items)


class Retriever(Protocol):
    """The retrieval stage, as the evidence loop calls it: top-``k`` items for ``query``, best first.

    ``k`` and ``exclude`` come from the caller on every call (the loop owns ``retrieval.k`` and
    ``retrieval.exclude_seen``); no retriever holds either. ``question`` lets a retriever rank the
    question's own delivered items (``CandidateRetriever``); corpus retrievers ignore it.
    """

    def retrieve(
        self, query: str, k: int, exclude: Collection[str] = (), question: Question | None = None
    ) -> Iterable[Item]: ...


class BatchRetriever(Retriever, Protocol):
    """A retriever over a whole corpus (dense FAISS, BM25, their fusion): batched search and its stats,
    what ``evaluate_retrieval`` measures."""

    corpus: Any
    stats: dict[str, float]

    def retrieve_batch(
        self, queries: Sequence[str], k: int, exclude: Sequence[Collection[str]] | None = None
    ) -> list[Retrieval]: ...


class SingleQueryMixin:
    """``retrieve`` for a retriever that implements ``retrieve_batch``."""

    def retrieve(
        self, query: str, k: int, exclude: Collection[str] = (), question: Question | None = None
    ) -> Retrieval:
        """Top-k items for ``query``; ids in ``exclude`` are never returned (k are still returned if possible)."""
        return self.retrieve_batch([query], k, [exclude])[0]  # type: ignore[attr-defined]


def record_batch(stats: dict[str, float], results: Sequence[Retrieval], t0: float) -> list[Retrieval]:
    """Close a batched retrieval started at ``t0`` (``time.perf_counter()``): add the query count and
    wall time to ``stats`` and give each result its share of that time; returns ``results``."""
    dt = time.perf_counter() - t0
    stats["queries"] += len(results)
    stats["seconds"] += dt
    for r in results:
        r.seconds = dt / max(1, len(results))
    return list(results)


def exclusion_sets(queries: Sequence[str], exclude: Sequence[Collection[str]] | None) -> list[frozenset[str]]:
    """One frozen exclude set per query (empty when ``exclude`` is None)."""
    if exclude is None:
        return [frozenset()] * len(queries)
    excl = [frozenset(e) for e in exclude]
    if len(excl) != len(queries):
        raise ValueError(f"{len(excl)} exclude sets for {len(queries)} queries")
    return excl


def route_queries(router: Any, queries: Sequence[str], groups: Collection[str]) -> list[list[str] | None]:
    """Each query's routed partitions among ``groups`` (None: no router, or a route to none of them,
    which falls back to every partition)."""
    if router is None:
        return [None] * len(queries)
    return [[g for g in router.route(q) if g in groups] or None for q in queries]


def rows_by_route(routes: Sequence[list[str] | None]) -> dict[tuple[str, ...] | None, list[int]]:
    """Query indices grouped by route, so each partition set is searched in one batched call."""
    out: dict[tuple[str, ...] | None, list[int]] = {}
    for i, g in enumerate(routes):
        out.setdefault(tuple(g) if g is not None else None, []).append(i)
    return out
