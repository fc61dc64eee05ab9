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
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Iterable, Sequence
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


class FaissIndex:
    """Inner-product search over normalised vectors, keyed by string item ids.

    Args:
        dim: embedding dimension D.
        kind: one of ``KINDS`` (see module docstring).
        nlist, pq_m, pq_nbits, nprobe: IVF-PQ parameters (ignored by the flat kinds).
        gpu: move partitions to all visible GPUs (sharded) when faiss-gpu is installed; else stay on CPU.
        search_batch: queries per FAISS call (bounds the (Q, fetch) result buffers).

    Example:
        >>> index = FaissIndex.build(ids, vectors, groups=modalities)   # vectors: (N, D)
        >>> res = index.search(queries, k=10, exclude={"nq:123"})        # queries: (Q, D)
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
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown index kind {kind!r}; choose one of {KINDS}")
        self.dim, self.kind = dim, kind
        self.nlist, self.pq_m, self.pq_nbits, self.nprobe = nlist, pq_m, pq_nbits, nprobe
        self.gpu, self.search_batch = gpu, search_batch
        self.parts: dict[str, Any] = {}  # group -> faiss index
        self.part_ids: dict[str, np.ndarray] = {}  # group -> (n,) item ids, faiss label = position

    # ------------------------------------------------------------------ build
    @classmethod
    def build(
        cls,
        ids: Sequence[str],
        vectors: np.ndarray,
        groups: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> FaissIndex:
        """Index ``vectors`` (N, D) under ``ids``; ``groups[i]`` names the partition of row i (None = one)."""
        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or len(ids) != len(vectors):
            raise ValueError(f"need one id per row: {len(ids)} ids for vectors of shape {vectors.shape}")
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate ids in the index input")
        index = cls(vectors.shape[1], **kwargs)
        if groups is None:
            index._add_part(ALL, np.asarray(ids, dtype=object), vectors)
        else:
            if len(groups) != len(ids):
                raise ValueError(f"groups has {len(groups)} entries for {len(ids)} ids")
            g = np.asarray([str(x) for x in groups], dtype=object)
            ids_arr = np.asarray(ids, dtype=object)
            for name in sorted(set(g)):
                rows = np.flatnonzero(g == name)
                index._add_part(name, ids_arr[rows], vectors[rows])
        return index

    def _add_part(self, group: str, ids: np.ndarray, vectors: np.ndarray) -> None:
        x = normalize(vectors)
        idx = _new_index(self.kind, self.dim, len(x), self.nlist, self.pq_m, self.pq_nbits)
        if not idx.is_trained:
            idx.train(x)
        idx.add(x)
        self._set_nprobe(idx)
        self.parts[group] = self._maybe_gpu(idx)
        self.part_ids[group] = ids

    def _set_nprobe(self, idx: Any) -> None:
        if hasattr(idx, "nprobe"):
            idx.nprobe = min(self.nprobe, idx.nlist)

    def _maybe_gpu(self, idx: Any) -> Any:
        """Shard a CPU index over all GPUs (lazy: only when asked and faiss-gpu is importable)."""
        if not self.gpu:
            return idx
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
        """Write ``meta.json`` plus one ``<group>.faiss`` and ``<group>.ids.json`` per partition."""
        faiss = _faiss()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        for g, idx in self.parts.items():
            cpu = faiss.index_gpu_to_cpu(idx) if self.gpu and hasattr(faiss, "index_gpu_to_cpu") else idx
            faiss.write_index(cpu, str(path / f"{g}.faiss"))
            (path / f"{g}.ids.json").write_text(json.dumps(list(self.part_ids[g])))
        meta = {
            "dim": self.dim,
            "kind": self.kind,
            "groups": self.groups,
            "nlist": self.nlist,
            "pq_m": self.pq_m,
            "pq_nbits": self.pq_nbits,
            "nprobe": self.nprobe,
        }
        (path / "meta.json").write_text(json.dumps(meta, indent=1))
        return path

    @classmethod
    def load(cls, path: str | Path, gpu: bool = False, **overrides: Any) -> FaissIndex:
        """Read an index written by ``save`` (``overrides`` e.g. ``nprobe=`` replace stored settings)."""
        faiss = _faiss()
        path = Path(path)
        meta_path = path / "meta.json"
        if not meta_path.exists():
            raise FileNotFoundError(f"no FAISS index at {path} (missing meta.json)")
        meta = json.loads(meta_path.read_text())
        groups = meta.pop("groups")
        meta.update(overrides)
        index = cls(gpu=gpu, **meta)
        for g in groups:
            idx = faiss.read_index(str(path / f"{g}.faiss"))
            ids = np.asarray(json.loads((path / f"{g}.ids.json").read_text()), dtype=object)
            if idx.ntotal != len(ids):
                raise ValueError(f"{path}/{g}: index holds {idx.ntotal} vectors but {len(ids)} ids")
            index._set_nprobe(idx)
            index.parts[g] = index._maybe_gpu(idx)
            index.part_ids[g] = ids
        return index
