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
        # The same inputs the cache encodes (text + frames), so cached and uncached scores agree.
        inputs = [self.hierarchy.node_input(tree, i) for i in range(len(tree))]
        return _numpy(self.encoder.encode_nodes(inputs))

    def embed_query(self, query: str) -> np.ndarray:
        """(D,) f0 query embedding."""
        return _numpy(self.encoder.encode_queries([query]))[0]

    def embed_trees(
        self, trees: Sequence[Tree], nodes: Sequence[Sequence[int]] | None = None
    ) -> list[np.ndarray]:
        """fθ embeddings of several trees with one encoder call (small per-tree batches waste most of it).

        Args:
            trees: region trees.
            nodes: node ids per tree (None = every node).

        Returns:
            One (n_j, D) array per tree, rows in the order of ``nodes[j]`` (node-id order when None).
        """
        ids = [range(len(t)) for t in trees] if nodes is None else nodes
        if self.cache is not None and hasattr(self.cache, "embed_trees"):
            return [np.asarray(e) for e in self.cache.embed_trees(trees, None if nodes is None else nodes)]
        inputs = [self.hierarchy.node_input(t, int(i)) for t, ii in zip(trees, ids, strict=True) for i in ii]
        emb = _numpy(self.encoder.encode_nodes(inputs)) if inputs else np.zeros((0, 0), np.float32)
        bounds = np.cumsum([0, *(len(ii) for ii in ids)])
        return [emb[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def score(
        self, query: str | np.ndarray, trees: Sequence[Tree], nodes: Sequence[Sequence[int]] | None = None
    ) -> list[np.ndarray]:
        """One cosine-score array per tree: (num_nodes,), or (len(nodes[j]),) for the requested nodes."""
        q = self.embed_query(query) if isinstance(query, str) else query
        return [e @ q if len(e) else np.zeros(0, np.float32) for e in self.embed_trees(trees, nodes)]


def _numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float32)
