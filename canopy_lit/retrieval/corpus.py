"""Corpus store: the retrievable items of the configured benchmarks, deduplicated, as streaming JSONL.

One JSON object per line (``Item.to_dict``). Opening a store scans the file once for byte offsets,
so iteration streams and ``get(id)`` seeks; nothing holds the whole corpus in memory unless asked.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from canopy_lit.hierarchy import Hierarchy, NodeInput
from canopy_lit.retrieval.ids import IdArray, IdMap
from canopy_lit.types import Item, Modality

if TYPE_CHECKING:
    from canopy_lit.data.base import Benchmark

log = logging.getLogger(__name__)

# Part of every corpus key: raise it when the JSONL layout or what a key covers changes.
CORPUS_FORMAT = 2


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def hash_tree(path: Path) -> str:
    """sha256 (16 hex) of a file's bytes, or of every file below a folder (relative names and bytes)."""
    h = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        h.update(str(f.relative_to(path) if f != path else f.name).encode() + b"\0")
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    return h.hexdigest()[:16]


def _reading_code(reader: Any) -> str:
    """sha256 (16 hex) of the code that turns source files into items: ``canopy_lit/data``, ``types.py`` and
    the module of a reader outside them. An edit rebuilds the JSONL (seconds); the embeddings and indexes
    keyed on its bytes are reused when the items come out the same."""
    import inspect

    import canopy_lit.data as data_pkg
    from canopy_lit.data.base import resolve_reader

    pkg = Path(data_pkg.__file__).parent
    files = sorted(pkg.rglob("*.py")) + [pkg.parent / "types.py"]
    try:
        own = inspect.getsourcefile(resolve_reader(reader))
    except (TypeError, ImportError, AttributeError, ValueError):
        own = None
    if own and not Path(own).resolve().is_relative_to(pkg.resolve()):
        files.append(Path(own))
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _source_files(values: Iterable[Any]) -> dict[str, str]:
    """Content digest of each value that names an existing file or folder (a benchmark's path, its tables ...)."""
    out: dict[str, str] = {}
    for v in values:
        if isinstance(v, (str, Path)) and str(v) and Path(v).exists():
            out[str(Path(v).resolve())] = hash_tree(Path(v))
    return out


def corpus_sources(
    names: Sequence[str],
    options: Mapping[str, Mapping[str, Any]] | None = None,
    loaded: Mapping[str, Benchmark] | None = None,
) -> list[dict[str, Any]]:
    """What a union corpus is made of, one JSON-able entry per benchmark: the key of its JSONL file.

    A benchmark in ``loaded`` is its items' digest; any other is read as ``load_benchmark`` reads it: the
    content of its file (``options[name]["path"]``, else the bundled one) and of every file its options and
    registry defaults name, its options, and the data-reading code.
    """
    from canopy_lit.data.base import BENCHMARKS, project_data_dir

    out: list[dict[str, Any]] = []
    for name in names:
        if loaded and name in loaded:
            h = hashlib.sha256()
            for item in loaded[name].items.values():
                h.update(json.dumps(item.to_dict(), ensure_ascii=False, sort_keys=True).encode() + b"\n")
            out.append({"benchmark": name, "items": h.hexdigest()[:16]})
            continue
        kw = dict((options or {}).get(name, {}))
        spec = BENCHMARKS.get(str(kw.get("reader") or name).lower())
        data_dir = project_data_dir()
        path = kw.get("path") or (data_dir / spec.bundled if spec is not None and spec.bundled else None)
        defaults = [data_dir / v for k, v in (spec.defaults if spec else {}).items() if isinstance(v, str) and k != "name"]
        reader = kw.get("reader") or (spec.reader if spec is not None else None)
        out.append({
            "benchmark": name,
            "options": json.loads(json.dumps(kw, sort_keys=True, default=str)),
            "files": _source_files([path, *defaults, *kw.values()]),
            "code": _reading_code(reader) if reader is not None else None,
        })  # fmt: skip
    return out


