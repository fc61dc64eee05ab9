"""MultiModalQA reader (``MMQA_{train,dev}.jsonl.gz``), with the context files when a user has them.

Question record: ``{"qid", "question", "answers": [{"answer", "modality", "text_instances":
[{"doc_id", "start_byte", "text"}], "table_indices": [[row, col]], "image_instances"}],
"metadata": {"table_id", "text_doc_ids", "image_doc_ids", "intermediate_answers", ...},
"supporting_context": [{"doc_id", "doc_part": "text" | "table" | "image"}]}``.

Context files (optional, official layouts, JSONL(.gz)):
``texts``: ``{"id", "title", "text"}``; ``tables``: ``{"id", "title", "table": {"table_name",
"header": [{"column_name"}], "table_rows": [[{"text", "links"}]]}}``; ``images``:
``{"id", "title", "path"}`` with the image files under ``images_dir``.

Only the documents some question refers to become items. Gold (on loaded items):
a text doc at the sentences holding its answer instances (final or intermediate),
a table at the rows of its ``table_indices``, an image whole (one leaf). Gold ids
whose document is not loaded stay in ``Question.meta["gold_ids"]`` and the
question counts as ``skipped["gold_context_unavailable"]``; without context files
(as bundled) a question has answers and gold ids but no items.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from canopy_lit.data.base import Benchmark
from canopy_lit.data.readers._gold import find_span, leaves_of, leaves_overlapping
from canopy_lit.data.readers._io import iter_records, record_guard, require
from canopy_lit.types import Item, Modality, Question, Table


def _answer_entries(rec: dict) -> list[dict]:
    """Final answers plus intermediate answers (they locate the bridge documents)."""
    out = [a for a in rec.get("answers") or [] if isinstance(a, dict)]
    for group in (rec.get("metadata") or {}).get("intermediate_answers") or []:
        out.extend(a for a in (group if isinstance(group, list) else [group]) if isinstance(a, dict))
    return out


def _load_docs(
    path: str | Path, wanted: set[str], modality: Modality, payload: Callable[[dict], dict[str, Any] | None]
) -> dict[str, Item]:
    """``mmqa:<id>`` items of the records in a context file that some question wants.

    ``payload(record)`` gives the item's payload field(s) (``{"text": ...}``), or None to leave the
    record out; a malformed record raises ``DataFormatError`` naming the file and record.
    """
    out: dict[str, Item] = {}
    for index, rec in enumerate(iter_records(path)):
        with record_guard(path, index, rec):
            doc_id = str(require(rec, "id", str))
            if doc_id not in wanted:
                continue
            fields = payload(rec)
            if fields is not None:
                item_id = f"mmqa:{doc_id}"
                out[item_id] = Item(item_id, modality, title=str(rec.get("title", "")), **fields)
    return out


def _load_texts(path: str | Path, wanted: set[str], skipped: Counter) -> dict[str, Item]:
    return _load_docs(path, wanted, Modality.TEXT, lambda rec: {"text": require(rec, "text", str)})


def _table_payload(rec: dict) -> dict[str, Any]:
    table = require(rec, "table", dict)
    header = [
        str(h["column_name"]) if isinstance(h, dict) else str(h)
        for h in require(table, "header", list)
    ]
    rows = [
        [str(c["text"]) if isinstance(c, dict) else str(c) for c in row]
        for row in require(table, "table_rows", list)
    ]
    return {"table": Table(header, rows, caption=str(table.get("table_name", "")))}


def _load_tables(path: str | Path, wanted: set[str], skipped: Counter) -> dict[str, Item]:
    return _load_docs(path, wanted, Modality.TABLE, _table_payload)


def _load_images(
    path: str | Path, wanted: set[str], images_dir: str | Path | None, skipped: Counter
) -> dict[str, Item]:
    root = Path(images_dir) if images_dir is not None else Path(path).parent / "final_dataset_images"

    def payload(rec: dict) -> dict[str, Any] | None:
        file = root / require(rec, "path", str)
        if not file.is_file():
            skipped["image_file_missing"] += 1
            return None
        return {"image": str(file)}

    return _load_docs(path, wanted, Modality.IMAGE, payload)


def _text_gold(item: Item, doc_id: str, entries: list[dict]) -> list[int]:
    """Sentences holding this doc's answer instances: the byte offset when it points at the
    instance text, else the first occurrence of that text."""
    text = item.text or ""
    raw = text.encode("utf-8")
    leaves = leaves_of(item)
    out: set[int] = set()
    for entry in entries:
        for inst in entry.get("text_instances") or []:
            if not isinstance(inst, dict) or str(inst.get("doc_id")) != doc_id:
                continue
            needle = str(inst.get("text", ""))
            span = None
            start_byte = inst.get("start_byte")
            if isinstance(start_byte, int) and 0 <= start_byte <= len(raw):
                s = len(raw[:start_byte].decode("utf-8", errors="ignore"))
                if needle and text.startswith(needle, s):
                    span = (s, s + len(needle))
            span = span or find_span(text, needle)
            if span is not None:
                out.update(leaves_overlapping(leaves, *span))
    return sorted(out)


def read(
    path: Path,
    texts: str | Path | None = None,
    tables: str | Path | None = None,
    images: str | Path | None = None,
    images_dir: str | Path | None = None,
    strict: bool = True,
) -> Benchmark:
    """Read MMQA questions; ``texts``/``tables``/``images`` add the official context files."""
    skipped: Counter = Counter()
    raw: list[tuple[Question, dict]] = []
    wanted: dict[str, set[str]] = {"text": set(), "table": set(), "image": set()}
    for index, rec in enumerate(iter_records(path)):
        with record_guard(path, index, rec, skipped, strict):
            qid = str(require(rec, "qid", str))
            text = require(rec, "question", str)
            answers = [str(a["answer"]) for a in require(rec, "answers", list)]
            meta_in = rec.get("metadata") or {}
            support = [
                (str(s["doc_id"]), str(s["doc_part"])) for s in require(rec, "supporting_context", list)
            ]
            ctx = {
                "table": [str(meta_in["table_id"])] if meta_in.get("table_id") else [],
                "text": [str(x) for x in meta_in.get("text_doc_ids") or []],
                "image": [str(x) for x in meta_in.get("image_doc_ids") or []],
            }
            for part, ids in ctx.items():
                wanted[part].update(ids)
            for doc_id, part in support:
                if part not in wanted:
                    raise ValueError(f"supporting_context doc_part must be text/table/image, got {part!r}")
                wanted[part].add(doc_id)
            meta: dict[str, Any] = {
                "gold_ids": [[d, p] for d, p in support],
                "modalities": meta_in.get("modalities", []),
                "type": meta_in.get("type"),
                "context_ids": ctx,
                "doc": f"mmqa:{ctx['table'][0]}"
                if ctx["table"]
                else (f"mmqa:{support[0][0]}" if support else qid),
            }
            raw.append((Question(qid, text, answers, "mmqa", {}, meta=meta), rec))
    items: dict[str, Item] = {}
    if texts is not None:
        items.update(_load_texts(texts, wanted["text"], skipped))
    if tables is not None:
        items.update(_load_tables(tables, wanted["table"], skipped))
    if images is not None:
        items.update(_load_images(images, wanted["image"], images_dir, skipped))

    bench = Benchmark("mmqa", [], items, {}, skipped, {"path": str(path)})
    for index, (q, rec) in enumerate(raw):
        if bench.repeats_question(q.id):
            continue
        with record_guard(path, index, rec, skipped, strict):
            entries = _answer_entries(rec)
            gold: dict[str, list[int]] = {}
            for doc_id, part in q.meta["gold_ids"]:
                item_id = f"mmqa:{doc_id}"
                item = items.get(item_id)
                if item is None:
                    continue
                if part == "text":
                    gold[item_id] = _text_gold(item, doc_id, entries)
                elif part == "table":
                    n = len(item.table.rows)  # type: ignore[union-attr]
                    rows = {
                        int(ix[0])
                        for e in entries
                        for ix in e.get("table_indices") or []
                        if 0 <= int(ix[0]) < n
                    }
                    gold[item_id] = sorted(rows)
                else:
                    gold[item_id] = [0]
            if len(gold) < len(q.meta["gold_ids"]):
                skipped["gold_context_unavailable"] += 1
            q.gold = gold
            ctx = q.meta["context_ids"]
            cands = [f"mmqa:{d}" for part in ("table", "text", "image") for d in ctx[part] if f"mmqa:{d}" in items]
            bench.add_question(q, cands)
    return bench
