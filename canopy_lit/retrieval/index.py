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
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from annotated_types import Ge, Interval

from canopy_lit.retrieval.embedding_shards import ShardSet, ShardVectors, locate_rows
from canopy_lit.retrieval.faiss_codes import (
    KINDS,
    IndexKind,
    distributed_rank,
    faiss_module,
    fill_index,
    new_index,
    normalize,
    partitions,
)
from canopy_lit.retrieval.ids import IdArray, IdMap, IdWriter, write_ids

log = logging.getLogger(__name__)

@dataclass
class SearchResult:
    """Top-k of a batch of queries: ``ids[q]`` and ``scores[q]`` (best first, may be shorter than k)."""

    ids: list[list[str]]
    scores: list[list[float]]


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
        kind: IndexKind = "flat_sq_fp16",
        nlist: Annotated[int, Ge(1)] = 4096,
        pq_m: Annotated[int, Ge(1)] = 64,
        pq_nbits: Annotated[int, Interval(ge=1, le=16)] = 8,
        nprobe: Annotated[int, Ge(1)] = 64,
        gpu: bool = False,
        search_batch: Annotated[int, Ge(1)] = 1024,
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
        self.parts: dict[str, Any] = {}  # group -> faiss index (or ShardSet of several)
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
        for name, rows in partitions(groups, len(ids)):
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
        rank, barrier = distributed_rank()
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
        files, shard, pos, dim = locate_rows(Path(shards_dir), id_rows, n, ids)
        if dim is None:
            raise ValueError(f"{shards_dir}: no finished embedding shards to index")
        index = cls(dim, **kwargs)
        gpu, index.gpu = index.gpu, False  # built and saved on CPU; moved to GPUs once complete
        source = ShardVectors(files, shard, pos)
        block = max(1, block_bytes // (4 * dim))
        tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        try:
            for name, rows in partitions(groups, n):
                index._build_part(
                    name, len(rows), lambda r, rows=rows: source.gather(rows[r]), block, train_size, seed
                )
                w = IdWriter(tmp / name, len(rows))
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
        faiss = faiss_module()
        template = new_index(self.kind, self.dim, n, self.nlist, self.pq_m, self.pq_nbits)
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
            fill_index(idx, fetch, lo, hi, block)
            self._set_nprobe(idx)
            shards.append(idx)
        part = shards[0] if len(shards) == 1 else ShardSet(shards)
        self.parts[group] = self._maybe_gpu(part)

    def _set_nprobe(self, idx: Any) -> None:
        for one in idx.indexes if isinstance(idx, ShardSet) else [idx]:
            if hasattr(one, "nprobe"):
                one.nprobe = min(self.nprobe, one.nlist)

    def _maybe_gpu(self, idx: Any) -> Any:
        """Shard a CPU index over all GPUs (lazy: only when asked and faiss-gpu is importable)."""
        if not self.gpu:
            return idx
        if isinstance(idx, ShardSet):
            return ShardSet([self._maybe_gpu(i) for i in idx.indexes])
        faiss = faiss_module()
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
        faiss = faiss_module()
        shards: dict[str, int] = {}
        for g, part in self.parts.items():
            indexes = part.indexes if isinstance(part, ShardSet) else [part]
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
        faiss = faiss_module()
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
            part = indexes[0] if count == 1 else ShardSet(indexes)
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