def read_manifest(path: Path) -> dict[str, Any] | None:
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None


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
        ids: item ids in file order (an ``IdArray``: a sequence of str, equal to the list of them);
            ``modalities``: (N,) modality names.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"corpus file not found: {self.path}")
        # No Python object per item (a list of str ids costs ~75 B each, 2.5 GB at 33M items): the ids' bytes
        # back to back and their lengths, line offsets in an int64 array, modalities as shared str objects.
        blob, lengths, offsets, mods = bytearray(), array("q"), array("q"), []
        with self.path.open("rb") as f:
            pos = 0
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rec = json.loads(line)
                        key = str(rec["id"]).encode("utf-8")
                        mods.append(Modality(rec["modality"]).value)
                    except (json.JSONDecodeError, KeyError, ValueError) as err:
                        raise ValueError(f"{self.path}:{lineno}: bad corpus record ({err})") from err
                    blob += key
                    lengths.append(len(key))
                    offsets.append(pos)
                pos += len(line)
        starts = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(np.frombuffer(lengths, dtype=np.int64), out=starts[1:])
        self.ids = IdArray.packed(np.frombuffer(blob, dtype=np.uint8), starts, self.path)
        self.modalities = np.asarray(mods, dtype=object)
        self._offsets = np.frombuffer(offsets, dtype=np.int64)
        # id -> row without a dict (~100 B of Python objects per item): sorted hashes, 16 B per item
        self._map = IdMap(self.ids)
        if self._map.duplicates:
            raise ValueError(f"{self.path}: duplicate item ids, e.g. {self._map.duplicates[:5]}")
        self._fh: Any = None

    def __getstate__(self) -> dict[str, Any]:
        # a DataLoader worker or a spawned DDP rank gets its own file handle
        return {**self.__dict__, "_fh": None}

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
        cache_dir: str | Path,
        options: Mapping[str, Mapping[str, Any]] | None = None,
        loaded: Mapping[str, Benchmark] | None = None,
        rebuild: bool = False,
    ) -> CorpusStore:
        """The union of the items of benchmarks ``names``, as ``cache_dir/corpus-<key>.jsonl``.

        The key is the content of the sources (``corpus_sources``): the bytes of every file a benchmark is
        read from, its reader options and the data-reading code, or the items of a benchmark passed in
        ``loaded``. Another source file, option or item gives another file; a file whose bytes no longer
        match the manifest written beside it (``corpus-<key>.json``) is rebuilt, with one warning line.

        Args:
            names: benchmark names understood by ``canopy_lit.data.load_benchmark``.
            cache_dir: folder of the corpus JSONL and its manifest.
            options: per-benchmark keyword options for ``load_benchmark`` (``path`` = a non-bundled file).
            loaded: benchmarks already read (by name; e.g. the run's ``data=X data.path=P``): their items
                are used as they are, in place of reading ``names``' entry again.
            rebuild: rewrite even if a matching file exists.
        """
        names = [n.lower() for n in names]
        loaded = {k.lower(): v for k, v in (loaded or {}).items()}
        sources = corpus_sources(names, options, loaded)
        key = _digest(json.dumps({"format": CORPUS_FORMAT, "sources": sources}, sort_keys=True).encode())
        path = Path(cache_dir) / f"corpus-{key}.jsonl"
        manifest = path.with_suffix(".json")
        if path.is_file() and not rebuild:
            recorded = read_manifest(manifest)
            store = cls(path)
            if recorded is not None and recorded.get("sha256") == store.digest():
                return store
            store.close()
            log.warning("%s: no manifest or its bytes differ from the manifest's; rebuilding the corpus", path)
        from canopy_lit.data import load_benchmark

        def items() -> Iterator[Item]:
            for name in names:
                if name in loaded:
                    bench = loaded[name]
                else:
                    kw = dict((options or {}).get(name, {}))
                    bench = load_benchmark(name, kw.pop("path", None), **kw)
                log.info("corpus: %s contributes %d items", name, len(bench.items))
                yield from bench.items.values()

        store = cls.write(items(), path)
        tmp = manifest.with_name(manifest.name + f".tmp{os.getpid()}")
        body = {"format": CORPUS_FORMAT, "sha256": store.digest(), "items": len(store), "sources": sources}
        tmp.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, manifest)
        return store

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, item_id: object) -> bool:
        return isinstance(item_id, str) and self._map.row(item_id) is not None

    def rows(self, item_ids: Sequence[str]) -> np.ndarray:
        """Row (file position) of each id, -1 where the corpus lacks it: (len(item_ids),) int64."""
        return self._map.rows(item_ids)

    def _row(self, item_id: str) -> int:
        row = self._map.row(item_id) if isinstance(item_id, str) else None
        if row is None:
            raise KeyError(f"item {item_id!r} is not in corpus {self.path}")
        return row

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
        return self.item_at(self._row(item_id))

    def item_at(self, row: int) -> Item:
        """The item on row ``row`` (0-based, file order; ``ids[row]`` is its id)."""
        if self._fh is None:
            self._fh = self.path.open("rb")
        self._fh.seek(int(self._offsets[row]))
        return Item.from_dict(json.loads(self._fh.readline()))

    def get_many(self, item_ids: Iterable[str]) -> list[Item]:
        return [self.get(i) for i in item_ids]

    def modality(self, item_id: str) -> str:
        return str(self.modalities[self._row(item_id)])

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
