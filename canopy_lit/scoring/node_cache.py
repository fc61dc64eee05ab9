"""Node-embedding cache: fθ(v) is query-independent, so every node is encoded once (METHOD.md §1.1 step 4).

Keys are ``(fingerprint, item id, item digest, leaf start, leaf end)``, where the fingerprint joins the
encoder's (backbone + adapter hash), the renderer's (``Hierarchy.fingerprint``: tree builders, their
options, the frame describer) and the encoder settings that change what reaches the model
(``max_seq_length``, ``max_frames_per_node``), and the item digest hashes the item's content
(``item_digest``), so an item id reused for other text is a miss, not a stale vector. A node's rendering
depends on its leaf range only, not on the branching factor, so trees of different B share entries.
Two tiers:

- memory: an LRU of ``capacity`` vectors (float32);
- disk: one SQLite file per fingerprint under ``cache_dir`` (WAL mode, so several processes of a
  sweep can read and write it), vectors stored as ``dtype`` blobs with a checksum per row.

A disk store that fails a check (unreadable SQLite, wrong vector length, checksum mismatch, foreign
schema) is moved aside to ``<file>.corrupt-<UTC time>`` (a store of an older schema to
``<file>.outdated-<UTC time>``) with a warning naming it, and rebuilt from the encoder; any other SQLite
error is raised with the file's path.

Every entry remembers whether its input was longer than the encoder reads (cut at ``max_seq_length``):
``stats()["truncated"]`` counts the distinct cut nodes served, and the first one is logged as a warning.

Fresh vectors are rounded through ``dtype`` before use, so a score is bit-identical whether its
node came from the encoder, memory or disk (refinement compares child >= parent: a 1e-3 float16
wobble could flip a decision between a cold and a warm run).

With a late-chunking encoder (``encoder.node_pooling=late``: its fingerprint says ``nodes=late``, so such
vectors have their own store) a miss encodes the node's whole item once and stores every node of that tree.

Online compression is then lookup + dot product; ``precompute`` fills the disk tier for a corpus.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from canopy_lit.encoders.late import is_late, late_embed_trees
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.scoring.node_keys import fingerprint_slug, item_digest, row_checksum
from canopy_lit.types import Item, Tree

log = logging.getLogger(__name__)

Key = tuple[str, str, int, int]  # (item id, item digest, start, end) within one fingerprint

SCHEMA = "3"  # 2: per-row checksum column ``sum``; 3: item content digest and truncation flag per row
_CORRUPT_CODES = {"SQLITE_CORRUPT", "SQLITE_NOTADB"}


class CorruptNodeCache(Exception):
    """A node-cache file that fails a check; the message names the file and the check."""


class OutdatedNodeCache(CorruptNodeCache):
    """A node-cache file of an older schema: intact, but keyed in a way this version cannot trust."""


def _is_corruption(err: sqlite3.Error) -> bool:
    """SQLite says the file is damaged or not a database (not: locked, disk full, ...)."""
    return getattr(err, "sqlite_errorname", "") in _CORRUPT_CODES or type(err) is sqlite3.DatabaseError


class NodeEmbeddingCache:
    """Memory-LRU + on-disk cache of node embeddings for one encoder.

    Args:
        encoder: a ``NodeEncoder`` (``encode_nodes``, ``fingerprint``, ``dim``).
        hierarchy: renders node inputs (``Hierarchy.node_input``); default B = 2 builders.
        cache_dir: folder of the per-fingerprint SQLite stores; None = memory only.
        capacity: vectors kept in memory (LRU); 0 disables the memory tier.
        batch_size: encoder batch size for misses.
        salt: extra key material for anything else that changes node inputs without changing the
            encoder or the hierarchy (the renderer fingerprint is already part of the key).
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
        self._mem: OrderedDict[tuple[str, str, str, int, int], tuple[np.ndarray, bool]] = OrderedDict()
        self.hits = self.disk_hits = self.misses = 0
        self._cut: set[Key] = set()  # served nodes whose input was truncated
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._db: sqlite3.Connection | None = None
        self._db_fp: str | None = None
        self._db_path: Path | None = None
        self._db_inode: int | None = None

    # ------------------------------------------------------------------ keys and stores
    @property
    def fingerprint(self) -> str:
        """Encoder + renderer fingerprint, plus the salt; read live so a new adapter is a new key."""
        parts = [str(self.encoder.fingerprint), f"render={self.hierarchy.fingerprint}"]
        # Encoder settings that change what reaches the model (text cut, frames kept per node).
        for attr in ("max_seq_length", "max_frames_per_node"):
            value = getattr(self.encoder, attr, None)
            if value is not None:
                parts.append(f"{attr}={value}")
        if self.salt:
            parts.append(self.salt)
        if self.dtype != np.float32:
            parts.append(self.dtype.name)
        return "|".join(parts)

    def path_for(self, fp: str) -> Path | None:
        """The SQLite file of fingerprint ``fp`` (None without a ``cache_dir``)."""
        return None if self.cache_dir is None else self.cache_dir / f"nodes-{fingerprint_slug(fp)}.sqlite"

    def _open(self, path: Path, fp: str) -> sqlite3.Connection:
        """Open (or create) the store of ``fp``; raises ``CorruptNodeCache`` or ``sqlite3.Error``."""
        # Questions run in worker threads (harness concurrency, round-synchronous loop): the connection is
        # opened in whichever thread first needs it and used from the others (SQLite serialises calls).
        db = sqlite3.connect(str(path), timeout=60, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            if "schema" in meta and meta["schema"].isdigit() and int(meta["schema"]) < int(SCHEMA):
                raise OutdatedNodeCache(
                    f"node cache {path}: schema {meta['schema']} of an older canopy-lit (its keys hold no item "
                    f"content digest), this version reads schema {SCHEMA}"
                )
            db.execute(
                "CREATE TABLE IF NOT EXISTS nodes (item TEXT, digest TEXT, start INTEGER, end_ INTEGER, vec BLOB,"
                " sum BLOB, cut INTEGER, PRIMARY KEY (item, digest, start, end_)) WITHOUT ROWID"
            )
            if "fingerprint" not in meta:
                with db:
                    db.executemany(
                        "INSERT OR IGNORE INTO meta VALUES (?, ?)",
                        [("fingerprint", fp), ("dim", str(self.encoder.dim)), ("schema", SCHEMA)],
                    )
                meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            if meta["fingerprint"] != fp:  # an 80-bit slug collision: refuse rather than serve wrong vectors
                raise RuntimeError(f"node cache {path} belongs to fingerprint {meta['fingerprint']!r}, not {fp!r}")
            if meta.get("schema") != SCHEMA:
                raise CorruptNodeCache(f"node cache {path}: schema {meta.get('schema')!r}, expected {SCHEMA!r}")
            if meta.get("dim") != str(self.encoder.dim):
                raise CorruptNodeCache(
                    f"node cache {path}: stores dim {meta.get('dim')!r}, the encoder has {self.encoder.dim}"
                )
        except BaseException:
            db.close()
            raise
        return db

    def _conn(self, fp: str) -> sqlite3.Connection | None:
        path = self.path_for(fp)
        if path is None:
            return None
        if self._db is not None and self._db_fp == fp:
            return self._db
        self.close()
        path.parent.mkdir(parents=True, exist_ok=True)
        for attempt in (0, 1):
            try:
                db = self._open(path, fp)
                break
            except (CorruptNodeCache, sqlite3.DatabaseError) as err:
                if isinstance(err, sqlite3.DatabaseError) and not _is_corruption(err):
                    raise RuntimeError(f"node cache {path}: {err}") from err
                if attempt:
                    raise RuntimeError(f"node cache {path}: still unusable after moving it aside: {err}") from err
                self._move_aside(path, err, inode=_inode(path))
        self._db, self._db_fp, self._db_path, self._db_inode = db, fp, path, _inode(path)
        return db

    def _move_aside(self, path: Path, reason: BaseException, inode: int | None) -> None:
        """Rename a damaged store (and its WAL files) to ``<file>.corrupt-<time>``; it is rebuilt on demand.

        ``inode`` is the file this process found damaged: when the path now holds another file
        (a sibling process already moved it aside and started afresh), that file is left alone.
        """
        if inode is not None and _inode(path) != inode:
            log.warning("node cache %s was already replaced by another process; reopening it", path)
            return
        outdated = isinstance(reason, OutdatedNodeCache)
        label = "outdated" if outdated else "corrupt"
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target = path.with_name(f"{path.name}.{label}-{stamp}")
        n = 1
        while target.exists():
            target = path.with_name(f"{path.name}.{label}-{stamp}-{n}")
            n += 1
        for suffix in ("", "-wal", "-shm"):
            src = Path(f"{path}{suffix}")
            if src.exists():
                os.replace(src, Path(f"{target}{suffix}"))
        log.warning(
            "node cache %s is %s (%s): moved it aside to %s (safe to delete); its nodes will be re-encoded",
            path,
            label,
            reason,
            target,
        )

    def _recover(self, err: BaseException) -> None:
        """Move the open store aside after ``err`` and forget the connection (the next call rebuilds it)."""
        path, inode = self._db_path, self._db_inode
        self.close()
        assert path is not None
        self._move_aside(path, err, inode)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
        self._db = self._db_fp = self._db_path = self._db_inode = None

    def __len__(self) -> int:
        """Entries in the memory tier."""
        return len(self._mem)

    def stats(self) -> dict[str, int]:
        """Lookups by tier, entries in memory, and ``truncated``: distinct nodes served whose input was
        longer than the encoder's ``max_seq_length`` (their vectors read only the first tokens)."""
        return {
            "hits": self.hits,
            "disk_hits": self.disk_hits,
            "misses": self.misses,
            "memory": len(self._mem),
            "truncated": len(self._cut),
        }

    def _note_cut(self, key: Key) -> None:
        if key in self._cut:
            return
        if not self._cut:  # once per cache, i.e. per run: the count goes to the metrics
            log.warning(
                "the node of item %r over leaves [%d, %d) is longer than the encoder reads (max_seq_length=%s "
                "tokens) and was cut; every such node is counted in the node cache's 'truncated' metric",
                key[0], key[2], key[3], getattr(self.encoder, "max_seq_length", "?"),
            )  # fmt: skip
        self._cut.add(key)

    # ------------------------------------------------------------------ tiers
    def _mem_get(self, fp: str, key: Key) -> tuple[np.ndarray, bool] | None:
        k = (fp, *key)
        v = self._mem.get(k)
        if v is not None:
            self._mem.move_to_end(k)
        return v

    def _mem_put(self, fp: str, key: Key, entry: tuple[np.ndarray, bool]) -> None:
        if self.capacity <= 0:
            return
        k = (fp, *key)
        self._mem[k] = entry
        self._mem.move_to_end(k)
        while len(self._mem) > self.capacity:
            self._mem.popitem(last=False)

    def _disk_get(self, fp: str, keys: Sequence[Key]) -> dict[Key, tuple[np.ndarray, bool]]:
        """Verified vectors of ``keys`` found on disk; a damaged store is moved aside and yields none."""
        if self.cache_dir is None or not keys:
            return {}
        try:
            return self._read(fp, keys)
        except CorruptNodeCache as err:
            self._recover(err)
        except sqlite3.DatabaseError as err:
            if not _is_corruption(err):
                raise RuntimeError(f"node cache {self._db_path or self.path_for(fp)}: {err}") from err
            self._recover(err)
        return {}

    def _read(self, fp: str, keys: Sequence[Key]) -> dict[Key, tuple[np.ndarray, bool]]:
        db = self._conn(fp)
        assert db is not None
        nbytes = int(self.encoder.dim) * self.dtype.itemsize
        out: dict[Key, tuple[np.ndarray, bool]] = {}
        # Group by item: one indexed range query per item instead of one query per node.
        wanted: dict[tuple[str, str], set[tuple[int, int]]] = {}
        for item, digest, s, e in keys:
            wanted.setdefault((item, digest), set()).add((s, e))
        for (item, digest), ranges in wanted.items():
            for s, e, blob, checksum, cut in db.execute(
                "SELECT start, end_, vec, sum, cut FROM nodes WHERE item = ? AND digest = ?", (item, digest)
            ):
                if (s, e) not in ranges:
                    continue
                where = f"node cache {self._db_path}: item {item!r} leaves [{s}, {e})"
                if not isinstance(blob, bytes) or len(blob) != nbytes:
                    size = len(blob) if isinstance(blob, bytes) else type(blob).__name__
                    raise CorruptNodeCache(f"{where}: vector of {size} bytes, expected {nbytes}")
                if checksum != row_checksum(item, digest, s, e, bool(cut), blob):
                    raise CorruptNodeCache(f"{where}: checksum mismatch")
                out[(item, digest, s, e)] = (np.frombuffer(blob, dtype=self.dtype).astype(np.float32), bool(cut))
        return out

    def _disk_put(self, fp: str, entries: dict[Key, tuple[np.ndarray, bool]]) -> None:
        if self.cache_dir is None or not entries:
            return
        rows = []
        for (i, d, s, e), (v, cut) in entries.items():
            blob = v.astype(self.dtype).tobytes()
            rows.append((i, d, s, e, blob, row_checksum(i, d, s, e, cut, blob), int(cut)))
        for attempt in (0, 1):
            db = self._conn(fp)
            assert db is not None
            try:
                with db:
                    db.executemany("INSERT OR REPLACE INTO nodes VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
                return
            except sqlite3.DatabaseError as err:
                if attempt or not _is_corruption(err):
                    raise RuntimeError(f"node cache {self._db_path}: {err}") from err
                self._recover(err)

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
        found: dict[Key, tuple[np.ndarray, bool]] = {}
        need_disk: list[Key] = []
        digests: dict[int, str] = {}  # id(item) -> content digest, once per item per call
        for t, ids in zip(trees, ids_per_tree, strict=True):
            if id(t.item) not in digests:
                digests[id(t.item)] = item_digest(t.item)
            keys = [(t.item.id, digests[id(t.item)], int(t.starts[i]), int(t.ends[i])) for i in ids]
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
            if is_late(self.encoder):
                # One forward per item with a miss; every node of its tree comes out of it, so all are stored.
                owners: dict[tuple[str, str], Tree] = {}
                for k in misses:
                    owners.setdefault((k[0], k[1]), where[k][0])
                late_trees = list(owners.values())
                misses = [
                    (t.item.id, d, int(a), int(b))
                    for (_, d), t in zip(owners, late_trees, strict=True)
                    for a, b in zip(t.starts, t.ends, strict=True)
                ]
                misses = list(dict.fromkeys(misses))
                per_tree = late_embed_trees(self.encoder, self.hierarchy, late_trees)
                rows = {
                    (t.item.id, d, int(a), int(b)): v
                    for (_, d), t, e in zip(owners, late_trees, per_tree, strict=True)
                    for a, b, v in zip(t.starts, t.ends, e, strict=True)
                }
                emb = np.stack([rows[k] for k in misses])
                cuts = [False] * len(misses)  # long items are read in overlapping windows, never cut
            else:
                inputs = [self.hierarchy.node_input(*where[k]) for k in misses]
                emb = self.encoder.encode_nodes(inputs, batch_size=self.batch_size)
                emb = np.asarray(emb.detach().cpu().float().numpy() if hasattr(emb, "detach") else emb, np.float32)
                truncated = getattr(self.encoder, "truncated", None)  # encoders that cannot tell: never cut
                cuts = truncated(inputs) if truncated is not None else [False] * len(misses)
            if emb.shape != (len(misses), self.encoder.dim):  # never store what could not be read back
                raise ValueError(
                    f"encoder {self.encoder.fingerprint} returned {emb.shape} for {len(misses)} nodes, "
                    f"expected dim {self.encoder.dim}"
                )
            emb = emb.astype(self.dtype).astype(np.float32)
            new = {key: (v, bool(c)) for key, v, c in zip(misses, emb, cuts, strict=True)}
            self._disk_put(fp, new)
            for key, entry in new.items():
                found[key] = entry
                self._mem_put(fp, key, entry)
        for key, (_, cut) in found.items():
            if cut:
                self._note_cut(key)
        dim = self.encoder.dim
        return [
            np.stack([found[k][0] for k in keys]) if keys else np.zeros((0, dim), np.float32)
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


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None
