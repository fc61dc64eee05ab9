"""Item ids on disk: ``IdArray`` (memory-mapped utf-8 bytes + offsets, so 33M ids are not 33M Python strings),
``write_ids`` and ``IdMap`` (id -> row), what the index and the corpus store keep beside their vectors."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


def ids_files(stem: str | Path) -> tuple[Path, Path]:
    return Path(f"{stem}.ids.bin"), Path(f"{stem}.ids.off.npy")


class IdArray:
    """A read-only sequence of N string ids kept on disk: utf-8 bytes back to back (``<stem>.ids.bin``) and
    N + 1 int64 start offsets (``<stem>.ids.off.npy``), both memory-mapped. Ids cost no Python objects until
    looked up, so the index's id map does not grow the process by ~70 B per item (33M items: ~2.5 GB).

    ``ids[i]`` is one id; ``ids[labels]`` (an int array) is an object array of the same shape.
    """

    def __init__(self, stem: str | Path) -> None:
        blob, off = ids_files(stem)
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


class IdWriter:
    """Writes exactly ``n`` ids, a block at a time, as an ``IdArray`` (offsets pre-sized: no growing list)."""

    def __init__(self, stem: str | Path, n: int) -> None:
        self.stem, self.n, self.done = Path(stem), n, 0
        blob, off = ids_files(stem)
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
    w = IdWriter(stem, len(ids))
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
