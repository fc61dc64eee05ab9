"""Stage 1: one retriever per configuration, run in parallel, each adding its top-k clips to one pool.

The pool keeps, for every candidate clip, *which* configurations retrieved it (with rank, cosine
and the best unit, i.e. the frame that matched for frame-level configurations): stage 2 rescores a
candidate under each of those configurations and no other.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from canopy_lit.carve.representations import CONFIGS, ClipCorpus


@dataclass(frozen=True)
class Hit:
    """One clip retrieved by one configuration: 1-based ``rank``, cosine ``score``, best ``unit`` row."""

    clip: int
    config: str
    rank: int
    score: float
    unit: int


@dataclass
class Candidate:
    """A pooled clip and the hits of the configurations that retrieved it (in ``CONFIGS`` order)."""

    clip: int
    hits: dict[str, Hit] = field(default_factory=dict)

    @property
    def configs(self) -> list[str]:
        return [c for c in CONFIGS if c in self.hits]


def retrieve_config(
    corpus: ClipCorpus, config: str, query: str, k: int, allowed: np.ndarray | None = None
) -> list[Hit]:
    """Top-``k`` clips of one configuration (ties broken by clip order).

    Args:
        allowed: optional (C,) bool mask restricting the search (e.g. to the query's own video).
    """
    view = corpus.views[config]
    scores, units = view.clip_scores(view.embed_query(query), len(corpus))
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    order = np.lexsort((np.arange(len(scores)), -scores))  # score desc, then clip index asc
    hits = []
    for c in order[:k]:
        if not np.isfinite(scores[c]):
            break
        hits.append(Hit(int(c), config, len(hits) + 1, float(scores[c]), int(units[c])))
    return hits


def build_pool(lists: dict[str, list[Hit]]) -> list[Candidate]:
    """Merge per-configuration lists into one pool; a clip appears once, with every retrieving configuration.

    Pool order: by best (lowest) rank over configurations, then ``CONFIGS`` order of that
    configuration, then clip index (deterministic; stage 2 re-ranks anyway).
    """
    pool: dict[int, Candidate] = {}
    for config in CONFIGS:
        for h in lists.get(config, []):
            pool.setdefault(h.clip, Candidate(h.clip)).hits[config] = h

    def key(c: Candidate) -> tuple[int, int, int]:
        best = min(c.hits.values(), key=lambda h: (h.rank, CONFIGS.index(h.config)))
        return best.rank, CONFIGS.index(best.config), c.clip

    return sorted(pool.values(), key=key)


class ParallelRetriever:
    """The four retrievers of stage 1, run concurrently (one thread each; the work is a matrix product).

    Args:
        corpus: the embedded clip corpus.
        k: clips each configuration adds to the pool.
        configs: configurations to run (default: all the corpus has).
        workers: threads; 1 runs them in sequence.
    """

    def __init__(self, corpus: ClipCorpus, k: int = 3, configs: Sequence[str] | None = None, workers: int = 4) -> None:
        if k < 1:
            raise ValueError(f"carve.pool_k must be >= 1, got {k}")
        self.corpus = corpus
        self.k = k
        self.configs = tuple(configs or corpus.configs)
        missing = [c for c in self.configs if c not in corpus.views]
        if missing:
            raise ValueError(f"corpus has no view for configuration(s) {missing}")
        self.workers = workers

    def lists(self, query: str, allowed: np.ndarray | None = None) -> dict[str, list[Hit]]:
        """Each configuration's top-k list."""
        if self.workers <= 1:
            return {c: retrieve_config(self.corpus, c, query, self.k, allowed) for c in self.configs}
        with ThreadPoolExecutor(min(self.workers, len(self.configs))) as ex:
            futures = {c: ex.submit(retrieve_config, self.corpus, c, query, self.k, allowed) for c in self.configs}
            return {c: f.result() for c, f in futures.items()}

    def __call__(self, query: str, allowed: np.ndarray | None = None) -> tuple[list[Candidate], dict[str, list[Hit]]]:
        """(candidate pool, per-configuration lists)."""
        lists = self.lists(query, allowed)
        return build_pool(lists), lists
