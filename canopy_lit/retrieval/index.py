"""FAISS inner-product index over L2-normalised embeddings, with modality partitions and exclusion.

Index kinds (``kind``):

- ``flat_sq_fp16`` (default, the paper's choice): ``IndexScalarQuantizer`` with fp16 codes and
  ``METRIC_INNER_PRODUCT``: exact search, half the memory of ``flat`` (2·D bytes per vector).
- ``flat``: ``IndexFlatIP``, fp32 (4·D bytes per vector); the reference for agreement checks.
- ``ivfpq``: ``IndexIVFPQ`` (``nlist`` cells, ``pq_m`` sub-quantizers of ``pq_nbits``), approximate;
  for corpora whose flat index does not fit in memory. Partitions too small to train fall back to
  ``flat_sq_fp16`` (exact, and small anyway).

Partitions (``groups``): vectors can be split into named partitions (one per modality), each its own
FAISS index. Searching all partitions and merging by score is exact for exact indexes and costs no
extra memory, and a modality router can restrict a search to some partitions.

Streaming build (``FaissIndex.build_from_shards``, what ``build_retriever`` uses): vectors are read from the
embedding shards on disk one block at a time (memory-mapped), normalised and encoded straight into a code
buffer sized once, so the (N, D) float32 matrix never exists in RAM and a flat index costs its own bytes
plus a constant; IVF kinds are trained on a sample first. Item ids go to disk (``IdArray``: memory-mapped
utf-8 bytes + offsets), not into Python objects. ``shard_vectors`` splits each partition into several
FAISS indexes whose top-k are merged exactly by score.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

KINDS = ("flat_sq_fp16", "flat", "ivfpq")
ALL = "all"  # the single partition of an unpartitioned index


def _faiss():
    import faiss

    return faiss


def normalize(x: np.ndarray) -> np.ndarray:
    """Row-wise L2 normalisation as float32 (copy); zero rows stay zero."""
    x = np.ascontiguousarray(x, dtype=np.float32).copy()
    if x.ndim != 2:
        raise ValueError(f"expected a (N, D) matrix, got shape {x.shape}")
    _faiss().normalize_L2(x)
    return x


@dataclass
class SearchResult:
    """Top-k of a batch of queries: ``ids[q]`` and ``scores[q]`` (best first, may be shorter than k)."""

    ids: list[list[str]]
    scores: list[list[float]]


def _new_index(kind: str, dim: int, n: int, nlist: int, pq_m: int, pq_nbits: int):
    faiss = _faiss()
    ip = faiss.METRIC_INNER_PRODUCT
    if kind == "flat":
        return faiss.IndexFlatIP(dim)
    if kind == "flat_sq_fp16":
        return faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_fp16, ip)
    if kind == "ivfpq":
        # FAISS wants ~39 training points per centroid and 2**nbits per PQ code book.
        cells = min(nlist, max(1, n // 39))
        if cells < 4 or n < 2**pq_nbits * 4:
            log.info("ivfpq partition of %d vectors is too small to train: using flat_sq_fp16", n)
            return _new_index("flat_sq_fp16", dim, n, nlist, pq_m, pq_nbits)
        if dim % pq_m:
            raise ValueError(f"ivfpq: pq_m={pq_m} must divide the embedding dim {dim}")
        quantizer = faiss.IndexFlatIP(dim)
        return faiss.IndexIVFPQ(quantizer, dim, cells, pq_m, pq_nbits, ip)
    raise ValueError(f"unknown index kind {kind!r}; choose one of {KINDS}")


def _distributed() -> tuple[int, Callable[[], None] | None]:
    """(rank, barrier) of an initialised torch.distributed process group, else (0, None); never imports torch."""
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return 0, None
    return int(dist.get_rank()), dist.barrier


def _partitions(groups: Sequence[str] | np.ndarray | None, n: int) -> list[tuple[str, np.ndarray]]:
    """(name, rows) per partition, names sorted, rows ascending; one ``ALL`` partition without groups."""
    if groups is None:
        return [(ALL, np.arange(n, dtype=np.int64))]
    if len(groups) != n:
        raise ValueError(f"groups has {len(groups)} entries for {n} ids")
    g = np.asarray([str(x) for x in groups], dtype=object)
    return [(name, np.flatnonzero(g == name)) for name in sorted(set(g.tolist()))]


def _fill(idx: Any, fetch: Callable[[Any], np.ndarray], lo: int, hi: int, block: int) -> None:
    """Add the normalised vectors of positions [lo, hi) to ``idx``, ``block`` rows at a time.

    A flat-codes index (flat, flat_sq_fp16) gets its code buffer sized once and each block's codes written
    in place: ``add`` would grow a std::vector by doubling, which briefly holds two copies of the index.
    """
    faiss = _faiss()
    m = hi - lo
    if m <= 0:
        return
    if isinstance(idx, faiss.IndexFlatCodes) and idx.ntotal == 0:
        cs = int(idx.code_size)
        idx.codes.resize(m * cs)
        buf = faiss.rev_swig_ptr(idx.codes.data(), m * cs)
        for b in range(lo, hi, block):
            e = min(hi, b + block)
            buf[(b - lo) * cs : (e - lo) * cs] = idx.sa_encode(normalize(fetch(np.arange(b, e)))).reshape(-1)
        idx.ntotal = m
        return
    for b in range(lo, hi, block):
        idx.add(normalize(fetch(np.arange(b, min(hi, b + block)))))


# ---------------------------------------------------------------------- ids on disk
def _ids_files(stem: str | Path) -> tuple[Path, Path]:
    return Path(f"{stem}.ids.bin"), Path(f"{stem}.ids.off.npy")


class IdArray:
    """A read-only sequence of N string ids kept on disk: utf-8 bytes back to back (``<stem>.ids.bin``) and
    N + 1 int64 start offsets (``<stem>.ids.off.npy``), both memory-mapped. Ids cost no Python objects until
    looked up, so the index's id map does not grow the process by ~70 B per item (33M items: ~2.5 GB).

    ``ids[i]`` is one id; ``ids[labels]`` (an int array) is an object array of the same shape.
    """

    def __init__(self, stem: str | Path) -> None:
        blob, off = _ids_files(stem)
        self.stem = Path(stem)
        self._off = np.load(off, mmap_mode="r")
        # np.memmap refuses an empty file (a partition can hold only empty-string ids in theory)
        self._blob = (
            np.memmap(blob, dtype=np.uint8, mode="r") if blob.stat().st_size else np.zeros(0, np.uint8)
        )
        if self._off.ndim != 1 or len(self._off) < 1 or int(self._off[-1]) != len(self._blob):
            raise ValueError(f"{off}: offsets do not match {blob} ({len(self._blob)} bytes)")

    @classmethod
    def packed(cls, blob: np.ndarray, off: np.ndarray, name: str | Path) -> IdArray:
        """Ids held in memory in the same layout (``blob``: (B,) uint8, the utf-8 ids back to back; ``off``:
        (N + 1,) int64 starts): about len(id) + 8 bytes per id, against ~75 for a list of str. ``name`` is
        what messages call it (e.g. the corpus file)."""
        if off.ndim != 1 or len(off) < 1 or int(off[-1]) != len(blob):
            raise ValueError(f"{name}: id offsets do not match the {len(blob)} id bytes")
        out = cls.__new__(cls)
        out.stem, out._blob, out._off = Path(name), blob, off
        return out

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence of the same ids in the same order (a list of str, another ``IdArray``)."""
        if other is self:
            return True
        if isinstance(other, (str, bytes)) or not isinstance(other, (Sequence, np.ndarray, IdArray)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # equal to lists, so unhashable like them

    def __len__(self) -> int:
        return len(self._off) - 1

    def _one(self, i: int) -> str:
        return self._blob[int(self._off[i]) : int(self._off[i + 1])].tobytes().decode("utf-8")

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, np.integer)):
            i = int(key) + (len(self) if key < 0 else 0)
            if not 0 <= i < len(self):
                raise IndexError(f"id row {key} out of range for {len(self)} ids ({self.stem})")
            return self._one(i)
        rows = np.arange(len(self))[key] if isinstance(key, slice) else np.asarray(key, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= len(self)):
            raise IndexError(f"id rows out of range for {len(self)} ids ({self.stem})")
        out = np.empty(rows.shape, dtype=object)
        flat = out.reshape(-1)
        for j, r in enumerate(rows.reshape(-1).tolist()):
            flat[j] = self._one(r)
        return out

    def __iter__(self) -> Iterator[str]:
        step = 1 << 16
        for lo in range(0, len(self), step):
            off = np.asarray(self._off[lo : min(len(self), lo + step) + 1])
            chunk = self._blob[int(off[0]) : int(off[-1])].tobytes()
            base = int(off[0])
            for a, b in zip(off[:-1].tolist(), off[1:].tolist(), strict=True):
                yield chunk[a - base : b - base].decode("utf-8")

    def __repr__(self) -> str:
        return f"IdArray({self.stem}, {len(self)} ids)"


