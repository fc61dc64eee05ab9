"""Your own corpus: a JSONL file or a saved Hugging Face dataset of items -> a ``CorpusStore`` keyed on its content.

One record per item (field reference: docs/how-to/own-corpus.md)::

    {"id": "doc-1", "title": "Eiffel Tower", "text": "The Eiffel Tower is a wrought-iron lattice tower ..."}
    {"id": "tab-1", "title": "Towers", "table": {"header": ["name", "city"], "rows": [["Eiffel", "Paris"]]}}
    {"id": "img-1", "title": "Photo", "image": "img/tower.jpg", "caption": "the tower at night"}
    {"id": "vid-1", "video": {"path": "clips/tour.mp4", "start": 0, "end": 120}}

``id`` (string or int) is kept verbatim: an item whose id equals a benchmark's gold id (``hotpotqa:...``) counts
as that gold item; ``title``, ``modality`` (must match the payload) and ``meta`` are optional. Exactly one
payload: ``text`` or ``sentences`` (pre-split leaves; a ``text`` beside them must be their join, as
``Item.to_dict`` writes it), ``table`` ({header, rows, caption}), ``image`` (a path) or ``video`` (a path or
{path, start, end} in seconds). Relative media paths resolve under the corpus file's folder (a dataset folder:
the folder itself), stay inside it unless ``allow_outside_media_root``, and must exist. Any ``Item.to_dict``
line is a valid record. A malformed record is one ``DataFormatError`` naming the file and the line (JSONL) or
record index (dataset), the item id and the field.

``user_corpus_store`` writes the items as ``cache_dir/corpus-<key>.jsonl``, where the key is the corpus's bytes
(every file of a dataset folder), the media root and this reading code: an edited or replaced corpus gets another
key, so its embeddings, FAISS and BM25 indexes (keyed on the JSONL's bytes) are built anew, never reused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from canopy_lit.data.base import Benchmark
from canopy_lit.data.readers import custom, fields, hf
from canopy_lit.data.readers._io import DataFormatError, RecordError, iter_located_records, record_guard
from canopy_lit.retrieval.corpus import CORPUS_FORMAT, CorpusStore, hash_tree, read_manifest
from canopy_lit.types import Item, Modality

log = logging.getLogger(__name__)

FIELDS = ("id", "title", "modality", "text", "sentences", "table", "image", "caption", "video", "meta")
PAYLOADS = {"text": Modality.TEXT, "sentences": Modality.TEXT, "table": Modality.TABLE,
            "image": Modality.IMAGE, "video": Modality.VIDEO}  # fmt: skip
OPTIONS = ("media_root", "allow_outside_media_root")  # the keys of ``retrieval.corpus_options``
# Part of every user-corpus key: raise it when what a record means changes.
USER_CORPUS_FORMAT = 1
_OUTSIDE_HINT = (
    "pass --allow-outside-media-root to the index command (retrieval.corpus_options.allow_outside_media_root=true"
    " in a run) to read files elsewhere"
)


def _fail(field: str, message: str) -> RecordError:
    return RecordError(f"{field}: {message}")


def _records(path: Path) -> Iterator[tuple[Path, int, int | None, Any]]:
    """(label named in errors, record index, JSONL line or None, record) of every record of the corpus."""
    if hf.is_hf_dataset(path):
        for label, _, rows in hf.open_sources(path, lambda _name: None):
            for index, rec in enumerate(rows):
                yield label, index, None, rec
        return
    if path.is_dir():
        raise FileNotFoundError(f"{path}: a corpus is a .jsonl file or a save_to_disk folder (none found there)")
    for index, (line, rec) in enumerate(iter_located_records(path)):
        yield path, index, line, rec


class _ItemParser:
    """One corpus record -> an ``Item``; media checks and the table shape are the custom reader's."""

    def __init__(self, media_root: Path, allow_outside: bool) -> None:
        self.media = custom.RecordParser(Benchmark("corpus", [], {}, {}), media_root, allow_outside)
        self.media.outside_hint = _OUTSIDE_HINT

    def item(self, rec: Any) -> Item:
        if not isinstance(rec, dict):
            raise RecordError(f"a record is a JSON object, got {type(rec).__name__}")
        fields.check_keys(rec, FIELDS, "")
        if rec.get("id") is None:
            raise _fail("id", "missing (every corpus item needs an id)")
        item_id = fields.as_string(rec["id"], "id")
        payloads = [k for k in PAYLOADS if rec.get(k) is not None]
        if payloads == ["text", "sentences"]:  # Item.to_dict of a pre-split text: text is the join
            payloads = ["sentences"]
        if len(payloads) > 1:
            raise _fail(payloads[1], f"one payload per item, got {' and '.join(payloads)}")
        if not payloads:
            raise _fail("id", f"{item_id!r} has no payload: give one of {', '.join(PAYLOADS)}")
        payload = payloads[0]
        modality = PAYLOADS[payload]
        if rec.get("modality") is not None:
            named = fields.as_string(rec["modality"], "modality").lower()
            if named != modality.value:
                raise _fail("modality", f"{named!r} but the payload is {payload!r} ({modality.value})")
        title = fields.as_string(rec["title"], "title", allow_empty=True) if rec.get("title") is not None else ""
        meta: dict[str, Any] = {}
        if rec.get("meta") is not None:
            if not isinstance(rec["meta"], dict):
                raise _fail("meta", f"expected an object, got {type(rec['meta']).__name__}")
            meta = {k: v for k, v in rec["meta"].items() if v is not None}  # Arrow pads absent keys with null
        if rec.get("caption") is not None:
            if modality != Modality.IMAGE:
                raise _fail("caption", "is for images (a table's caption goes in table.caption)")
            meta["caption"] = fields.as_string(rec["caption"], "caption", allow_empty=True)
        value = rec[payload]
        kwargs: dict[str, Any] = {}
        if payload == "text":
            kwargs["text"] = fields.as_string(value, "text")
        elif payload == "sentences":
            sentences = [s.strip() for s in fields.as_strings(value, "sentences")]
            if not any(sentences):
                raise _fail("sentences", "has no non-empty sentence")
            if rec.get("text") is not None and fields.as_string(rec["text"], "text", True) != " ".join(sentences):
                raise _fail("text", "differs from the join of sentences: give one payload, text or sentences")
            kwargs["sentences"] = sentences
        elif payload == "table":
            kwargs["table"] = self.media._table(value, "table")
        elif payload == "image":
            kwargs["image"] = str(self.media._media(value, "image"))
        else:
            kwargs["video"] = self.media._video(value, "video")
        return Item(item_id, modality, title=title, meta=meta, **kwargs)


