"""Your own benchmark without code: questions, their items and gold spans in JSONL / JSON, or a Hugging Face
dataset saved on disk (``data=custom data.path=FILE``; field reference: docs/how-to/custom-data.md).

One record per question::

    {"id": "q1", "question": "Where is the Eiffel Tower?", "answers": ["Paris"], "split": "test",
     "items": [
       {"id": "p1", "title": "Eiffel Tower", "text": "The Eiffel Tower is in Paris. ...",
        "gold_spans": ["is in Paris"]},
       {"id": "t1", "title": "Towers", "table": {"header": ["name", "city"], "rows": [["Eiffel", "Paris"]]},
        "gold_leaves": [0]},
       {"id": "i1", "title": "Photo", "image": "img/tower.jpg", "caption": "the tower at night"},
       {"id": "v1", "video": {"path": "clips/tour.mp4", "start": 0, "end": 120}, "gold_times": [[30, 45]]}]}

Items: exactly one payload (``text`` or ``sentences``, ``table``, ``image``, ``video``); the modality follows
from it. Gold of an item: ``gold_spans`` (strings), ``gold_offsets`` (``[start, end)`` characters),
``gold_leaves`` (leaf indices), ``gold_times`` (video seconds), or ``gold: true`` (the whole item, no span);
spans become leaf indices with ``_gold.gold_leaves``, and a span that is not found is an error. An item
entry that is only an id (a string, or ``{"id", gold fields}``) reuses an item defined in any record of
the dataset (every file's item definitions are read before any reference is resolved). Image and video paths
stay inside ``media_root`` (``allow_outside_media_root=True`` opts out); a video clip's ``end`` lies within
the video's duration (when it can be read). Splits: the record's ``split`` field, else the file or DatasetDict split name (train; val, dev,
validation; test), else the hash split of ``canopy_lit.data.splits``. Any malformed record is one
``DataFormatError`` naming the file, the line (JSONL) or record index, the question id and the field.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from canopy_lit.data.base import Benchmark
from canopy_lit.data.readers import hf
from canopy_lit.data.readers._gold import gold_leaves
from canopy_lit.data.readers._io import (
    DataFormatError,
    iter_located_records,
    record_guard,
)
from canopy_lit.data.readers.fields import (
    as_number,
    as_string,
    as_strings,
    check_keys,
    field_error,
)
from canopy_lit.hierarchy import video_duration
from canopy_lit.types import Item, Leaf, Modality, Question, Table, VideoRef

QUESTION_FIELDS = ("id", "question", "answers", "answer", "golden_answers", "choices", "split", "doc", "items",
                   "meta")  # fmt: skip
ITEM_FIELDS = ("id", "title", "modality", "text", "sentences", "table", "image", "caption", "video", "gold",
               "gold_spans", "gold_offsets", "gold_leaves", "gold_times", "meta")  # fmt: skip
PAYLOADS = {"text": Modality.TEXT, "sentences": Modality.TEXT, "table": Modality.TABLE,
            "image": Modality.IMAGE, "video": Modality.VIDEO}  # fmt: skip
# Which span fields fit which modality (gold_leaves fits all).
_SPAN_FIELDS = {
    "gold_spans": (Modality.TEXT, Modality.TABLE),
    "gold_offsets": (Modality.TEXT,),
    "gold_times": (Modality.VIDEO,),
    "gold_leaves": tuple(Modality),
}
SPLIT_NAMES = {
    "train": "train",
    "val": "val",
    "dev": "val",
    "validation": "val",
    "valid": "val",
    "test": "test",
}
_FILES = (".jsonl", ".json", ".ndjson", ".jsonl.gz", ".json.gz", ".ndjson.gz")

Located = tuple[int, int | None, Any]  # (record index, JSONL line or None, record)


def split_of(name: str) -> str | None:
    """The split a file, folder or DatasetDict key names by its last word (``train``, ``my_data.val.jsonl``,
    ``validation``); None when that word is no split name (``latest.jsonl`` is not a test file)."""
    stem = Path(name.strip("[]")).name.lower()
    for suffix in (".gz", ".jsonl", ".json", ".ndjson", ".parquet", ".arrow"):
        stem = stem.removesuffix(suffix)
    words = [w for w in stem.replace("-", "_").replace(".", "_").split("_") if w]
    return SPLIT_NAMES.get(words[-1]) if words else None


def read(
    path: Path,
    name: str = "custom",
    strict: bool = True,
    media_root: str | Path | None = None,
    allow_outside_media_root: bool = False,
) -> Benchmark:
    """Read a custom benchmark.

    Args:
        path: a ``.jsonl`` / ``.json`` file (``.gz`` or not), a folder of them (one split per file:
            ``train.jsonl``, ``val.jsonl``, ``test.jsonl``), a Hugging Face ``save_to_disk`` folder
            (``Dataset`` or ``DatasetDict``) or ``.parquet`` file(s).
        name: benchmark name (tables, ``Question.benchmark``) and item-id prefix (``<name>:<item id>``).
        strict: raise on a malformed record (default) or count it as ``skipped["malformed"]``.
        media_root: folder that relative ``image`` / ``video.path`` resolve under (default: the folder of
            the data file; the dataset folder itself for a folder). A path that leaves it (``../../etc/passwd``,
            an absolute path elsewhere) is an error, so a data file cannot make the run open other files.
        allow_outside_media_root: read media paths outside ``media_root`` too (data you trust).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"custom benchmark not found: {path} (data.path)")
    root = Path(media_root) if media_root is not None else path if path.is_dir() else path.parent
    skipped: Counter = Counter()
    bench = Benchmark(
        name, [], {}, {}, skipped, {"path": str(path), "reader": "custom", "media_root": str(root)}
    )
    parser = RecordParser(bench, root, bool(allow_outside_media_root))
    # Pass 1: the items every record defines, in all files, so that a record may name an item defined in a
    # later file (test.jsonl reads before train.jsonl) or in a record skipped as a repeated question.
    bad: set[tuple[int, int]] = set()
    for source, (label, _, records) in enumerate(_sources(path)):
        for index, line, rec in records:
            done = False
            with record_guard(label, index, rec, skipped, strict, line=line):
                parser.define_items(rec, (source, index), label, index, line)
                done = True
            if not done:  # counted as malformed already (strict=False)
                bad.add((source, index))
    # Pass 2: the questions, their references resolved against every defined item.
    for source, (label, split, records) in enumerate(_sources(path)):
        for index, line, rec in records:
            if (source, index) in bad:
                continue
            with record_guard(label, index, rec, skipped, strict, line=line):
                parsed = parser.question(rec, split, label, index, line, (source, index))
                if parsed is not None:
                    bench.add_question(*parsed)
    if not bench.questions and not skipped:
        raise DataFormatError(path, "no records")
    return bench