class _IdWriter:
    """Writes exactly ``n`` ids, a block at a time, as an ``IdArray`` (offsets pre-sized: no growing list)."""

    def __init__(self, stem: str | Path, n: int) -> None:
        self.stem, self.n, self.done = Path(stem), n, 0
        blob, off = _ids_files(stem)
        self._fh = blob.open("wb")
        self._off = np.lib.format.open_memmap(off, mode="w+", dtype=np.int64, shape=(n + 1,))
        self._off[0] = 0
        self._pos = 0

    def add(self, ids: Iterable[str]) -> None:
        data = [str(i).encode("utf-8") for i in ids]
        if self.done + len(data) > self.n:
            raise ValueError(f"{self.stem}: more than the {self.n} ids announced")
        lens = np.fromiter(map(len, data), dtype=np.int64, count=len(data))
        self._off[self.done + 1 : self.done + 1 + len(data)] = self._pos + np.cumsum(lens)
        self._fh.write(b"".join(data))
        self._pos += int(lens.sum())
        self.done += len(data)

    def close(self) -> IdArray:
        self._fh.close()
        if self.done != self.n:
            raise ValueError(f"{self.stem}: {self.done} ids written, {self.n} announced")
        self._off.flush()
        del self._off
        return IdArray(self.stem)


