"""Baselines under the CARVE harness: each configuration alone, and fixed fusion (reciprocal rank fusion).

Both skip stage 2 (no cross-encoder) and return ``RankedClip`` lists, so generation and
metrics are the same code as CARVE's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from canopy_lit.carve.representations import CONFIGS, check_config
from canopy_lit.carve.rerank import RankedClip
from canopy_lit.carve.retrieve import Hit


def single_config_ranking(hits: Sequence[Hit], k: int) -> list[RankedClip]:
    """One configuration's retrieval list as the final ranking (winner = that configuration, score = cosine)."""
    out = []
    for h in sorted(hits, key=lambda h: h.rank)[:k]:
        out.append(RankedClip(h.clip, check_config(h.config), h.score, h.unit, {h.config: h.score}, {h.config: h.score}))
    return out


def reciprocal_rank_fusion(lists: Mapping[str, Sequence[Hit]], k: int, k_rrf: float = 60.0) -> list[RankedClip]:
    """Fixed fusion: score(clip) = sum over configurations of 1 / (k_rrf + rank), ranks 1-based.

    A clip absent from a list contributes nothing for it. The clip's representation for
    generation is the configuration where it ranked best (ties: ``CONFIGS`` order). Ties in
    the fused score: clip index.
    """
    fused: dict[int, float] = {}
    best: dict[int, Hit] = {}
    for config in CONFIGS:
        for h in lists.get(config, ()):
            fused[h.clip] = fused.get(h.clip, 0.0) + 1.0 / (k_rrf + h.rank)
            b = best.get(h.clip)
            if b is None or h.rank < b.rank:  # strict: an earlier configuration wins a tie
                best[h.clip] = h
    order = sorted(fused, key=lambda c: (-fused[c], c))[:k]
    out = []
    for c in order:
        per = {cfg: 1.0 / (k_rrf + h.rank) for cfg in CONFIGS for h in lists.get(cfg, ()) if h.clip == c}
        out.append(RankedClip(c, best[c].config, fused[c], best[c].unit, per, {cfg: float(v) for cfg, v in per.items()}))
    return out