def _sources(path: Path) -> Iterator[tuple[Path, str | None, Iterable[Located]]]:
    """(label named in errors, split of the file or DatasetDict key, located records) per source."""
    if hf.is_hf_dataset(path):
        for label, split, rows in hf.open_sources(path, split_of):
            yield label, split, ((i, None, rec) for i, rec in enumerate(rows))
        return
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.name.lower().endswith(_FILES))
        if not files:
            raise FileNotFoundError(
                f"no .jsonl / .json files, save_to_disk folder or .parquet files in {path}"
            )
    else:
        files = [path]
    for file in files:
        yield (
            file,
            split_of(file.name),
            ((i, line, rec) for i, (line, rec) in enumerate(iter_located_records(file))),
        )


class RecordParser:
    """Records -> ``Question``s; items are created once by id and must not change between records."""

    # How to opt out of the media-root check, in the error (the corpus reader names its own switch).
    outside_hint = "set data.options.allow_outside_media_root=true to read files elsewhere"

    def __init__(self, bench: Benchmark, media_root: Path, allow_outside_media_root: bool = False) -> None:
        self.bench = bench
        self.media_root = media_root
        self.allow_outside = allow_outside_media_root
        self.entry_ids: dict[tuple[tuple[int, int], int], str] = {}  # (record key, entry index) -> item id
        self.defined_at: dict[str, str] = {}  # item id -> where it was first defined (for clash messages)
        self.leaf_cache: dict[str, list[Leaf]] = {}
        self.count = 0  # running record number: the default question id, unique across files and splits

    @staticmethod
    def _where(label: Path, index: int, line: int | None) -> str:
        return f"{label.name}, line {line}" if line is not None else f"{label.name}, record {index}"

    def define_items(self, rec: Any, key: tuple[int, int], label: Path, index: int, line: int | None) -> None:
        """Pass 1: create the items the record gives a payload for (a clash with another definition is an
        error); everything else about the record is checked in ``question``."""
        if not isinstance(rec, dict) or not isinstance(rec.get("items"), list):
            return
        where = self._where(label, index, line)
        for i, entry in enumerate(rec["items"]):
            if not isinstance(entry, dict):
                continue
            field = f"items[{i}]"
            check_keys(entry, ITEM_FIELDS, f"{field}.")
            payloads = [k for k in PAYLOADS if entry.get(k) is not None]
            if len(payloads) > 1:
                raise field_error(field, f"one payload per item, got {' and '.join(payloads)}")
            if not payloads:
                continue
            local_id = as_string(entry["id"], f"{field}.id") if entry.get("id") is not None else None
            item = self._new_item(entry, payloads[0], local_id, field)
            known = self.bench.items.get(item.id)
            if known is None:
                self.bench.items[item.id] = item
                self.defined_at[item.id] = where
            elif known != item:
                raise field_error(f"{field}.id", f"{local_id!r} was defined with other content at "
                            f"{self.defined_at[item.id]}")  # fmt: skip
            self.entry_ids[(key, i)] = item.id

    def question(
        self,
        rec: Any,
        source_split: str | None,
        label: Path,
        index: int,
        line: int | None,
        key: tuple[int, int] = (0, 0),
    ) -> tuple[Question, list[str]] | None:
        """The record's question and the ids of its items; None for a repeated question id (counted)."""
        self.count += 1
        if not isinstance(rec, dict):
            raise field_error("", f"a record is a JSON object, got {type(rec).__name__}")
        check_keys(rec, QUESTION_FIELDS, "")
        qid = as_string(rec["id"], "id") if rec.get("id") is not None else str(self.count - 1)
        if self.bench.repeats_question(qid):  # before its items join the pool
            return None
        if "question" not in rec or rec["question"] is None:
            raise field_error("question", "missing")
        text = as_string(rec["question"], "question")
        answers = self._answers(rec)
        choices = as_strings(rec["choices"], "choices") if rec.get("choices") is not None else None
        split = source_split
        if rec.get("split") is not None:
            given = as_string(rec["split"], "split").lower()
            if given not in SPLIT_NAMES:
                raise field_error("split", f"{rec['split']!r} is not one of {', '.join(SPLIT_NAMES)}")
            split = SPLIT_NAMES[given]
        entries = rec.get("items")
        if entries is None:
            entries = []
        if not isinstance(entries, list):
            raise field_error("items", f"expected a list of items, got {type(entries).__name__}")
        gold: dict[str, list[int]] = {}
        candidates: list[str] = []
        for i, entry in enumerate(entries):
            item_id, leaves = self._item(entry, f"items[{i}]", self.entry_ids.get((key, i)))
            if item_id not in candidates:
                candidates.append(item_id)
            if leaves is not None:
                gold[item_id] = sorted(set(gold.get(item_id, [])) | set(leaves))
        meta: dict[str, Any] = {}
        if rec.get("meta") is not None:
            if not isinstance(rec["meta"], dict):
                raise field_error("meta", f"expected an object, got {type(rec['meta']).__name__}")
            meta.update(rec["meta"])
        doc = rec.get("doc")
        if doc is not None:
            docs = [doc] if isinstance(doc, str) else doc
            if not isinstance(docs, list) or not all(isinstance(d, str) and d for d in docs):
                raise field_error("doc", "expected a document id (string) or a list of them")
            meta["doc"] = [f"{self.bench.name}:doc:{d}" for d in docs]
        else:
            meta["doc"] = sorted(gold) or candidates[:1]
        if split is not None:
            meta["split"] = split
        meta["file"] = label.name
        return Question(qid, text, answers, self.bench.name, gold, choices, meta), candidates

    @staticmethod
    def _answers(rec: dict[str, Any]) -> list[str]:
        given = [k for k in ("answers", "answer", "golden_answers") if rec.get(k) is not None]
        if len(given) > 1:
            raise field_error(given[1], f"give the answers in one field, not in both {given[0]!r} and {given[1]!r}")
        if not given:
            return []
        value = rec[given[0]]
        if isinstance(value, list):
            return [a for a in as_strings(value, given[0]) if a.strip()]
        return [as_string(value, given[0])]

    # ------------------------------------------------------------------ items
    def _item(self, entry: Any, field: str, defined: str | None) -> tuple[str, list[int] | None]:
        """(global item id, gold leaves or None when the item is not gold) of one ``items[i]`` entry;
        ``defined``: the id pass 1 gave the item this entry defines (None: the entry gives no payload)."""
        if isinstance(entry, str | int) and not isinstance(entry, bool):
            entry = {"id": entry}
        if not isinstance(entry, dict):
            raise field_error(field, f"an item is an object or an item id, got {type(entry).__name__}")
        check_keys(entry, ITEM_FIELDS, f"{field}.")
        payloads = [k for k in PAYLOADS if entry.get(k) is not None]
        if len(payloads) > 1:
            raise field_error(field, f"one payload per item, got {' and '.join(payloads)}")
        local_id = as_string(entry["id"], f"{field}.id") if entry.get("id") is not None else None
        if not payloads:
            if local_id is None:
                raise field_error(
                    field, f"no payload: give one of {', '.join(PAYLOADS)} (or the id of an earlier item)"
                )
            item_id = f"{self.bench.name}:{local_id}"
            if item_id not in self.bench.items:
                raise field_error(f"{field}.id", f"{local_id!r} names no item defined in the dataset; give its payload "
                            f"here (one of {', '.join(PAYLOADS)})")  # fmt: skip
            item = self.bench.items[item_id]
        else:
            if defined is None:
                raise field_error(field, "was not read when the items were defined")  # the two passes disagree: a bug
            item = self.bench.items[defined]
        return item.id, self._gold(entry, item, field)

    def _new_item(self, entry: dict[str, Any], payload: str, local_id: str | None, field: str) -> Item:
        modality = PAYLOADS[payload]
        if entry.get("modality") is not None:
            named = as_string(entry["modality"], f"{field}.modality").lower()
            if named != modality.value:
                raise field_error(
                    f"{field}.modality", f"{named!r} but the payload is {payload!r} ({modality.value})"
                )
        title = (
            as_string(entry["title"], f"{field}.title", allow_empty=True)
            if entry.get("title") is not None
            else ""
        )
        meta: dict[str, Any] = {}
        if entry.get("meta") is not None:
            if not isinstance(entry["meta"], dict):
                raise field_error(f"{field}.meta", f"expected an object, got {type(entry['meta']).__name__}")
            meta.update(entry["meta"])
        if entry.get("caption") is not None:
            if modality != Modality.IMAGE:
                raise field_error(f"{field}.caption", "is for images (a table's caption goes in table.caption)")
            meta["caption"] = as_string(entry["caption"], f"{field}.caption", allow_empty=True)
        value = entry[payload]
        kwargs: dict[str, Any] = {}
        if payload == "text":
            kwargs["text"] = as_string(value, f"{field}.text")
        elif payload == "sentences":
            sentences = as_strings(value, f"{field}.sentences")
            if not any(s.strip() for s in sentences):
                raise field_error(f"{field}.sentences", "has no non-empty sentence")
            kwargs["sentences"] = [s.strip() for s in sentences]
        elif payload == "table":
            kwargs["table"] = self._table(value, f"{field}.table")
        elif payload == "image":
            kwargs["image"] = str(self._media(value, f"{field}.image"))
        else:
            kwargs["video"] = self._video(value, f"{field}.video")
        body = json.dumps({"title": title, **{k: _plain(v) for k, v in kwargs.items()}}, sort_keys=True)
        local_id = local_id or hashlib.sha1(body.encode()).hexdigest()[:12]  # same content, same item
        return Item(f"{self.bench.name}:{local_id}", modality, title=title, meta=meta, **kwargs)

    @staticmethod
    def _table(value: Any, field: str) -> Table:
        if not isinstance(value, dict):
            raise field_error(field, f"expected {{'header': [...], 'rows': [[...]]}}, got {type(value).__name__}")
        check_keys(value, ("header", "rows", "caption"), f"{field}.")
        rows = value.get("rows")
        if not isinstance(rows, list) or not rows:
            raise field_error(f"{field}.rows", "expected a non-empty list of rows (lists of cells)")
        cells = []
        for r, row in enumerate(rows):
            if not isinstance(row, list):
                raise field_error(f"{field}.rows[{r}]", f"expected a list of cells, got {type(row).__name__}")
            cells.append(["" if c is None else as_string(c, f"{field}.rows[{r}][{c_i}]", allow_empty=True)
                          for c_i, c in enumerate(row)])  # fmt: skip
        header = as_strings(value["header"], f"{field}.header") if value.get("header") is not None else []
        caption = (
            as_string(value["caption"], f"{field}.caption", True) if value.get("caption") is not None else ""
        )
        return Table(header, cells, caption)

    def _media(self, value: Any, field: str) -> Path:
        ref = Path(as_string(value, field))
        file = ref if ref.is_absolute() else self.media_root / ref
        # Lexical check (abspath, no symlink resolution): links the user put under media_root stay readable.
        root = os.path.abspath(self.media_root)
        if not self.allow_outside and os.path.commonpath([root, os.path.abspath(file)]) != root:
            raise field_error(field, f"{str(ref)!r} lies outside media_root={self.media_root}: media paths stay inside "
                        f"it ({self.outside_hint})")  # fmt: skip
        if not file.is_file():
            raise field_error(
                field, f"file not found: {file} (relative paths resolve under media_root={self.media_root})"
            )
        return file

    def _video(self, value: Any, field: str) -> VideoRef:
        if isinstance(value, str):
            value = {"path": value}
        if not isinstance(value, dict):
            raise field_error(field, f"expected a path or {{'path', 'start', 'end'}}, got {type(value).__name__}")
        check_keys(value, ("path", "start", "end"), f"{field}.")
        if value.get("path") is None:
            raise field_error(f"{field}.path", "missing")
        file = self._media(value["path"], f"{field}.path")
        start = as_number(value["start"], f"{field}.start") if value.get("start") is not None else 0.0
        if value.get("end") is not None:
            end = as_number(value["end"], f"{field}.end")
            duration = _readable_duration(file)
            if duration is not None and end > duration + _DURATION_SLACK:
                raise field_error(f"{field}.end", f"{end:g} s lies past the end of {file.name} ({duration:g} s): "
                            "a clip lies within its video")  # fmt: skip
        else:
            try:
                end = video_duration(str(file))
            except Exception as err:  # decoders raise many types: the record names the file either way
                raise field_error(
                    f"{field}.path", f"cannot read the video's duration ({err}); give video.end"
                ) from err
        if not 0 <= start < end:
            raise field_error(field, f"clip bounds must satisfy 0 <= start < end, got start={start:g}, end={end:g}")
        return VideoRef(str(file), start, end)

    # ------------------------------------------------------------------ gold
    def _gold(self, entry: dict[str, Any], item: Item, field: str) -> list[int] | None:
        flag = entry.get("gold")
        if flag is not None and not isinstance(flag, bool):
            raise field_error(f"{field}.gold", f"expected true or false, got {flag!r} (spans go in gold_spans, "
                        "gold_offsets, gold_leaves or gold_times)")  # fmt: skip
        given = {k: entry[k] for k in _SPAN_FIELDS if entry.get(k) is not None}
        if flag is False and any(given.values()):
            raise field_error(f"{field}.gold", f"false, but {', '.join(given)} mark(s) gold spans")
        leaves: set[int] = set()
        for key, spans in given.items():
            if item.modality not in _SPAN_FIELDS[key]:
                fits = " or ".join(m.value for m in _SPAN_FIELDS[key])
                raise field_error(f"{field}.{key}", f"is for {fits} items; this item is {item.modality.value}")
            if not isinstance(spans, list):
                raise field_error(f"{field}.{key}", f"expected a list, got {type(spans).__name__}")
            for j, span in enumerate(spans):
                leaves.update(self._span(item, key, span, f"{field}.{key}[{j}]"))
        if leaves:
            return sorted(leaves)
        if flag:
            # Whole-item gold without a span: an image is its one leaf; other items are whole-gold ([]).
            return [0] if item.modality == Modality.IMAGE else []
        return None

    def _span(self, item: Item, key: str, span: Any, field: str) -> list[int]:
        if key == "gold_spans":
            span = as_string(span, field)
        elif key == "gold_leaves":
            if isinstance(span, bool) or not isinstance(span, int):
                raise field_error(field, f"expected a leaf index (int), got {span!r}")
        elif not (isinstance(span, list) and len(span) == 2):
            unit = "character offsets" if key == "gold_offsets" else "seconds"
            raise field_error(field, f"expected [start, end] in {unit}, got {span!r}")
        try:
            return gold_leaves(item, [span], self.leaf_cache)
        except ValueError as err:
            raise field_error(field, str(err)) from err


_DURATION_SLACK = 1.0  # seconds: container durations are rounded; a clip a little past them is the video's end


def _readable_duration(file: Path) -> float | None:
    """The video's duration, or None when no decoder can read it (then ``video.end`` stands as given, and
    the tree builder's clip cap bounds it)."""
    try:
        return float(video_duration(str(file)))
    except Exception:  # decoders raise many types; the bound is checked where it can be
        return None


def _plain(value: Any) -> Any:
    """A payload as JSON for the content hash of an item without an id."""
    if isinstance(value, Table):
        return {"header": value.header, "rows": value.rows, "caption": value.caption}
    if isinstance(value, VideoRef):
        return {"path": value.path, "start": value.start, "end": value.end}
    return value