def write_ids(stem: str | Path, ids: Sequence[str] | np.ndarray) -> IdArray:
    """Save ``ids`` as an ``IdArray`` at ``stem``."""
    w = _IdWriter(stem, len(ids))
    for lo in range(0, len(ids), 1 << 16):
        w.add(ids[lo : lo + (1 << 16)])
    return w.close()


class IdMap:
    """id -> row over a sequence of ids, without a dict: their (in-process) hashes sorted in numpy arrays.

    16 B per id (hash + row) instead of a dict's ~100 B of Python objects; a lookup is a binary search plus
    one comparison with ``ids[row]``, so hash collisions never give a wrong row.

    Args:
        ids: the ids, row i = ``ids[i]``; kept (not copied) to check candidates.

    Attributes:
        duplicates: ids that occur more than once (empty for a valid corpus).
    """

    def __init__(self, ids: Sequence[str]) -> None:
        self.ids = ids
        h = np.fromiter((hash(i) for i in ids), dtype=np.int64, count=len(ids))
        order = np.argsort(h, kind="stable")
        self._h, self._rows = h[order], order.astype(np.int64)
        self.duplicates: list[str] = []
        same = np.flatnonzero(self._h[1:] == self._h[:-1])  # runs of equal hashes: rare, checked by value
        if len(same):
            runs: dict[int, set[int]] = {}
            for j in same.tolist():
                runs.setdefault(int(self._h[j]), set()).update((int(self._rows[j]), int(self._rows[j + 1])))
            for rows in runs.values():
                seen: set[str] = set()
                for r in sorted(rows):
                    if ids[r] in seen:
                        self.duplicates.append(ids[r])
                    seen.add(ids[r])

    def __len__(self) -> int:
        return len(self._rows)

    def rows(self, keys: Sequence[str]) -> np.ndarray:
        """Row of each key, -1 where absent: (len(keys),) int64 (the first row of a duplicated id)."""
        keys = list(keys)
        n = len(self._h)
        out = np.full(len(keys), -1, dtype=np.int64)
        if not keys or not n:
            return out
        h = np.fromiter((hash(k) for k in keys), dtype=np.int64, count=len(keys))
        pos = np.searchsorted(self._h, h)
        cand = np.minimum(pos, n - 1)
        hit = self._h[cand] == h
        rows = self._rows[cand]
        ids = self.ids
        for j in np.flatnonzero(hit).tolist():
            r = int(rows[j])
            if ids[r] == keys[j]:
                out[j] = r
                continue
            p = int(pos[j]) + 1  # a collision: walk the run of equal hashes
            while p < n and self._h[p] == h[j]:
                if ids[int(self._rows[p])] == keys[j]:
                    out[j] = int(self._rows[p])
                    break
                p += 1
        return out

    def row(self, key: str) -> int | None:
        """Row of one id, None if absent (a scalar binary search: a few µs)."""
        h, n = hash(key), len(self._h)
        p = int(np.searchsorted(self._h, h))
        while p < n and int(self._h[p]) == h:
            r = int(self._rows[p])
            if self.ids[r] == key:
                return r
            p += 1
        return None


# ---------------------------------------------------------------------- embedding shards on disk
def embedding_shards(folder: str | Path) -> list[Path]:
    """The finished ``shard-r<rank>-<seq>.npy`` files of an ``encode_corpus`` folder, in name order."""
    return sorted(p for p in Path(folder).glob("shard-r*-*.npy") if not p.name.endswith(".tmp.npy"))


