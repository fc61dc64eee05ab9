"""The scoring stage: node scores s(q, v) (METHOD.md §1.1 step 4) and the node-embedding cache they read.

- ``scorers``: ``NodeScorer`` (cos(f0(q), fθ(v)) over the cache), ``CrossNodeScorer`` (the node read after the
  question), the encoder views (``FrozenEncoderView`` for f0, ``QuerySideEncoder``) and ``node_scorer``, the
  factory the ``scorer`` config group targets;
- ``node_cache``: ``NodeEmbeddingCache``, node vectors on disk keyed by encoder fingerprint and leaf range;
- ``node_keys``: the keys and checksums of its rows.
"""

from canopy_lit.scoring.node_cache import NodeEmbeddingCache
from canopy_lit.scoring.scorers import (
    CrossNodeScorer,
    FrozenEncoderView,
    NodeScorer,
    QuerySideEncoder,
    as_float32,
    node_scorer,
)

__all__ = [
    "CrossNodeScorer",
    "FrozenEncoderView",
    "NodeEmbeddingCache",
    "NodeScorer",
    "QuerySideEncoder",
    "as_float32",
    "node_scorer",
]
