"""The scoring stage: s(q, v) = cos(f0(q), fθ(v)) over a node-embedding cache (METHOD.md §1.1 step 4).

The ``scorer`` config group picks the encoder view the nodes are scored through (``node_scorer``):

    scorer    s(q, v)               use
    adapter   cos(f0(q), fθ(v))     default: the run's encoder, fθ with ``encoder.adapter``, f0 without
    f0        cos(f0(q), f0(v))     the adapter off on both sides (``FrozenEncoderView``), whatever
                                    ``encoder.adapter`` says: RECOMP's off-the-shelf selector
    ftheta    cos(f0(q), fθ(v))     as ``adapter``, but a run without an adapter is refused (a row
                                    labelled fθ must not silently be f0)

With ``encoder.node_pooling=cross`` the factory builds a ``CrossNodeScorer`` instead: s(q, v) =
cos(f0(q), fθ(q ⊕ v)), the node read after the question in one forward (a cross-encoder), so a node's
vector depends on the question and is memoised for the run only, never in the node cache.

``QuerySideEncoder`` is the view the evidence mode caches the candidate items' f0 retrieval vectors
through (``canopy_lit.pipeline.build.build_evidence_loop``).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from canopy_lit.encoders.base import input_text
from canopy_lit.encoders.late import is_late, late_embed_trees
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.scoring.node_cache import NodeEmbeddingCache
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
        return as_float32(self.encoder.encode_nodes(inputs))

    def embed_query(self, query: str) -> np.ndarray:
        """(D,) f0 query embedding."""
        return as_float32(self.encoder.encode_queries([query]))[0]

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
        emb = as_float32(self.encoder.encode_nodes(inputs)) if inputs else np.zeros((0, 0), np.float32)
        bounds = np.cumsum([0, *(len(ii) for ii in ids)])
        return [emb[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def score(
        self, query: str | np.ndarray, trees: Sequence[Tree], nodes: Sequence[Sequence[int]] | None = None
    ) -> list[np.ndarray]:
        """One cosine-score array per tree: (num_nodes,), or (len(nodes[j]),) for the requested nodes."""
        q = self.embed_query(query) if isinstance(query, str) else query
        return [e @ q if len(e) else np.zeros(0, np.float32) for e in self.embed_trees(trees, nodes)]


@dataclass(frozen=True)
class CrossQuery:
    """A round's query for ``CrossNodeScorer``: its text (what the nodes are read after) and f0(q) (D,)."""

    text: str
    vector: np.ndarray


class PairScoreMemo:
    """The scores ``CrossNodeScorer`` has computed, keyed by (question text, node input text): an LRU for
    one run (a question-dependent score is worth nothing to another question). ``stats()`` reads like the
    node cache's, ``misses`` = (question, node) pairs encoded."""

    def __init__(self, capacity: int = 200_000) -> None:
        self.capacity = capacity
        self._mem: OrderedDict[tuple[str, str], float] = OrderedDict()
        self.hits = self.misses = 0

    def get(self, key: tuple[str, str]) -> float | None:
        value = self._mem.get(key)
        if value is not None:
            self._mem.move_to_end(key)
            self.hits += 1
        return value

    def put(self, key: tuple[str, str], value: float) -> None:
        self.misses += 1
        self._mem[key] = value
        if len(self._mem) > self.capacity:
            self._mem.popitem(last=False)

    def stats(self) -> dict[str, int]:
        return {"hits": self.hits, "disk_hits": 0, "misses": self.misses, "memory": len(self._mem)}


_PAIR_MEMOS: dict[str, PairScoreMemo] = {}  # encoder fingerprint -> the process's scores (node_scorer)