def shard_ids_path(npy: Path) -> Path:
    return npy.with_suffix("").with_suffix(".ids.json")


class _ShardVectors:
    """Rows of a corpus gathered from memory-mapped embedding shards (a few open at a time)."""

    def __init__(self, files: list[Path], shard: np.ndarray, pos: np.ndarray, open_max: int = 16) -> None:
        self.files, self.shard, self.pos, self.open_max = files, shard, pos, open_max
        self._open: OrderedDict[int, np.ndarray] = OrderedDict()

    def _mm(self, s: int) -> np.ndarray:
        if s in self._open:
            self._open.move_to_end(s)
            return self._open[s]
        while len(self._open) >= self.open_max:  # unmapping drops the file pages from this process
            self._open.popitem(last=False)
        self._open[s] = np.load(self.files[s], mmap_mode="r")
        return self._open[s]

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """(len(rows), D) float32 vectors of corpus rows ``rows`` (a new array)."""
        s, p = self.shard[rows], self.pos[rows]
        dim = self._mm(int(s[0])).shape[1] if len(rows) else 0
        out = np.empty((len(rows), dim), dtype=np.float32)
        for shard in np.unique(s).tolist():
            sel = np.flatnonzero(s == shard)
            out[sel] = self._mm(shard)[p[sel]]
        return out

    def close(self) -> None:
        self._open.clear()


def _locate(folder: Path, id_rows: Callable[[Sequence[str]], np.ndarray], n: int, ids: Sequence[str]):
    """Where each of the ``n`` corpus rows lives in the shards of ``folder``: (files, shard, position, dim).

    The first occurrence wins (DDP pads its last batches with repeats), ids outside the corpus are ignored,
    and a corpus row without an embedding raises ``KeyError`` naming the folder.
    """
    files = embedding_shards(folder)
    shard = np.full(n, -1, dtype=np.int32)
    pos = np.zeros(n, dtype=np.int32)
    dim = None
    for s, f in enumerate(files):
        shard_ids = json.loads(shard_ids_path(f).read_text())
        shape = np.load(f, mmap_mode="r").shape
        if len(shape) != 2 or shape[0] != len(shard_ids):
            raise ValueError(f"{f}: {shape} vectors for {len(shard_ids)} ids in {shard_ids_path(f).name}")
        if dim is None:
            dim = shape[1]
        elif shape[1] != dim:
            raise ValueError(f"{f}: dimension {shape[1]}, the other shards have {dim}")
        rows = id_rows(shard_ids)
        at = np.flatnonzero(rows >= 0)
        uniq, first = np.unique(rows[at], return_index=True)
        new = shard[uniq] < 0
        shard[uniq[new]] = s
        pos[uniq[new]] = at[first[new]]
    missing = np.flatnonzero(shard < 0)
    if len(missing):
        raise KeyError(
            f"{folder}: {len(missing)} ids have no embedding, e.g. {[ids[i] for i in missing[:3]]}"
        )
    return files, shard, pos, dim


class _Shards:
    """Several FAISS indexes holding consecutive label ranges of one partition, searched as one: the
    per-shard top-k are merged by score, which is exact for exact indexes (and for IVF shards sharing one
    trained quantizer, what one IVF index over all of them would return)."""

    def __init__(self, indexes: Sequence[Any]) -> None:
        self.indexes = list(indexes)
        sizes = [int(i.ntotal) for i in self.indexes]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self.ntotal = int(sum(sizes))

    def search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        all_s, all_l = [], []
        for idx, off in zip(self.indexes, self.offsets.tolist(), strict=True):
            m = min(k, int(idx.ntotal))
            if m == 0:
                continue
            s, lab = idx.search(q, m)
            ok = lab >= 0
            all_s.append(np.where(ok, s, -np.inf).astype(np.float32))
            all_l.append(np.where(ok, lab + off, -1))
        s, lab = np.concatenate(all_s, axis=1), np.concatenate(all_l, axis=1)
        # equal scores: the higher label first, as one FAISS flat index orders them
        order = np.lexsort((-lab, -s), axis=1)[:, :k]
        return np.take_along_axis(s, order, 1), np.take_along_axis(lab, order, 1)


