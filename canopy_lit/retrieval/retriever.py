"""The retrieval stage: query -> top-k items of the unified corpus (METHOD.md §1.1 step 1).

``build_retriever`` wires the parts and caches every expensive one by content: the corpus JSONL
(by its sources' content: files, options, items), the f0 embeddings (by encoder fingerprint + corpus digest, resumable shards)
and the FAISS index (by embeddings + index settings).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from annotated_types import Ge

from canopy_lit.assets import default_cache_dir
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.retrieval.base import (  # noqa: F401  (re-exported: the stage interface)
    BatchRetriever,
    Retrieval,
    Retriever,
    SingleQueryMixin,
    exclusion_sets,
    record_batch,
    route_queries,
    rows_by_route,
)
from canopy_lit.retrieval.corpus import CorpusStore
from canopy_lit.retrieval.encode import encode_corpus, f0_fingerprint
from canopy_lit.retrieval.faiss_codes import IndexKind
from canopy_lit.retrieval.index import FaissIndex
from canopy_lit.retrieval.user_corpus import open_corpus

log = logging.getLogger(__name__)


@dataclass
class FaissRetriever(SingleQueryMixin):
    """Dense retrieval over a ``FaissIndex`` with f0 query embeddings.

    Args:
        index: the item index (partitioned by modality for routing).
        corpus: resolves ids to items.
        encoder: ``NodeEncoder``; queries use ``encode_queries`` (f0).
        router: optional modality router (``route(query) -> list of modality names``); used iff set.
    """

    index: FaissIndex
    corpus: CorpusStore
    encoder: Any
    router: Any = None
    stats: dict[str, float] = field(default_factory=lambda: {"queries": 0, "seconds": 0.0})

    def __post_init__(self) -> None:
        if self.router is not None and hasattr(self.router, "restrict"):
            self.router.restrict(self.index.groups)  # never offer the LLM a modality the corpus lacks

    def retrieve_batch(
        self, queries: Sequence[str], k: int, exclude: Sequence[Collection[str]] | None = None
    ) -> list[Retrieval]:
        """Batched ``retrieve``: one encoder pass and one FAISS pass per routed partition set."""
        t0 = time.perf_counter()
        queries = list(queries)
        excl = exclusion_sets(queries, exclude)
        q = self.encoder.encode_queries(queries)
        q = np.asarray(q.detach().cpu().numpy() if hasattr(q, "detach") else q, dtype=np.float32)
        groups = route_queries(self.router, queries, self.index.groups)
        out: list[Retrieval | None] = [None] * len(queries)
        for route, rows in rows_by_route(groups).items():
            res = self.index.search(q[rows], k, exclude=[excl[i] for i in rows], groups=route)
            for r, i in enumerate(rows):
                out[i] = Retrieval(queries[i], self.corpus.get_many(res.ids[r]), res.scores[r], groups[i])
        assert all(r is not None for r in out)
        return record_batch(self.stats, out, t0)  # type: ignore[arg-type]

    def _route(self, query: str) -> list[str] | None:
        return route_queries(self.router, [query], self.index.groups)[0]


def builder_options(builder: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of ``options`` that ``builder`` accepts: the retrieval group also carries the loop's keys
    (``k``, ``exclude_seen``) and the candidate ranking, which no corpus builder takes.

    A builder with ``**kwargs`` (the hybrid one forwards them to ``build_retriever``) also accepts
    ``build_retriever``'s keys.
    """
    params = inspect.signature(builder).parameters
    accepted = set(params) - {"encoder"}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        accepted |= set(inspect.signature(build_retriever).parameters) - {"encoder"}
    return {key: v for key, v in options.items() if key in accepted}


