"""Node scoring s(q, v) = cos(f0(q), fθ(v)) (METHOD.md §1.1 step 4)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.types import Tree


class NodeScorer:
    """Scores every node of a question's trees against the round's query.

    Node embeddings do not depend on the query, so with a ``cache`` (anything with
    ``embed_tree(tree) -> (num_nodes, D)``) they are computed once per
    (encoder fingerprint, item, leaf range) and reused across rounds, questions and runs.

    Args:
        encoder: a ``NodeEncoder`` (``encode_queries`` = f0, ``encode_nodes`` = fθ).
        hierarchy: renders nodes to encoder inputs.
        cache: optional node-embedding cache.
    """

    def __init__(self, encoder: Any, hierarchy: Hierarchy, cache: Any | None = None) -> None:
        self.encoder = encoder
        self.hierarchy = hierarchy
        self.cache = cache

    def embed_tree(self, tree: Tree) -> np.ndarray:
        """(num_nodes, D) fθ node embeddings, L2-normalised."""
        if self.cache is not None:
            return np.asarray(self.cache.embed_tree(tree))
        texts = [self.hierarchy.node_text(tree, i) for i in range(len(tree))]
        return _numpy(self.encoder.encode_nodes(texts))

    def embed_query(self, query: str) -> np.ndarray:
        """(D,) f0 query embedding."""
        return _numpy(self.encoder.encode_queries([query]))[0]

    def score(self, query: str | np.ndarray, trees: Sequence[Tree]) -> list[np.ndarray]:
        """One (num_nodes,) cosine-score array per tree."""
        q = self.embed_query(query) if isinstance(query, str) else query
        return [self.embed_tree(t) @ q for t in trees]


def _numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float32)