def _media_root(path: Path, media_root: str | Path | None) -> Path:
    root = Path(media_root) if media_root is not None else path if path.is_dir() else path.parent
    return Path(os.path.abspath(root))  # items keep absolute media paths: the store lives in a cache folder


def read_corpus(
    path: str | Path, media_root: str | Path | None = None, allow_outside_media_root: bool = False
) -> Iterator[Item]:
    """Stream the items of a corpus file (JSONL, ``.gz`` or not) or saved Hugging Face dataset, in order.

    Args:
        path: the corpus (module docstring: the record format).
        media_root: folder that relative ``image`` / ``video.path`` resolve under (default: the file's folder;
            a dataset folder itself). A path leaving it is an error unless ``allow_outside_media_root``.
        allow_outside_media_root: read media paths outside ``media_root`` too (a corpus you trust).

    Raises:
        FileNotFoundError: no such corpus.
        DataFormatError: a malformed record, a repeated id or no record at all (one line naming file and line).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"corpus not found: {path}")
    parser = _ItemParser(_media_root(path, media_root), bool(allow_outside_media_root))
    seen: dict[str, str] = {}  # item id -> where it was defined
    for label, index, line, rec in _records(path):
        where = f"line {line}" if line is not None else f"{label.name}, record {index}"
        item: Item | None = None
        with record_guard(label, index, rec, line=line):
            item = parser.item(rec)
            if item.id in seen:
                raise _fail("id", f"{item.id!r} is already the id of {seen[item.id]}: item ids are unique")
        assert item is not None  # record_guard re-raises every record error
        seen[item.id] = where
        yield item
    if not seen:
        raise DataFormatError(path, "no records: a corpus holds at least one item")


def _reading_code() -> str:
    """sha256 (16 hex) of the code that turns corpus records into items."""
    h = hashlib.sha256()
    for module in (__file__, custom.__file__, fields.__file__, hf.__file__, Path(custom.__file__).with_name("_io.py"),
                   Path(__file__).parents[1] / "types.py"):  # fmt: skip
        h.update(Path(module).read_bytes())
    return h.hexdigest()[:16]


def content_hash(path: Path) -> str:
    """sha256 (16 hex) of a corpus file's bytes and suffix (how it is parsed), or of a dataset folder's files
    (their names relative to it and bytes): the file's own name is no part of it."""
    if path.is_dir():
        return hash_tree(path)
    h = hashlib.sha256("".join(path.suffixes[-2:]).lower().encode() + b"\0")
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def corpus_source(
    path: str | Path, media_root: str | Path | None = None, allow_outside_media_root: bool = False
) -> dict[str, Any]:
    """What a user corpus's cached JSONL is made of (its key): the corpus's content, media root, reading code."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"corpus not found: {p} (retrieval.corpus / --corpus)")
    return {
        "corpus": str(p.resolve()),
        "content": content_hash(p),
        "media_root": str(_media_root(p, media_root)),
        "allow_outside_media_root": bool(allow_outside_media_root),
        "code": _reading_code(),
        "user_format": USER_CORPUS_FORMAT,
    }


def user_corpus_store(
    path: str | Path,
    cache_dir: str | Path,
    media_root: str | Path | None = None,
    allow_outside_media_root: bool = False,
    rebuild: bool = False,
) -> CorpusStore:
    """The items of the corpus at ``path`` as ``cache_dir/corpus-<key>.jsonl`` (read once, then reused).

    The key covers the corpus's bytes (``corpus_source``): another or an edited file is another store. A
    store whose bytes no longer match the manifest beside it (``corpus-<key>.json``) is rewritten, with one
    warning line. Media files are checked when the corpus is read, not hashed: an image or video replaced
    under the same path keeps the old embeddings (give it a new name, or delete the cache folder).
    """
    source = corpus_source(path, media_root, allow_outside_media_root)
    # "path" is no part of the key: the same bytes under the same media root at another path are the same corpus
    key_body = {"format": CORPUS_FORMAT, **{k: v for k, v in source.items() if k != "corpus"}}
    key = hashlib.sha256(json.dumps(key_body, sort_keys=True).encode()).hexdigest()[:16]
    out = Path(cache_dir) / f"corpus-{key}.jsonl"
    manifest = out.with_suffix(".json")
    if out.is_file() and not rebuild:
        recorded = read_manifest(manifest)
        store = CorpusStore(out)
        if recorded is not None and recorded.get("sha256") == store.digest():
            return store
        store.close()
        log.warning("%s: no manifest or its bytes differ from the manifest's; rebuilding the corpus", out)
    try:
        store = CorpusStore.write(read_corpus(path, media_root, allow_outside_media_root), out)
    finally:  # a malformed record stops the write: leave no partial file behind
        Path(f"{out}.tmp{os.getpid()}").unlink(missing_ok=True)
    tmp = manifest.with_name(manifest.name + f".tmp{os.getpid()}")
    body = {"format": CORPUS_FORMAT, "sha256": store.digest(), "items": len(store), "sources": [source]}
    tmp.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, manifest)
    log.info("corpus %s: %d items (%s) -> %s", path, len(store), store.counts(), out)
    return store


def corpus_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``retrieval.corpus_options`` checked: only ``OPTIONS`` keys (a typo is an error, not a default)."""
    given = dict(options or {})
    unknown = sorted(set(given) - set(OPTIONS))
    if unknown:
        raise ValueError(f"retrieval.corpus_options: unknown key(s) {unknown}; known: {', '.join(OPTIONS)}")
    return given


def open_corpus(
    benchmarks: Sequence[str],
    cache_dir: str | Path,
    corpus: str | Path | None = None,
    options: Mapping[str, Any] | None = None,
    benchmark_options: Mapping[str, Mapping[str, Any]] | None = None,
    loaded: Mapping[str, Any] | None = None,
) -> CorpusStore:
    """The store a retriever indexes: the user corpus at ``corpus``, else the union of ``benchmarks``.

    Args:
        benchmarks: the union (``CorpusStore.from_benchmarks``); unused with ``corpus``.
        benchmark_options: see ``benchmarks``.
        loaded: see ``benchmarks``.
        cache_dir: folder of the store and its manifest.
        corpus: a corpus file or dataset folder (``retrieval.corpus``); None or "" = the bundled union.
        options: ``retrieval.corpus_options`` (``media_root``, ``allow_outside_media_root``).
    """
    if corpus is None or str(corpus) == "":
        return CorpusStore.from_benchmarks(benchmarks, cache_dir, options=benchmark_options, loaded=loaded)
    return user_corpus_store(corpus, cache_dir, **corpus_options(options))