def cache_slug(*parts: Any) -> str:
    """16 hex digits naming a cache folder by everything that decides its content (JSON of ``parts``)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def build_retriever(
    encoder: Any,
    benchmarks: Sequence[str] = ("nq", "hotpotqa", "ottqa", "tatqa"),
    cache_dir: str | Path | None = None,
    index: IndexKind = "flat_sq_fp16",
    index_options: dict[str, Any] | None = None,
    partition_by_modality: bool = True,
    routing: bool = False,
    router: Any = None,
    batch_size: Annotated[int, Ge(1)] = 64,
    shard_size: Annotated[int, Ge(1)] = 4096,
    benchmark_options: dict[str, dict[str, Any]] | None = None,
    trainer_kwargs: dict[str, Any] | None = None,
    loaded: Mapping[str, Any] | None = None,
    corpus: str | Path | None = None,
    corpus_options: dict[str, Any] | None = None,
) -> FaissRetriever:
    """Corpus of ``benchmarks`` -> f0 embeddings -> FAISS index -> retriever, each step cached under ``cache_dir``.

    Args:
        encoder: ``NodeEncoder`` (its f0 embeds items and queries).
        benchmarks: the corpus is the union of their items.
        cache_dir: root of ``corpus-*.jsonl``, ``emb-*/`` shard folders and ``index-*/`` folders
            (default ``$CANOPY_LIT_HOME/retrieval``, see ``canopy_lit.assets.default_cache_dir``).
        index: ``FaissIndex`` kind and keyword options (nlist, pq_m, nprobe, gpu ...).
        index_options: see ``index``.
        partition_by_modality: one sub-index per modality (needed for routing; exact either way).
        routing: route queries to modality sub-indexes with ``router`` (e.g. an
            ``LLMModalityRouter``); ``routing=True`` without a router raises.
        router: see ``routing``.
        batch_size: corpus encoding (``encode_corpus``).
        shard_size: see ``batch_size``.
        trainer_kwargs: see ``batch_size``.
        benchmark_options: per-benchmark ``load_benchmark`` options (``path``: a file other than the bundled one).
        loaded: benchmarks already read, by name, whose items stand in for that name's entry (the run's
            ``data=X data.path=P``: ``retrieval.scopes.corpus_retriever``).
        corpus: your own corpus file or dataset folder in place of the union of ``benchmarks``
            (``retrieval.corpus``; None = the union), with ``media_root`` / ``allow_outside_media_root``
            (``retrieval.user_corpus.open_corpus``; keyed on the file's content the same way).
        corpus_options: see ``corpus``.

    The corpus JSONL is keyed by its sources' content (``CorpusStore.from_benchmarks``), the embeddings and
    the index by the JSONL's bytes, so another source file never reuses what an earlier one built.
    """
    if routing and router is None:
        raise ValueError("retrieval.routing=true needs a router (the LLM layer's ModalityRouter)")
    if routing and not partition_by_modality:
        raise ValueError("retrieval.routing=true needs partition_by_modality=true")
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir("retrieval")
    names = [b.lower() for b in benchmarks]
    corpus = open_corpus(names, cache, corpus, corpus_options, benchmark_options=benchmark_options, loaded=loaded)
    digest = corpus.digest()
    # encode_corpus renders items with the default hierarchy: its renderer is part of what the vectors are
    fp = f0_fingerprint(encoder) + f"|{Hierarchy().fingerprint}"
    emb_dir = cache / f"emb-{cache_slug(fp, digest)}"
    rep = encode_corpus(corpus, encoder, emb_dir, batch_size=batch_size, shard_size=shard_size, trainer_kwargs=trainer_kwargs)
    if rep.encoded:
        log.info("encoded %d corpus items in %.1f s (%d already done)", rep.encoded, rep.seconds, rep.skipped)
    opts = dict(index_options or {})
    gpu = bool(opts.pop("gpu", False))
    idx_dir = cache / f"index-{cache_slug(fp, digest, index, opts, partition_by_modality)}"
    if (idx_dir / "meta.json").exists():
        faiss_index = FaissIndex.load(idx_dir, gpu=gpu, **{k_: v for k_, v in opts.items() if k_ in ("nprobe", "search_batch")})
    else:  # streamed from the shards on disk: the (N, D) float32 matrix is never in memory
        groups = corpus.modalities if partition_by_modality else None
        faiss_index = FaissIndex.build_from_shards(emb_dir, corpus.ids, idx_dir, groups=groups, id_rows=corpus.rows,
                                                   kind=index, gpu=gpu, **opts)  # fmt: skip
    return FaissRetriever(faiss_index, corpus, encoder, router=router if routing else None)
