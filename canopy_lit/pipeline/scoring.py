"""The scoring stage: s(q, v) = cos(f0(q), fθ(v)) over a node-embedding cache (METHOD.md §1.1 step 4).

The ``scorer`` config group picks the encoder view the nodes are scored through (``node_scorer``):

    scorer    s(q, v)               use
    adapter   cos(f0(q), fθ(v))     default: the run's encoder, fθ with ``encoder.adapter``, f0 without
    f0        cos(f0(q), f0(v))     the adapter off on both sides (``FrozenEncoderView``), whatever
                                    ``encoder.adapter`` says: RECOMP's off-the-shelf selector
    ftheta    cos(f0(q), fθ(v))     as ``adapter``, but a run without an adapter is refused (a row
                                    labelled fθ must not silently be f0)

``QuerySideEncoder`` is the view the evidence mode caches the candidate items' f0 retrieval vectors
through (``canopy_lit.pipeline.build.build_evidence_loop``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.retrieval.node_cache import NodeEmbeddingCache, is_late, late_embed_trees
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
        if is_late(self.encoder):
            return late_embed_trees(self.encoder, self.hierarchy, [tree])[0]
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
        if is_late(self.encoder):
            embs = late_embed_trees(self.encoder, self.hierarchy, trees)
            return [e[np.asarray(list(ii), dtype=np.int64)] for e, ii in zip(embs, ids, strict=True)]
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

    def encode_spans(self, items: Sequence[Any], grad: bool = False) -> Any:
        """Late-chunked f0 node embeddings (``node_pooling=late``): the backbone with the adapter off."""
        with self.encoder.adapter_disabled():
            return self.encoder.encode_spans(items, grad)


class QuerySideEncoder:
    """f0 query-side embeddings of node texts, seen as a node encoder (for a cache of retrieval vectors).

    Other attributes (``dim``, ``max_seq_length``, ...) are the wrapped encoder's, so the cache key
    holds every encoder setting the node cache keys on; the node pooling is not one of them (a query-side
    vector is always the text encoded alone).
    """

    node_pooling = "node"

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder

    def __getattr__(self, name: str) -> Any:
        return getattr(self.encoder, name)

    @property
    def fingerprint(self) -> str:
        base = re.sub(r":nodes=\w+$", "", str(self.encoder.fingerprint).rsplit(":adapter=", 1)[0])
        return base + ":adapter=none|query-side"

    def encode_nodes(self, inputs: Sequence[Any], batch_size: int | None = None) -> Any:
        return self.encoder.encode_queries([getattr(x, "text", x) for x in inputs], batch_size)


def node_scorer(
    encoder: Any,
    hierarchy: Hierarchy,
    cache_dir: str | Path | None = None,
    frozen: bool = False,
    require_adapter: bool = False,
) -> NodeScorer:
    """The ``scorer`` group's target: a ``NodeScorer`` over a node-embedding cache.

    Args:
        encoder: the run's encoder.
        hierarchy: renders nodes to encoder inputs.
        cache_dir: the cache's disk tier (``retrieval.node_cache_dir``; None = memory only).
        frozen: score through ``FrozenEncoderView`` (f0 on both sides), whatever adapter is loaded.
        require_adapter: refuse an encoder without a trained adapter (``scorer=ftheta``).

    Raises:
        ValueError: ``require_adapter`` and no adapter loaded.
    """
    if frozen:
        encoder = FrozenEncoderView(encoder)
    elif require_adapter and not getattr(encoder, "has_adapter", False):
        raise ValueError("scorer=ftheta needs a trained adapter: set encoder.adapter=DIR (or scorer=f0)")
    cache = NodeEmbeddingCache(encoder, hierarchy, cache_dir=Path(cache_dir) if cache_dir else None)
    return NodeScorer(encoder, hierarchy, cache)


def _numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float32)
