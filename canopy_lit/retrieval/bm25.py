"""Sparse retrieval: BM25 (``bm25s``) over the item texts the dense path embeds.

Each item is indexed as its rendered root node (``render_item``: ``title: text`` for paragraphs;
title, caption, header and every row for tables), so BM25 and FAISS rank the same strings.
``build_bm25_retriever`` caches the index by corpus digest + BM25 settings under ``cache_dir``
(``bm25s`` save/load: numpy arrays + JSON, no pickle).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import bm25s
import numpy as np
from annotated_types import Ge, Interval

from canopy_lit.assets import default_cache_dir
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.retrieval.base import (
    Retrieval,
    SingleQueryMixin,
    exclusion_sets,
    record_batch,
    route_queries,
    rows_by_route,
)
from canopy_lit.retrieval.corpus import CorpusStore, render_item
from canopy_lit.retrieval.retriever import cache_slug
from canopy_lit.retrieval.user_corpus import open_corpus
from canopy_lit.types import Item

log = logging.getLogger(__name__)


class ItemPool:
    """In-memory stand-in for ``CorpusStore`` (ids in order, ``get_many``, ``modality``) over given items."""

    def __init__(self, items: Iterable[Item]) -> None:
        self._items = {it.id: it for it in items}
        self.ids = list(self._items)

    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._items

    def __iter__(self):
        return iter(self._items.values())

    def get(self, item_id: str) -> Item:
        return self._items[item_id]

    def get_many(self, item_ids: Iterable[str]) -> list[Item]:
        return [self._items[i] for i in item_ids]

    def modality(self, item_id: str) -> str:
        return self._items[item_id].modality.value


@dataclass(frozen=True)
class BM25Settings:
    """Scoring and tokenisation settings (all part of the index cache key).

    Args:
        k1: BM25 term-frequency saturation and length normalisation (Lucene defaults 1.5 / 0.75
            in bm25s; Pyserini uses 0.9 / 0.4).
        b: see ``k1``.
        method: bm25s variant: lucene | robertson | atire | bm25l | bm25+.
        stemmer: Snowball language for PyStemmer (``english``), or None for no stemming.
        stopwords: bm25s stopword list name (``english``) or None.
    """

    k1: float = 1.5
    b: float = 0.75
    method: str = "lucene"
    stemmer: str | None = "english"
    stopwords: str | None = "english"

    def tokenize(self, texts: Sequence[str], vocab: bool) -> Any:
        """bm25s tokens: ids + vocab for indexing (``vocab=True``), token strings for queries."""
        stemmer = None
        if self.stemmer:
            import Stemmer  # PyStemmer

            stemmer = Stemmer.Stemmer(self.stemmer)
        return bm25s.tokenize(
            list(texts), stopwords=self.stopwords, stemmer=stemmer, return_ids=vocab, show_progress=False
        )


def item_text(item: Item, hierarchy: Hierarchy | None = None) -> str:
    """What BM25 indexes for an item: the text of its root node (same string the dense encoder reads)."""
    return render_item(item, hierarchy).text


@dataclass
class BM25Retriever(SingleQueryMixin):
    """BM25 over a corpus; same interface as ``FaissRetriever`` (``retrieve``, ``retrieve_batch``).

    Items sharing no (non-stopword) term with the query score 0 and are never returned, so a result
    can hold fewer than k items.

    Args:
        index: a ``bm25s.BM25`` whose document i is ``corpus.ids[i]``.
        corpus: ``CorpusStore`` or ``ItemPool``.
        settings: the tokenisation the index was built with (queries must use the same).
        n_threads: bm25s query threads (0 = all cores; 1 on shared CPUs).
        router: optional modality router (``route(query) -> list of modality names``, UniversalRAG):
            a routed query scores only items of those modalities (a bm25s weight mask over the one
            index: the same ranking as one index per modality, without building them).
    """

    index: bm25s.BM25
    corpus: Any
    settings: BM25Settings = field(default_factory=BM25Settings)
    n_threads: int = 1
    router: Any = None
    stats: dict[str, float] = field(default_factory=lambda: {"queries": 0, "seconds": 0.0})

    def __post_init__(self) -> None:
        mods = getattr(self.corpus, "modalities", None)
        if mods is None:  # ItemPool
            mods = [self.corpus.modality(i) for i in self.corpus.ids]
        self._modalities = np.asarray(mods, dtype=object)  # (N,) modality of document i
        self.groups = sorted(set(self._modalities.tolist()))
        if self.router is not None and hasattr(self.router, "restrict"):
            self.router.restrict(self.groups)  # never offer the LLM a modality the corpus lacks

    @classmethod
    def from_items(
        cls, items: Iterable[Item], settings: BM25Settings | None = None, **kwargs: Any
    ) -> BM25Retriever:
        """Index ``items`` in memory (no cache): small pools such as one benchmark's delivered items."""
        pool = ItemPool(items)
        settings = settings or BM25Settings()
        return cls(index_texts([item_text(it) for it in pool], settings), pool, settings, **kwargs)

    def retrieve_batch(
        self, queries: Sequence[str], k: int, exclude: Sequence[Collection[str]] | None = None
    ) -> list[Retrieval]:
        """Batched ``retrieve``: one tokenisation and one bm25s pass for all queries."""
        t0 = time.perf_counter()
        queries = list(queries)
        excl = exclusion_sets(queries, exclude)
        out: list[Retrieval] = []
        n = len(self.corpus)
        if not (queries and n and k > 0):
            return record_batch(self.stats, [Retrieval(q, [], []) for q in queries], t0)
        # Over-fetch by the largest exclude set so that k survive the filter.
        depth = min(n, k + max(len(e) for e in excl))
        routes = route_queries(self.router, queries, self.groups)
        results: list[Retrieval | None] = [None] * len(queries)
        for route, rows in rows_by_route(routes).items():
            # Items outside the routed modalities get weight 0, so they score 0 and are dropped below.
            mask = None if route is None else np.isin(self._modalities, route).astype(np.float32)
            tokens = self.settings.tokenize([queries[i] for i in rows], vocab=False)
            ids, scores = self.index.retrieve(
                tokens, k=depth, show_progress=False, n_threads=self.n_threads, weight_mask=mask
            )
            for i, r, s in zip(rows, ids, scores, strict=True):
                hits = [(self.corpus.ids[int(j)], float(v)) for j, v in zip(r, s, strict=True) if v > 0]
                hits = [(h, v) for h, v in hits if h not in excl[i]][:k]
                results[i] = Retrieval(
                    queries[i], self.corpus.get_many(h for h, _ in hits), [v for _, v in hits], routes[i]
                )
        out = [r for r in results if r is not None]
        return record_batch(self.stats, out, t0)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every corpus item for ``query``: (N,) float32, row i = ``corpus.ids[i]``."""
        tokens = self.settings.tokenize([query], vocab=False)[0]
        return np.asarray(self.index.get_scores(tokens), dtype=np.float32)


def index_texts(texts: Sequence[str], settings: BM25Settings) -> bm25s.BM25:
    """A bm25s index over ``texts`` (document i = ``texts[i]``)."""
    index = bm25s.BM25(k1=settings.k1, b=settings.b, method=settings.method)
    index.index(settings.tokenize(texts, vocab=True), show_progress=False)
    return index


def load_or_build_index(corpus: CorpusStore, settings: BM25Settings, cache_dir: str | Path) -> bm25s.BM25:
    """The BM25 index of ``corpus``, loaded from ``cache_dir/bm25-<digest>`` or built and saved there.

    The folder is written under a temporary name and renamed, so an interrupted build never leaves
    a half index that a later run would load.
    """
    cache = Path(cache_dir)
    out = cache / f"bm25-{cache_slug(corpus.digest(), settings.__dict__)}"
    if (out / "ids.json").is_file():
        ids = json.loads((out / "ids.json").read_text())
        if ids == corpus.ids:
            return bm25s.BM25.load(str(out), show_progress=False)
        log.warning("%s: ids differ from corpus %s; rebuilding", out, corpus.path)
    t0 = time.perf_counter()
    index = index_texts([item_text(it) for it in corpus], settings)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    index.save(str(tmp), show_progress=False)
    (tmp / "ids.json").write_text(json.dumps(list(corpus.ids)))
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    log.info("bm25: indexed %d items in %.1f s -> %s", len(corpus), time.perf_counter() - t0, out)
    return index


def build_bm25_retriever(
    encoder: Any = None,
    benchmarks: Sequence[str] = ("nq", "hotpotqa", "ottqa", "tatqa"),
    cache_dir: str | Path | None = None,
    k1: Annotated[float, Ge(0)] = 1.5,
    b: Annotated[float, Interval(ge=0, le=1)] = 0.75,
    method: Literal["lucene", "robertson", "atire", "bm25l", "bm25+"] = "lucene",
    stemmer: str | None = "english",
    stopwords: str | None = "english",
    n_threads: Annotated[int, Ge(0)] = 1,
    routing: bool = False,
    router: Any = None,
    benchmark_options: Mapping[str, Mapping[str, Any]] | None = None,
    loaded: Mapping[str, Any] | None = None,
    corpus: str | Path | None = None,
    corpus_options: dict[str, Any] | None = None,
) -> BM25Retriever:
    """Corpus of ``benchmarks`` -> BM25 index (cached by content) -> retriever.

    Args:
        encoder: unused (BM25 needs no encoder); accepted so that every retrieval group option is
            instantiated the same way.
        benchmarks: as ``build_retriever`` (the corpus JSONL is shared
            with the dense retriever of the same benchmarks; default ``$CANOPY_LIT_HOME/retrieval``).
        cache_dir: see ``benchmarks``.
        benchmark_options: see ``benchmarks``.
        loaded: see ``benchmarks``.
        corpus: your own corpus in place of the union, as ``build_retriever``.
        corpus_options: see ``corpus``.
        k1: ``BM25Settings``.
        b: see ``k1``.
        method: see ``k1``.
        stemmer: see ``k1``.
        stopwords: see ``k1``.
        n_threads: bm25s query threads.
        routing: route each query to the modalities ``router`` picks (UniversalRAG, e.g. an
            ``LLMModalityRouter``); ``routing=True`` without a router raises.
        router: see ``routing``.
    """
    if routing and router is None:
        raise ValueError("retrieval.routing=true needs a router (the LLM layer's ModalityRouter)")
    names = [x.lower() for x in benchmarks]
    opts = {n: dict(v) for n, v in (benchmark_options or {}).items()} or None
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir("retrieval")
    store = open_corpus(names, cache, corpus, corpus_options, benchmark_options=opts, loaded=loaded)
    settings = BM25Settings(k1=k1, b=b, method=method, stemmer=stemmer, stopwords=stopwords)
    index = load_or_build_index(store, settings, cache)
    return BM25Retriever(index, store, settings, n_threads=n_threads, router=router if routing else None)


build_bm25_retriever.needs_encoder = False  # type: ignore[attr-defined]  # evaluate_retrieval skips loading one
