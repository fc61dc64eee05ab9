"""Corpus store: the retrievable items of the configured benchmarks, deduplicated, as streaming JSONL.

One JSON object per line (``Item.to_dict``). Opening a store scans the file once for byte offsets,
so iteration streams and ``get(id)`` seeks; nothing holds the whole corpus in memory unless asked.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from canopy_lit.hierarchy import Hierarchy, NodeInput
from canopy_lit.types import Item, Modality

log = logging.getLogger(__name__)


def render_item(item: Item, hierarchy: Hierarchy | None = None) -> NodeInput:
    """What the retriever embeds for a whole item: the root node of its tree.

    text: ``title: text``; table: title, caption, header and every row; image / video: the
    builder's node input (title/caption text plus the image or the sampled frames), which a
    multimodal encoder reads whole and a text encoder reads as text. Using the root node keeps
    the item embedding identical to the root's f0 node embedding.
    """
    h = hierarchy or Hierarchy()
    return h.node_input(h.build(item), 0)


class CorpusStore:
    """Read access to a corpus JSONL file.

    Args:
        path: a file written by ``CorpusStore.write`` (or any JSONL of ``Item.to_dict`` records).

    Attributes:
        ids: item ids in file order; ``modalities``: (N,) modality names.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"corpus file not found: {self.path}")
        ids: list[str] = []
        mods: list[str] = []
        offsets: list[int] = []
        with self.path.open("rb") as f:
            pos = 0
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rec = json.loads(line)
                        ids.append(str(rec["id"]))
                        mods.append(Modality(rec["modality"]).value)
                    except (json.JSONDecodeError, KeyError, ValueError) as err:
                        raise ValueError(f"{self.path}:{lineno}: bad corpus record ({err})") from err
                    offsets.append(pos)
                pos += len(line)
        self.ids = ids
        self.modalities = np.asarray(mods, dtype=object)
        self._offsets = np.asarray(offsets, dtype=np.int64)
        self._row = {i: r for r, i in enumerate(ids)}
        if len(self._row) != len(ids):
            dup = [i for i, c in Counter(ids).items() if c > 1][:5]
            raise ValueError(f"{self.path}: duplicate item ids, e.g. {dup}")
        self._fh: Any = None

    # ------------------------------------------------------------------ writing
    @classmethod
    def write(cls, items: Iterable[Item], path: str | Path) -> CorpusStore:
        """Write items deduplicated by id (first wins; a different duplicate is logged) and open the result.

        Written to a temporary file and renamed, so a crash never leaves a half corpus behind.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        seen: dict[str, str] = {}
        conflicts = 0
        with tmp.open("w", encoding="utf-8") as f:
            for item in items:
                line = json.dumps(item.to_dict(), ensure_ascii=False, sort_keys=True)
                digest = hashlib.sha1(line.encode()).hexdigest()
                if item.id in seen:
                    conflicts += seen[item.id] != digest
                    continue
                seen[item.id] = digest
                f.write(line + "\n")
        os.replace(tmp, path)
        if conflicts:
            log.warning("%s: %d items share an id with a different item; kept the first of each", path, conflicts)
        return cls(path)

    @classmethod
    def from_benchmarks(
        cls,
        names: Sequence[str],
        path: str | Path,
        options: dict[str, dict[str, Any]] | None = None,
        rebuild: bool = False,
    ) -> CorpusStore:
        """The union of the items of benchmarks ``names``, written to ``path`` (reused if present).

        Args:
            names: benchmark names understood by ``canopy_lit.data.load_benchmark``.
            path: JSONL output file.
            options: per-benchmark keyword options for ``load_benchmark`` (``path`` = a non-bundled file).
            rebuild: rewrite even if ``path`` exists.
        """
        path = Path(path)
        if path.is_file() and not rebuild:
            return cls(path)
        from canopy_lit.data import load_benchmark

        def items() -> Iterator[Item]:
            for name in names:
                kw = dict((options or {}).get(name, {}))
                bench_path = kw.pop("path", None)
                bench = load_benchmark(name, bench_path, **kw)
                log.info("corpus: %s contributes %d items", name, len(bench.items))
                yield from bench.items.values()

        return cls.write(items(), path)

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._row

    def __iter__(self) -> Iterator[Item]:
        with self.path.open("r", encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield Item.from_dict(json.loads(line))

    def __repr__(self) -> str:
        counts = ", ".join(f"{m}={c}" for m, c in sorted(Counter(self.modalities.tolist()).items()))
        return f"CorpusStore({self.path.name}: {len(self)} items; {counts})"

    def get(self, item_id: str) -> Item:
        """The item with id ``item_id`` (KeyError naming the corpus file if absent)."""
        try:
            row = self._row[item_id]
        except KeyError as err:
            raise KeyError(f"item {item_id!r} is not in corpus {self.path}") from err
        if self._fh is None:
            self._fh = self.path.open("rb")
        self._fh.seek(int(self._offsets[row]))
        return Item.from_dict(json.loads(self._fh.readline()))

    def get_many(self, item_ids: Iterable[str]) -> list[Item]:
        return [self.get(i) for i in item_ids]

    def modality(self, item_id: str) -> str:
        return str(self.modalities[self._row[item_id]])

    def view(self, modality: str | Modality) -> list[str]:
        """Ids of the items of one modality, in file order."""
        m = Modality(modality).value
        return [self.ids[r] for r in np.flatnonzero(self.modalities == m)]

    def counts(self) -> dict[str, int]:
        return dict(Counter(self.modalities.tolist()))

    def digest(self) -> str:
        """sha256 of the file (first 16 hex): a cache key for anything computed from this corpus."""
        h = hashlib.sha256()
        with self.path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()[:16]

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