class FaissIndex:
    """Inner-product search over normalised vectors, keyed by string item ids.

    Args:
        dim: embedding dimension D.
        kind: one of ``KINDS`` (see module docstring).
        nlist: IVF-PQ parameters (ignored by the flat kinds).
        pq_m: see ``nlist``.
        pq_nbits: see ``nlist``.
        nprobe: see ``nlist``.
        gpu: move partitions to all visible GPUs (sharded) when faiss-gpu is installed; else stay on CPU.
        search_batch: queries per FAISS call (bounds the (Q, fetch) result buffers).
        shard_vectors: at most this many vectors per FAISS index; a larger partition becomes several
            indexes searched as one (exact merge). None: one index per partition.

    Example:
        >>> index = FaissIndex.build(ids, vectors, groups=modalities)   # vectors: (N, D)
        >>> res = index.search(queries, k=10, exclude={"nq:123"})        # queries: (Q, D)
        >>> index = FaissIndex.build_from_shards("emb-dir", corpus.ids, "index-dir", groups=corpus.modalities)
    """

    def __init__(
        self,
        dim: int,
        kind: str = "flat_sq_fp16",
        nlist: int = 4096,
        pq_m: int = 64,
        pq_nbits: int = 8,
        nprobe: int = 64,
        gpu: bool = False,
        search_batch: int = 1024,
        shard_vectors: int | None = None,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown index kind {kind!r}; choose one of {KINDS}")
        if shard_vectors is not None and int(shard_vectors) < 1:
            raise ValueError(
                f"shard_vectors must be a positive number of vectors or None, got {shard_vectors!r}"
            )
        self.dim, self.kind = dim, kind
        self.nlist, self.pq_m, self.pq_nbits, self.nprobe = nlist, pq_m, pq_nbits, nprobe
        self.gpu, self.search_batch = gpu, search_batch
        self.shard_vectors = None if shard_vectors is None else int(shard_vectors)
        self.parts: dict[str, Any] = {}  # group -> faiss index (or _Shards of several)
        # group -> (n,) item ids (an array, or an IdArray on disk); faiss label = position
        self.part_ids: dict[str, Any] = {}

    # ------------------------------------------------------------------ build
    @classmethod
    def build(
        cls,
        ids: Sequence[str],
        vectors: np.ndarray,
        groups: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> FaissIndex:
        """Index ``vectors`` (N, D) under ``ids``; ``groups[i]`` names the partition of row i (None = one).

        Everything in memory: for a corpus on disk, ``build_from_shards`` reads the vectors block by block.
        """
        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or len(ids) != len(vectors):
            raise ValueError(f"need one id per row: {len(ids)} ids for vectors of shape {vectors.shape}")
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate ids in the index input")
        index = cls(vectors.shape[1], **kwargs)
        ids_arr = np.asarray(ids, dtype=object)
        for name, rows in _partitions(groups, len(ids)):
            index._build_part(name, len(rows), lambda r, rows=rows: vectors[rows[r]])
            index.part_ids[name] = ids_arr[rows]
        return index

    @classmethod
    def build_from_shards(
        cls,
        shards_dir: str | Path,
        ids: Sequence[str],
        path: str | Path,
        groups: Sequence[str] | np.ndarray | None = None,
        id_rows: Callable[[Sequence[str]], np.ndarray] | None = None,
        block_bytes: int = 64 << 20,
        train_size: int | None = None,
        seed: int = 0,
        **kwargs: Any,
    ) -> FaissIndex:
        """Index the embedding shards of ``shards_dir`` (``encode_corpus``'s folder) and save it at ``path``.

        Streams: each partition's vectors are gathered from the memory-mapped shards ``block_bytes`` of
        float32 at a time, in ``ids`` order, normalised and added; the flat kinds write their codes into a
        buffer sized once (no growing copy). Peak memory is the index plus a few blocks plus ~32 B per id of
        bookkeeping (besides ``ids`` itself). The result equals ``build(ids, vectors, groups)`` on the same
        vectors: same ids, same order, same codes.

        Args:
            shards_dir: folder of ``shard-r*-*.npy`` + ``.ids.json`` (extra ids there are ignored; repeats:
                the first wins).
            ids: the items to index, in order (e.g. ``CorpusStore.ids``); each needs an embedding.
            path: index folder to write (``load`` reads it); written under a temporary name and renamed, so
                a crash leaves no half index, and a folder another process finished first is loaded instead.
            groups: partition name of each row of ``ids`` (None = one partition).
            id_rows: ``ids`` -> row lookup (``CorpusStore.rows``); default builds an ``IdMap`` of ``ids``.
            block_bytes: float32 bytes gathered per step.
            train_size: vectors sampled to train an IVF partition (default 256 per centroid or code word,
                FAISS's own cap: a partition that small trains on all its vectors, in order).
            seed: sampling seed.
            **kwargs: ``FaissIndex`` options (kind, nlist, pq_m, nprobe, gpu, shard_vectors ...).

        Inside a DDP job (a multi-device ``encode_corpus`` ran before, the process group is up) rank 0
        builds and the other ranks wait for it and load the result: one copy of the index in the making,
        not one per rank.
        """
        rank, barrier = _distributed()
        if rank:
            barrier()
            keep = {k: v for k, v in kwargs.items() if k in ("nprobe", "search_batch")}
            return cls.load(path, gpu=bool(kwargs.get("gpu", False)), **keep)
        try:
            return cls._stream_build(
                shards_dir, ids, path, groups, id_rows, block_bytes, train_size, seed, **kwargs
            )
        finally:
            if barrier is not None:
                barrier()  # reached even when the build failed: the other ranks then fail to load, not hang

    @classmethod
    def _stream_build(
        cls,
        shards_dir: str | Path,
        ids: Sequence[str],
        path: str | Path,
        groups: Sequence[str] | np.ndarray | None,
        id_rows: Callable[[Sequence[str]], np.ndarray] | None,
        block_bytes: int,
        train_size: int | None,
        seed: int,
        **kwargs: Any,
    ) -> FaissIndex:
        path = Path(path)
        t0 = time.perf_counter()
        n = len(ids)
        if id_rows is None:
            idmap = IdMap(ids)
            if idmap.duplicates:
                raise ValueError(f"duplicate ids in the index input, e.g. {idmap.duplicates[:3]}")
            id_rows = idmap.rows
        files, shard, pos, dim = _locate(Path(shards_dir), id_rows, n, ids)
        if dim is None:
            raise ValueError(f"{shards_dir}: no finished embedding shards to index")
        index = cls(dim, **kwargs)
        gpu, index.gpu = index.gpu, False  # built and saved on CPU; moved to GPUs once complete
        source = _ShardVectors(files, shard, pos)
        block = max(1, block_bytes // (4 * dim))
        tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        try:
            for name, rows in _partitions(groups, n):
                index._build_part(
                    name, len(rows), lambda r, rows=rows: source.gather(rows[r]), block, train_size, seed
                )
                w = _IdWriter(tmp / name, len(rows))
                for lo in range(0, len(rows), block):
                    w.add([ids[r] for r in rows[lo : lo + block].tolist()])
                w.close()
            source.close()
            index._write(tmp, ids_written=True)
            if path.exists() and not (path / "meta.json").exists():
                shutil.rmtree(path)  # a folder left by an interrupted older build
            try:
                os.replace(tmp, path)
            except OSError:
                if not (path / "meta.json").exists():
                    raise
                shutil.rmtree(tmp)  # another process (a DDP rank) finished the same index first
                log.info("%s was built by another process meanwhile: loading it", path)
                return cls.load(path, gpu=gpu)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        for name in index.parts:
            index.part_ids[name] = IdArray(path / name)
        index.gpu = gpu
        if gpu:
            index.parts = {g: index._maybe_gpu(p) for g, p in index.parts.items()}
        log.info(
            "indexed %d vectors from %d shards in %.1f s (%s)", n, len(files), time.perf_counter() - t0, index
        )
        return index

    def _build_part(
        self,
        group: str,
        n: int,
        fetch: Callable[[Any], np.ndarray],
        block: int = 1 << 30,
        train_size: int | None = None,
        seed: int = 0,
    ) -> None:
        """One partition of ``n`` vectors; ``fetch(rows)`` returns the raw vectors of positions ``rows``."""
        faiss = _faiss()
        template = _new_index(self.kind, self.dim, n, self.nlist, self.pq_m, self.pq_nbits)
        if not template.is_trained:
            cap = train_size or 256 * max(int(getattr(template, "nlist", 1)), 2**self.pq_nbits)
            sample = (
                np.arange(n)
                if n <= cap
                else np.sort(np.random.default_rng(seed).choice(n, cap, replace=False))
            )
            template.train(normalize(fetch(sample)))
        size = self.shard_vectors or max(n, 1)
        bounds = [(lo, min(n, lo + size)) for lo in range(0, n, size)] or [(0, 0)]
        shards = []
        for lo, hi in bounds:
            idx = template if len(bounds) == 1 else faiss.clone_index(template)
            _fill(idx, fetch, lo, hi, block)
            self._set_nprobe(idx)
            shards.append(idx)
        part = shards[0] if len(shards) == 1 else _Shards(shards)
        self.parts[group] = self._maybe_gpu(part)

    def _set_nprobe(self, idx: Any) -> None:
        for one in idx.indexes if isinstance(idx, _Shards) else [idx]:
            if hasattr(one, "nprobe"):
                one.nprobe = min(self.nprobe, one.nlist)

    def _maybe_gpu(self, idx: Any) -> Any:
        """Shard a CPU index over all GPUs (lazy: only when asked and faiss-gpu is importable)."""
        if not self.gpu:
            return idx
        if isinstance(idx, _Shards):
            return _Shards([self._maybe_gpu(i) for i in idx.indexes])
        faiss = _faiss()
        if not hasattr(faiss, "index_cpu_to_all_gpus") or faiss.get_num_gpus() == 0:
            log.warning("index.gpu=true but faiss has no GPU support or sees no GPU: searching on CPU")
            return idx
        if isinstance(idx, faiss.IndexScalarQuantizer):
            # GPU FAISS has no flat SQ index; the equivalent is a flat IP index with fp16 storage.
            flat = faiss.IndexFlatIP(self.dim)
            flat.add(idx.reconstruct_n(0, idx.ntotal))
            idx = flat
        co = faiss.GpuMultipleClonerOptions()
        co.shard = True  # split vectors across GPUs instead of replicating them
        co.useFloat16 = True
        return faiss.index_cpu_to_all_gpus(idx, co=co)

    # ------------------------------------------------------------------ info
    @property
    def groups(self) -> list[str]:
        return list(self.parts)

    def __len__(self) -> int:
        return sum(len(v) for v in self.part_ids.values())

    def __repr__(self) -> str:
        sizes = ", ".join(f"{g}={len(i)}" for g, i in self.part_ids.items())
        return f"FaissIndex(kind={self.kind}, dim={self.dim}, {sizes})"

    # ------------------------------------------------------------------ search
    def search(
        self,
        queries: np.ndarray,
        k: int,
        exclude: Collection[str] | Sequence[Collection[str]] = (),
        groups: Iterable[str] | None = None,
    ) -> SearchResult:
        """Top-k ids and inner-product scores per query, skipping excluded ids.

        Args:
            queries: (Q, D) or (D,) query embeddings (normalised here).
            k: results wanted per query.
            exclude: ids never returned: one set for all queries, or one set per query.
            groups: partitions to search (None = all); unknown names raise.

        Returns:
            ``SearchResult``; a query gets fewer than k results only when the searched partitions hold
            fewer than k non-excluded items (or an IVF probe finds fewer).
        """
        q = np.asarray(queries, dtype=np.float32)
        if q.ndim == 1:
            q = q[None]
        if q.shape[1] != self.dim:
            raise ValueError(f"query dim {q.shape[1]} != index dim {self.dim}")
        q = normalize(q)
        names = self.groups if groups is None else list(dict.fromkeys(groups))
        for g in names:
            if g not in self.parts:
                raise KeyError(f"no index partition {g!r}; have {self.groups}")
        excl = self._per_query_exclude(exclude, len(q))
        if k <= 0:
            return SearchResult([[] for _ in q], [[] for _ in q])
        n_total = sum(len(self.part_ids[g]) for g in names)
        out_ids: list[list[str]] = []
        out_scores: list[list[float]] = []
        for lo in range(0, len(q), self.search_batch):
            qb = q[lo : lo + self.search_batch]
            eb = excl[lo : lo + self.search_batch]
            ids, scores = self._search_batch(qb, k, eb, names, n_total)
            out_ids += ids
            out_scores += scores
        return SearchResult(out_ids, out_scores)

    @staticmethod
    def _per_query_exclude(exclude: Any, n: int) -> list[frozenset[str]]:
        if isinstance(exclude, str):
            raise TypeError("exclude must be a collection of ids, not one string")
        if not exclude:
            return [frozenset()] * n
        items = list(exclude)
        if all(isinstance(e, str) for e in items):
            return [frozenset(items)] * n
        if len(items) != n:
            raise ValueError(f"exclude: {len(items)} per-query sets for {n} queries")
        return [frozenset(e) for e in items]

    def _search_batch(
        self, q: np.ndarray, k: int, excl: list[frozenset[str]], names: list[str], n_total: int
    ) -> tuple[list[list[str]], list[list[float]]]:
        # With exact search, at most |exclude| of the top k+|exclude| are excluded, so one fetch
        # usually suffices; approximate indexes (or -1 padding) may need the fetch to grow.
        fetch = min(n_total, k + max((len(e) for e in excl), default=0))
        if fetch == min(n_total, k):  # nothing excluded: no per-candidate filtering needed
            cand_s, cand_i = self._raw_topn(q, fetch, names)
            if not (cand_i == None).any():  # noqa: E711 (elementwise test on an object array)
                return cand_i.tolist(), cand_s.astype(np.float64).tolist()
        pending = list(range(len(q)))
        res_ids: list[list[str]] = [[] for _ in q]
        res_scores: list[list[float]] = [[] for _ in q]
        while pending:
            cand_s, cand_i = self._raw_topn(q[pending], fetch, names)  # (P, F) merged over partitions
            still = []
            for row, qi in enumerate(pending):
                ids, scores = [], []
                for s, i in zip(cand_s[row], cand_i[row], strict=True):
                    if i is None or i in excl[qi]:
                        continue
                    ids.append(i)
                    scores.append(float(s))
                    if len(ids) == k:
                        break
                res_ids[qi], res_scores[qi] = ids, scores
                if len(ids) < k and fetch < n_total:
                    still.append(qi)
            pending = still
            fetch = min(n_total, fetch * 2)
        return res_ids, res_scores

    def _raw_topn(self, q: np.ndarray, n: int, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Top-n over the partitions ``names``, merged by score: (Q, n) scores and (Q, n) ids (None = none)."""
        all_s, all_i = [], []
        for g in names:
            part_ids = self.part_ids[g]
            m = min(n, len(part_ids))
            if m == 0:
                continue
            s, lab = self.parts[g].search(q, m)
            ids = np.full(lab.shape, None, dtype=object)
            ok = lab >= 0
            ids[ok] = part_ids[lab[ok]]
            s = np.where(ok, s, -np.inf)
            all_s.append(s)
            all_i.append(ids)
        if not all_s:
            return np.zeros((len(q), 0), np.float32), np.zeros((len(q), 0), object)
        if len(all_s) == 1:
            return all_s[0], all_i[0]
        s = np.concatenate(all_s, axis=1)
        ids = np.concatenate(all_i, axis=1)
        top = min(n, s.shape[1])
        order = np.argsort(-s, axis=1, kind="stable")[:, :top]
        return np.take_along_axis(s, order, 1), np.take_along_axis(ids, order, 1)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> Path:
        """Write ``meta.json`` plus, per partition, its FAISS index file(s) and its ids (``IdArray``)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self._write(path)
        return path

    def _write(self, path: Path, ids_written: bool = False) -> None:
        faiss = _faiss()
        shards: dict[str, int] = {}
        for g, part in self.parts.items():
            indexes = part.indexes if isinstance(part, _Shards) else [part]
            shards[g] = len(indexes)
            for k, idx in enumerate(indexes):
                cpu = faiss.index_gpu_to_cpu(idx) if self.gpu and hasattr(faiss, "index_gpu_to_cpu") else idx
                faiss.write_index(cpu, str(path / (f"{g}.faiss" if len(indexes) == 1 else f"{g}.{k}.faiss")))
            if not ids_written:
                ids = self.part_ids[g]
                if not (isinstance(ids, IdArray) and ids.stem == path / g):
                    write_ids(path / g, ids if not isinstance(ids, IdArray) else list(ids))
        meta = {
            "dim": self.dim,
            "kind": self.kind,
            "groups": self.groups,
            "nlist": self.nlist,
            "pq_m": self.pq_m,
            "pq_nbits": self.pq_nbits,
            "nprobe": self.nprobe,
            "shard_vectors": self.shard_vectors,
            "shards": shards,
        }
        # meta.json last: its presence marks a complete index folder
        (path / "meta.json").write_text(json.dumps(meta, indent=1))

    @classmethod
    def load(cls, path: str | Path, gpu: bool = False, **overrides: Any) -> FaissIndex:
        """Read an index written by ``save`` (``overrides`` e.g. ``nprobe=`` replace stored settings).

        Ids are memory-mapped (``IdArray``); a folder of the older layout (``<group>.ids.json``) still loads.
        """
        faiss = _faiss()
        path = Path(path)
        meta_path = path / "meta.json"
        if not meta_path.exists():
            raise FileNotFoundError(f"no FAISS index at {path} (missing meta.json)")
        meta = json.loads(meta_path.read_text())
        groups = meta.pop("groups")
        shards = meta.pop("shards", {})
        meta.update(overrides)
        index = cls(gpu=gpu, **meta)
        for g in groups:
            count = int(shards.get(g, 1))
            names = [f"{g}.faiss"] if count == 1 else [f"{g}.{k}.faiss" for k in range(count)]
            indexes = [faiss.read_index(str(path / name)) for name in names]
            part = indexes[0] if count == 1 else _Shards(indexes)
            old = path / f"{g}.ids.json"
            ids = (
                np.asarray(json.loads(old.read_text()), dtype=object) if old.is_file() else IdArray(path / g)
            )
            if part.ntotal != len(ids):
                raise ValueError(f"{path}/{g}: index holds {part.ntotal} vectors but {len(ids)} ids")
            index._set_nprobe(part)
            index.parts[g] = index._maybe_gpu(part)
            index.part_ids[g] = ids
        return index
