"""RECOMP-style extractive compression: a sentence (leaf) selector with its own scorer.

RECOMP's extractive compressor scores every sentence of the retrieved documents against the
question and hands the reader the top few, concatenated; it has no hierarchy, no critic and no
table-aggregation classifier. ``ExtractiveRefiner`` is that selector as a ``Refiner`` (same call
shape as ``canopy_lit.refine``), and ``FrozenEncoderView`` makes its scorer f0 on both sides even
when the run loads CANOPY's adapter, so the baseline never borrows CANOPY's trained fθ:

    scorer   s(q, v)               use
    f0       cos(f0(q), f0(v))     default: the untrained backbone, as an off-the-shelf selector
    ftheta   cos(f0(q), fθ(v))     the encoder's adapter; give it a flat selector trained on the same
                                   gold sentences with the same backbone (``encoder.adapter=DIR``)
                                   for the "hierarchy vs flat" comparison
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from canopy_lit.refine import NodeScoreFn, leaf_ids
from canopy_lit.types import Tree

Scorer = Literal["f0", "ftheta"]
SCORERS: tuple[str, ...] = ("f0", "ftheta")


class ExtractiveRefiner:
    """Top-m leaves (sentences, table rows) across all of a round's items, scored leaf by leaf.

    Only leaves are scored (``refine_lazily`` never asks for an inner node), and tables are treated
    like any other item: the aggregation flags of the loop are ignored, since RECOMP has no such
    classifier (``configs/method/recomp.yaml`` also turns the check off, so no LLM call is made).

    Args:
        m: leaves kept across the round's items (RECOMP keeps the top few sentences); ties are
            broken by item, then leaf order.
        scorer: ``f0`` (adapter disabled for nodes too, whatever ``encoder.adapter`` says) or
            ``ftheta`` (nodes through the loaded adapter). ``canopy_lit.pipeline.build`` reads it.

    Example:
        >>> kept = ExtractiveRefiner(m=5)(trees, scores)   # scores[j]: (len(trees[j]),)
    """

    name = "extractive"
    needs_scores = True
    lazy = True  # the loop then calls ``refine_lazily``: leaves only are encoded

    def __init__(self, m: int = 5, scorer: Scorer = "f0") -> None:
        if m < 1:
            raise ValueError(f"refine.m must be >= 1, got {m}")
        if scorer not in SCORERS:
            raise ValueError(f"refine.scorer must be one of {SCORERS}, got {scorer!r}")
        self.m = int(m)
        self.scorer = scorer

    def select(self, trees: Sequence[Tree], leaf_scores: Sequence[np.ndarray]) -> list[list[int]]:
        """Kept leaf node ids per tree (leaf order) from (n_leaves_j,) scores aligned with ``leaf_ids``."""
        per_tree = [leaf_ids(t) for t in trees]
        cand = [(float(s[k]), j, k) for j, s in enumerate(leaf_scores) for k in range(len(per_tree[j]))]
        cand.sort(key=lambda x: (-x[0], x[1], x[2]))
        chosen: list[list[int]] = [[] for _ in trees]
        for _, j, k in cand[: self.m]:
            chosen[j].append(int(per_tree[j][k]))
        return [sorted(c, key=lambda i: int(t.starts[i])) for t, c in zip(trees, chosen, strict=True)]

    def __call__(
        self, trees: Sequence[Tree], scores: Sequence[np.ndarray], aggregation: Sequence[bool] | None = None
    ) -> list[list[int]]:
        """Top-m leaves from full node scores (``scores[j]``: (num_nodes_j,)); ``aggregation`` is ignored."""
        return self.select(trees, [np.asarray(s)[leaf_ids(t)] for t, s in zip(trees, scores, strict=True)])

    def refine_lazily(
        self, trees: Sequence[Tree], score_nodes: NodeScoreFn, aggregation: Sequence[bool] | None = None
    ) -> list[list[int]]:
        """Same selection as ``__call__``, encoding the leaves only (one ``score_nodes`` call)."""
        requests = [leaf_ids(t).tolist() for t in trees]
        got = score_nodes(requests) if any(requests) else [np.zeros(0, np.float32) for _ in trees]
        return self.select(trees, [np.asarray(s, dtype=np.float32) for s in got])


class FrozenEncoderView:
    """A ``NodeEncoder`` seen with its adapter disabled on both sides: f0(q) and f0(v).

    The fingerprint is the backbone's with ``adapter=none``, so node embeddings cached through
    this view are shared with runs that load no adapter, and never mixed with fθ embeddings.

    Args:
        encoder: the run's encoder (with or without an adapter); it is not modified.
    """

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder

    def __getattr__(self, name: str) -> Any:  # dim, batch_size, name, ... of the wrapped encoder
        return getattr(self.encoder, name)

    @property
    def fingerprint(self) -> str:
        base = str(self.encoder.fingerprint)
        return base.rsplit(":adapter=", 1)[0] + ":adapter=none"

    def encode_queries(self, texts: Sequence[str], batch_size: int | None = None) -> Any:
        """(N, D) f0 query embeddings (the encoder's own f0 path)."""
        return self.encoder.encode_queries(texts, batch_size)

    def encode_nodes(self, inputs: Sequence[Any], batch_size: int | None = None) -> Any:
        """(N, D) f0 node embeddings: the backbone with the adapter off."""
        with self.encoder.adapter_disabled():
            return self.encoder.encode_nodes(inputs, batch_size)


def scorer_encoder(encoder: Any, refiner: Any) -> Any:
    """The encoder a refiner's node scores must come from: f0 on both sides for ``scorer: f0``.

    Raises:
        ValueError: ``refine.scorer=ftheta`` without a loaded adapter (the row would silently be f0).
    """
    kind = getattr(refiner, "scorer", None)
    if kind == "f0":
        return FrozenEncoderView(encoder)
    if kind == "ftheta" and not getattr(encoder, "has_adapter", False):
        raise ValueError("refine.scorer=ftheta needs a trained adapter: set encoder.adapter=DIR (or refine.scorer=f0)")
    return encoder
