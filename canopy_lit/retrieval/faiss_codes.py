"""FAISS index construction for ``FaissIndex``: an index of each kind (``KINDS``), vectors normalised and
encoded block by block into a code buffer sized once (``fill_index``), so the (N, D) float32 matrix never exists,
the modality partitions of a build (``partitions``) and the process's rank when torch.distributed builds it."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any, Literal, get_args

import numpy as np

log = logging.getLogger(__name__)

IndexKind = Literal["flat_sq_fp16", "flat", "ivfpq"]  # retrieval.index
KINDS: tuple[str, ...] = get_args(IndexKind)


def faiss_module():
    import faiss

    return faiss


def normalize(x: np.ndarray) -> np.ndarray:
    """Row-wise L2 normalisation as float32 (copy); zero rows stay zero."""
    x = np.ascontiguousarray(x, dtype=np.float32).copy()
    if x.ndim != 2:
        raise ValueError(f"expected a (N, D) matrix, got shape {x.shape}")
    faiss_module().normalize_L2(x)
    return x


def new_index(kind: str, dim: int, n: int, nlist: int, pq_m: int, pq_nbits: int):
    faiss = faiss_module()
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
            return new_index("flat_sq_fp16", dim, n, nlist, pq_m, pq_nbits)
        if dim % pq_m:
            raise ValueError(f"ivfpq: pq_m={pq_m} must divide the embedding dim {dim}")
        quantizer = faiss.IndexFlatIP(dim)
        return faiss.IndexIVFPQ(quantizer, dim, cells, pq_m, pq_nbits, ip)
    raise ValueError(f"unknown index kind {kind!r}; choose one of {KINDS}")


def fill_index(idx: Any, fetch: Callable[[Any], np.ndarray], lo: int, hi: int, block: int) -> None:
    """Add the normalised vectors of positions [lo, hi) to ``idx``, ``block`` rows at a time.

    A flat-codes index (flat, flat_sq_fp16) gets its code buffer sized once and each block's codes written
    in place: ``add`` would grow a std::vector by doubling, which briefly holds two copies of the index.
    """
    faiss = faiss_module()
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


ALL = "all"  # the single partition of an unpartitioned index


def distributed_rank() -> tuple[int, Callable[[], None] | None]:
    """(rank, barrier) of an initialised torch.distributed process group, else (0, None); never imports torch."""
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return 0, None
    return int(dist.get_rank()), dist.barrier


def partitions(groups: Sequence[str] | np.ndarray | None, n: int) -> list[tuple[str, np.ndarray]]:
    """(name, rows) per partition, names sorted, rows ascending; one ``ALL`` partition without groups."""
    if groups is None:
        return [(ALL, np.arange(n, dtype=np.int64))]
    if len(groups) != n:
        raise ValueError(f"groups has {len(groups)} entries for {n} ids")
    g = np.asarray([str(x) for x in groups], dtype=object)
    return [(name, np.flatnonzero(g == name)) for name in sorted(set(g.tolist()))]