class CrossNodeScorer:
    """s(q, v) = cos(f0(q), fθ(q ⊕ v)): each node read after the question (``encoder.node_pooling=cross``).

    Query-aware, as Provence's pruner: every region token attends to the question, and the node's tokens
    are mean-pooled (``TextEncoder.encode_pairs``). The score keeps the bi-encoder's scale (a cosine with
    f0(q)), so the pairwise loss, λ and δ carry over. Not cacheable across questions: one forward per
    (question, node) the refiner asks for, memoised for the run (``cache``).

    Args:
        encoder: a ``NodeEncoder`` with ``encode_pairs`` (fθ with an adapter, f0 without).
        hierarchy: renders nodes to encoder inputs (text nodes only).
        cache: the run's score memo (default: a fresh one).
    """

    def __init__(self, encoder: Any, hierarchy: Hierarchy, cache: PairScoreMemo | None = None) -> None:
        self.encoder = encoder
        self.hierarchy = hierarchy
        self.cache = cache if cache is not None else PairScoreMemo()

    def embed_query(self, query: str) -> CrossQuery:
        """The query's text and its (D,) f0 embedding."""
        return CrossQuery(query, as_float32(self.encoder.encode_queries([query]))[0])

    def score(
        self, query: str | CrossQuery, trees: Sequence[Tree], nodes: Sequence[Sequence[int]] | None = None
    ) -> list[np.ndarray]:
        """One score array per tree: (num_nodes,), or (len(nodes[j]),) for the requested nodes.

        Raises:
            ValueError: a node with frames (cross pooling reads text only) or a precomputed query vector.
        """
        if isinstance(query, np.ndarray):
            raise ValueError("encoder.node_pooling=cross scores nodes against the question's text, not a vector")
        q = query if isinstance(query, CrossQuery) else self.embed_query(query)
        ids = [range(len(t)) for t in trees] if nodes is None else nodes
        keys: list[list[tuple[str, str]]] = []
        known: dict[tuple[str, str], float] = {}
        todo: dict[tuple[str, str], Any] = {}
        for tree, ii in zip(trees, ids, strict=True):
            row = []
            for i in ii:
                x = self.hierarchy.node_input(tree, int(i))
                if getattr(x, "frames", None):
                    raise ValueError(
                        f"encoder.node_pooling=cross reads text nodes only; node {int(i)} of item {tree.item.id!r} has frames"
                    )
                key = (q.text, input_text(x))
                row.append(key)
                if key not in known and key not in todo:
                    value = self.cache.get(key)
                    if value is None:
                        todo[key] = x
                    else:
                        known[key] = value
            keys.append(row)
        if todo:
            emb = as_float32(self.encoder.encode_pairs([k[0] for k in todo], list(todo.values())))
            for key, value in zip(todo, emb @ q.vector, strict=True):
                known[key] = float(value)
                self.cache.put(key, known[key])
        return [np.asarray([known[k] for k in row], dtype=np.float32) for row in keys]


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

    def encode_pairs(self, queries: Sequence[str], inputs: Sequence[Any], batch_size: int | None = None) -> Any:
        """f0 node embeddings read after their question (``node_pooling=cross``): the adapter off."""
        with self.encoder.adapter_disabled():
            return self.encoder.encode_pairs(queries, inputs, batch_size)


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
) -> NodeScorer | CrossNodeScorer:
    """The ``scorer`` group's target: a ``NodeScorer`` over a node-embedding cache (a ``CrossNodeScorer``,
    with no cache, when the encoder reads nodes after the question: ``encoder.node_pooling=cross``).

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
    if getattr(encoder, "node_pooling", "node") == "cross":
        # one memo per encoder identity and process: a δ or k sweep in one process scores each pair once
        memo = _PAIR_MEMOS.setdefault(str(encoder.fingerprint), PairScoreMemo())
        return CrossNodeScorer(encoder, hierarchy, memo)
    cache = NodeEmbeddingCache(encoder, hierarchy, cache_dir=Path(cache_dir) if cache_dir else None)
    return NodeScorer(encoder, hierarchy, cache)


def as_float32(x: Any) -> np.ndarray:
    """A tensor or array as a float32 numpy array (detached, on the CPU)."""
    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float32)
