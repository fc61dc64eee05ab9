"""Node-embedding cache: fθ(v) is query-independent, so every node is encoded once (METHOD.md §1.1 step 4).

Keys are ``(encoder fingerprint, item id, leaf start, leaf end)``. A node's rendering depends on
its leaf range only, not on the branching factor, so trees of different B share entries. Two tiers:

- memory: an LRU of ``capacity`` vectors (float32);
- disk: one SQLite file per fingerprint under ``cache_dir`` (WAL mode, so several processes of a
  sweep can read and write it), vectors stored as ``dtype`` blobs.

Fresh vectors are rounded through ``dtype`` before use, so a score is bit-identical whether its
node came from the encoder, memory or disk (refinement compares child >= parent: a 1e-3 float16
wobble could flip a decision between a cold and a warm run).

Online compression is then lookup + dot product; ``precompute`` fills the disk tier for a corpus.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.types import Item, Tree

log = logging.getLogger(__name__)

Key = tuple[str, int, int]  # (item id, start, end) within one fingerprint


def fingerprint_slug(fingerprint: str) -> str:
    """A filesystem-safe, collision-resistant name for a fingerprint."""
    return hashlib.sha256(fingerprint.encode()).hexdigest()[:20]


class NodeEmbeddingCache:
    """Memory-LRU + on-disk cache of node embeddings for one encoder.

    Args:
        encoder: a ``NodeEncoder`` (``encode_nodes``, ``fingerprint``, ``dim``).
        hierarchy: renders node inputs (``Hierarchy.node_input``); default B = 2 builders.
        cache_dir: folder of the per-fingerprint SQLite stores; None = memory only.
        capacity: vectors kept in memory (LRU); 0 disables the memory tier.
        batch_size: encoder batch size for misses.
        salt: extra key material, e.g. a non-default node renderer (video describer) that changes
            node inputs without changing the encoder.
        dtype: storage dtype, ``"float32"`` (exact) or ``"float16"`` (half the disk, cosine error ~1e-3).

    Example:
        >>> cache = NodeEmbeddingCache(encoder, cache_dir=".cache/nodes")
        >>> emb = cache.embed_tree(tree)            # (num_nodes, D), misses encoded once
        >>> scores = emb @ q                         # q: (D,) f0 query embedding
    """

    def __init__(
        self,
        encoder: Any,
        hierarchy: Hierarchy | None = None,
        cache_dir: str | Path | None = None,
        capacity: int = 200_000,
        batch_size: int | None = None,
        salt: str = "",
        dtype: str = "float32",
    ) -> None:
        if dtype not in {"float32", "float16"}:
            raise ValueError(f"node cache dtype must be float32 or float16, got {dtype!r}")
        self.dtype = np.dtype(dtype)
        self.encoder = encoder
        self.hierarchy = hierarchy or Hierarchy()
        self.capacity = capacity
        self.batch_size = batch_size
        self.salt = salt
        self._mem: OrderedDict[tuple[str, str, int, int], np.ndarray] = OrderedDict()
        self.hits = self.disk_hits = self.misses = 0
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._db: sqlite3.Connection | None = None
        self._db_fp: str | None = None

    # ------------------------------------------------------------------ keys and stores
    @property
    def fingerprint(self) -> str:
        """Encoder fingerprint (backbone + adapter hash), plus the salt; read live so a new adapter is a new key."""
        fp = str(self.encoder.fingerprint)
        fp = f"{fp}|{self.salt}" if self.salt else fp
        return fp if self.dtype == np.float32 else f"{fp}|{self.dtype.name}"

    def _conn(self, fp: str) -> sqlite3.Connection | None:
        if self.cache_dir is None:
            return None
        if self._db is not None and self._db_fp == fp:
            return self._db
        if self._db is not None:
            self._db.close()
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        path = self.cache_dir / f"nodes-{fingerprint_slug(fp)}.sqlite"
        db = sqlite3.connect(str(path), timeout=60)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        db.execute(
            "CREATE TABLE IF NOT EXISTS nodes (item TEXT, start INTEGER, end_ INTEGER, vec BLOB,"
            " PRIMARY KEY (item, start, end_)) WITHOUT ROWID"
        )
        stored = db.execute("SELECT value FROM meta WHERE key='fingerprint'").fetchone()
        if stored is None:
            db.execute("INSERT INTO meta VALUES ('fingerprint', ?), ('dim', ?)", (fp, str(self.encoder.dim)))
            db.commit()
        elif stored[0] != fp:  # a 80-bit slug collision: refuse rather than serve wrong vectors
            raise RuntimeError(f"{path} belongs to fingerprint {stored[0]!r}, not {fp!r}")
        self._db, self._db_fp = db, fp
        return db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = self._db_fp = None

    def __len__(self) -> int:
        """Entries in the memory tier."""
        return len(self._mem)

    def stats(self) -> dict[str, int]:
        return {
            "hits": self.hits,
            "disk_hits": self.disk_hits,
            "misses": self.misses,
            "memory": len(self._mem),
        }

    # ------------------------------------------------------------------ tiers
    def _mem_get(self, fp: str, key: Key) -> np.ndarray | None:
        k = (fp, *key)
        v = self._mem.get(k)
        if v is not None:
            self._mem.move_to_end(k)
        return v

    def _mem_put(self, fp: str, key: Key, vec: np.ndarray) -> None:
        if self.capacity <= 0:
            return
        k = (fp, *key)
        self._mem[k] = vec
        self._mem.move_to_end(k)
        while len(self._mem) > self.capacity:
            self._mem.popitem(last=False)

    def _disk_get(self, fp: str, keys: Sequence[Key]) -> dict[Key, np.ndarray]:
        db = self._conn(fp)
        if db is None or not keys:
            return {}
        out: dict[Key, np.ndarray] = {}
        # Group by item: one indexed range query per item instead of one query per node.
        wanted: dict[str, set[tuple[int, int]]] = {}
        for item, s, e in keys:
            wanted.setdefault(item, set()).add((s, e))
        for item, ranges in wanted.items():
            for s, e, blob in db.execute("SELECT start, end_, vec FROM nodes WHERE item = ?", (item,)):
                if (s, e) in ranges:
                    out[(item, s, e)] = np.frombuffer(blob, dtype=self.dtype).astype(np.float32)
        return out

    def _disk_put(self, fp: str, entries: dict[Key, np.ndarray]) -> None:
        db = self._conn(fp)
        if db is None or not entries:
            return
        rows = [(i, s, e, v.astype(self.dtype).tobytes()) for (i, s, e), v in entries.items()]
        with db:
            db.executemany("INSERT OR REPLACE INTO nodes VALUES (?, ?, ?, ?)", rows)

    # ------------------------------------------------------------------ API
    def tree(self, item: Item) -> Tree:
        return self.hierarchy.build(item)

    def embed_tree(self, tree: Tree) -> np.ndarray:
        """(num_nodes, D) float32 fθ embeddings of every node of ``tree``, in node-id order."""
        return self.embed_trees([tree])[0]

    def embed_trees(
        self, trees: Sequence[Tree], nodes: Sequence[Sequence[int]] | None = None
    ) -> list[np.ndarray]:
        """Embeddings of several trees; all misses go to the encoder in one batched call.

        Args:
            trees: region trees.
            nodes: node ids per tree to embed (None = every node).

        Returns:
            One (len(nodes[j]) or num_nodes, D) float32 array per tree, rows in request order.
        """
        fp = self.fingerprint
        ids_per_tree = [range(len(t)) if nodes is None else nodes[j] for j, t in enumerate(trees)]
        keys_per_tree: list[list[Key]] = []
        found: dict[Key, np.ndarray] = {}
        need_disk: list[Key] = []
        for t, ids in zip(trees, ids_per_tree, strict=True):
            keys = [(t.item.id, int(t.starts[i]), int(t.ends[i])) for i in ids]
            keys_per_tree.append(keys)
            for key in keys:
                if key in found:
                    continue
                v = self._mem_get(fp, key)
                if v is not None:
                    found[key] = v
                    self.hits += 1
                else:
                    need_disk.append(key)
        need_disk = list(dict.fromkeys(need_disk))
        from_disk = self._disk_get(fp, need_disk)
        self.disk_hits += len(from_disk)
        for key, v in from_disk.items():
            found[key] = v
            self._mem_put(fp, key, v)
        misses = [k for k in need_disk if k not in from_disk]
        if misses:
            self.misses += len(misses)
            # Render each missing node once, from the tree it was asked for.
            where: dict[Key, tuple[Tree, int]] = {}
            for t, ids, keys in zip(trees, ids_per_tree, keys_per_tree, strict=True):
                for node_id, key in zip(ids, keys, strict=True):
                    where.setdefault(key, (t, int(node_id)))
            inputs = [self.hierarchy.node_input(*where[k]) for k in misses]
            emb = self.encoder.encode_nodes(inputs, batch_size=self.batch_size)
            emb = np.asarray(
                emb.detach().cpu().float().numpy() if hasattr(emb, "detach") else emb, np.float32
            )
            emb = emb.astype(self.dtype).astype(np.float32)
            new = dict(zip(misses, emb, strict=True))
            self._disk_put(fp, new)
            for key, v in new.items():
                found[key] = v
                self._mem_put(fp, key, v)
        dim = self.encoder.dim
        return [
            np.stack([found[k] for k in keys]) if keys else np.zeros((0, dim), np.float32)
            for keys in keys_per_tree
        ]

    def precompute(self, items: Iterable[Item], chunk: int = 256) -> int:
        """Encode every node of every item's tree into the disk tier (online scoring becomes lookups).

        Returns the number of nodes encoded (misses); already cached nodes are skipped.
        Memory stays bounded by ``chunk`` trees at a time.
        """
        before = self.misses
        batch: list[Tree] = []
        for item in items:
            batch.append(self.tree(item))
            if len(batch) >= chunk:
                self.embed_trees(batch)
                batch = []
        if batch:
            self.embed_trees(batch)
        return self.misses - before
