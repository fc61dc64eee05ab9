"""Embedding shards on disk (``encode_corpus`` writes them): listing, their id files and reading their vectors back
block by block (memory-mapped), which the streaming index build does."""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


def embedding_shards(folder: str | Path) -> list[Path]:
    """The finished ``shard-r<rank>-<seq>.npy`` files of an ``encode_corpus`` folder, in name order."""
    return sorted(p for p in Path(folder).glob("shard-r*-*.npy") if not p.name.endswith(".tmp.npy"))


def shard_ids_path(npy: Path) -> Path:
    return npy.with_suffix("").with_suffix(".ids.json")


class ShardVectors:
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


def locate_rows(folder: Path, id_rows: Callable[[Sequence[str]], np.ndarray], n: int, ids: Sequence[str]):
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


class ShardSet:
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
