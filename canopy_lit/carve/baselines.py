"""Baselines under the CARVE harness: each configuration alone, and fixed fusion (reciprocal rank fusion).

Both skip stage 2 (no cross-encoder) and return ``RankedClip`` lists, so generation and
metrics are the same code as CARVE's. Each is a ``ClipRanking`` of the ``carve/method`` group
(``single``, ``rrf``); the functions below are their rankings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from canopy_lit.carve.representations import CONFIGS, ClipCorpus, check_config
from canopy_lit.carve.rerank import ConfigScore, RankedClip
from canopy_lit.carve.retrieve import Candidate, Hit
from canopy_lit.retrieval.hybrid import reciprocal_rank_fusion

ConfigName = Literal["visual_frame", "visual_clip", "text_frame", "text_clip"]


def single_config_ranking(hits: Sequence[Hit], k: int) -> list[RankedClip]:
    """One configuration's retrieval list as the final ranking (winner = that configuration, score = cosine)."""
    out = []
    for h in sorted(hits, key=lambda h: h.rank)[:k]:
        out.append(RankedClip(h.clip, check_config(h.config), h.score, h.unit, {h.config: h.score}, {h.config: h.score}))
    return out


def fused_ranking(lists: Mapping[str, Sequence[Hit]], k: int, rrf_k: float = 60.0) -> list[RankedClip]:
    """Fixed fusion of the configurations' lists: score(clip) = sum over configurations of 1 / (rrf_k + rank).

    The fused scores are ``retrieval.hybrid.reciprocal_rank_fusion`` over the lists in ``CONFIGS``
    order (ranks 1-based; a clip absent from a list contributes nothing for it). Ties in the fused
    score: clip index. The clip's representation for generation is the configuration where it
    ranked best (ties: ``CONFIGS`` order).
    """
    ranked = {c: sorted(lists.get(c, ()), key=lambda h: h.rank) for c in CONFIGS}
    fused = reciprocal_rank_fusion([[h.clip for h in ranked[c]] for c in CONFIGS], rrf_k=rrf_k)
    order = sorted(fused, key=lambda pair: (-pair[1], pair[0]))[:k]
    out = []
    for clip, score in order:
        hits = [h for c in CONFIGS for h in ranked[c] if h.clip == clip]
        best = min(hits, key=lambda h: h.rank)  # min keeps the first: an earlier configuration wins a tie
        per = {h.config: 1.0 / (rrf_k + h.rank) for h in hits}
        out.append(RankedClip(clip, best.config, score, best.unit, per, dict(per)))
    return out


class FusionRanking:
    """``carve/method=rrf``: reciprocal rank fusion of the four configurations' lists, no reranking.

    Args:
        rrf_k: the RRF constant (``carve.rrf_k``).
    """

    name = "rrf"
    reranks = False
    calls = 0

    def __init__(self, rrf_k: float = 60.0) -> None:
        if rrf_k < 0:
            raise ValueError(f"carve.rrf_k must be >= 0, got {rrf_k}")
        self.rrf_k = float(rrf_k)

    def rank(
        self, query: str, pool: Sequence[Candidate], lists: Mapping[str, Sequence[Hit]], corpus: ClipCorpus, k: int
    ) -> tuple[list[RankedClip], list[ConfigScore]]:
        return fused_ranking(lists, k, self.rrf_k), []

    def settings(self) -> dict[str, Any]:
        return {}


class SingleConfigRanking:
    """``carve/method=single``: one configuration's retrieval list as the final ranking, no reranking.

    Args:
        config: visual_frame | visual_clip | text_frame | text_clip (spellings as ``check_config`` reads them).
    """

    reranks = False
    calls = 0

    def __init__(self, config: ConfigName) -> None:
        self.config = check_config(config)
        self.name = f"single:{self.config}"

    def rank(
        self, query: str, pool: Sequence[Candidate], lists: Mapping[str, Sequence[Hit]], corpus: ClipCorpus, k: int
    ) -> tuple[list[RankedClip], list[ConfigScore]]:
        return single_config_ranking(lists[self.config], k), []

    def settings(self) -> dict[str, Any]:
        return {}
