"""HotpotQA-format reader (also 2WikiMultiHopQA / MuSiQue converted to this format).

Accepted layouts, JSON or JSONL, ``.gz`` or not:

- official list: ``[{"_id" | "id", "question", "answer", "supporting_facts": [[title, sent_id]],
  "context": [[title, [sentences]]]}, ...]``;
- Hugging Face records: ``supporting_facts = {"title": [...], "sent_id": [...]}``,
  ``context = {"title": [...], "sentences": [[...]]}``;
- Hugging Face columns (a whole file of dict-of-lists): ``{"id": [...], "question": [...], ...}``.

Items are the context paragraphs (their pre-split sentences are the leaves);
gold = the supporting sentences. Files without ``supporting_facts`` (test sets)
load with empty gold. A file whose name says ``train`` is the train split, one
that says ``dev``/``test``/``val`` the test split (``Question.meta["split"]``);
other names are split by hash (``canopy_lit.data.splits``).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from canopy_lit.data.base import Benchmark
from canopy_lit.data.readers._io import DataFormatError, iter_records, record_guard, require
from canopy_lit.types import Item, Modality, Question

_SUFFIXES = (".json", ".jsonl", ".json.gz", ".jsonl.gz", ".ndjson")


def file_split(path: Path) -> str | None:
    """Split implied by a file name: train / test (dev, test, val files) / None (no hint)."""
    name = path.name.lower()
    if "train" in name:
        return "train"
    if any(k in name for k in ("dev", "test", "val")):
        return "test"
    return None


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.name.lower().endswith(_SUFFIXES))
        if not files:
            raise FileNotFoundError(f"no .json/.jsonl files in {path}")
        return files
    return [path]


def _records(path: Path) -> Iterator[Any]:
    """Records of any accepted layout, the column layout transposed into records."""
    for rec in iter_records(path):
        if isinstance(rec, dict) and isinstance(rec.get("data"), list):  # {"data": [...]} wrapper
            yield from rec["data"]
        elif isinstance(rec, dict) and isinstance(rec.get("question"), list):  # HF dict-of-lists columns
            cols = {k: v for k, v in rec.items() if isinstance(v, list)}
            n = len(rec["question"])
            bad = [k for k, v in cols.items() if len(v) != n]
            if bad:
                raise DataFormatError(path, f"column layout with unequal column lengths: {bad}")
            for i in range(n):
                yield {k: v[i] for k, v in cols.items()}
        else:
            yield rec


def _pairs(value: Any, a: str, b: str) -> list[tuple[Any, Any]]:
    """``[[x, y], ...]`` or ``{a: [x...], b: [y...]}`` -> list of (x, y)."""
    if isinstance(value, dict):
        xs, ys = value[a], value[b]
        if not isinstance(xs, list) or not isinstance(ys, list) or len(xs) != len(ys):
            raise TypeError(f"{a!r}/{b!r} must be lists of equal length")
        return list(zip(xs, ys, strict=True))
    if not isinstance(value, list):
        raise TypeError(f"expected a list of pairs or a dict of lists, got {type(value).__name__}")
    out = []
    for pair in value:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise TypeError(f"expected [{a}, {b}] pairs, got {pair!r:.80}")
        out.append((pair[0], pair[1]))
    return out


def read(path: Path, name: str = "hotpotqa", strict: bool = True) -> Benchmark:
    """Read one HotpotQA-format file or a folder of them.

    Args:
        path: file, or folder whose ``.json``/``.jsonl`` files are all read.
        name: benchmark name and item-id prefix (``2wikimultihopqa``, ``musique`` ...).
        strict: raise on a malformed record (default) or count it as ``skipped["malformed"]``.
    """
    sources = ((file, file_split(file), _records(file)) for file in _files(Path(path)))
    return read_records(sources, name, strict, path)


def read_records(
    sources: Iterable[tuple[Path, str | None, Iterable[Any]]],
    name: str = "hotpotqa",
    strict: bool = True,
    path: str | Path = "",
) -> Benchmark:
    """HotpotQA-format records of any origin (JSON files, a Hugging Face dataset) -> ``Benchmark``.

    Args:
        sources: (path named in errors and ``meta["file"]``, split or None, its records).
        name, strict: see ``read``. path: recorded in ``Benchmark.meta``.
    """
    items: dict[str, Item] = {}
    skipped: Counter = Counter()
    bench = Benchmark(name, [], items, {}, skipped, {"path": str(path)})
    for file, split, records in sources:
        for index, rec in enumerate(records):
            with record_guard(file, index, rec, skipped, strict):
                qid = str(rec.get("_id", rec.get("id"))) if isinstance(rec, dict) else None
                if qid is None or qid == "None":
                    raise KeyError("_id")
                if bench.repeats_question(qid):  # before its paragraphs join the pool
                    continue
                text = require(rec, "question", str)
                answer = rec.get("answer")
                answers = [str(answer)] if answer is not None else []
                answers += [str(a) for a in rec.get("answer_aliases", []) or [] if str(a) not in answers]
                by_title: dict[str, str] = {}
                cands: list[str] = []
                for title, sents in _pairs(require(rec, "context", (list, dict)), "title", "sentences"):
                    if not isinstance(sents, list):
                        raise TypeError(f"context paragraph {title!r}: sentences must be a list")
                    sentences = [str(s).strip() for s in sents]
                    item_id = _item_id(items, name, str(title), sentences)
                    if item_id not in items:
                        items[item_id] = Item(item_id, Modality.TEXT, title=str(title), sentences=sentences)
                    by_title[str(title)] = item_id
                    cands.append(item_id)
                gold: dict[str, list[int]] = {}
                facts = rec.get("supporting_facts")
                if facts is None:
                    skipped["no_gold_annotation"] += 1
                for title, sent_id in _pairs(facts or [], "title", "sent_id"):
                    item_id = by_title.get(str(title))
                    if item_id is None:
                        skipped["gold_title_not_in_context"] += 1
                        continue
                    n = len(items[item_id].sentences or [])
                    leaves = gold.setdefault(item_id, [])
                    if not isinstance(sent_id, int) or not 0 <= sent_id < n:
                        # Known HotpotQA quirk: a few sent_ids point past the paragraph.
                        skipped["gold_sentence_out_of_range"] += 1
                        continue
                    if sent_id not in leaves:
                        leaves.append(sent_id)
                meta: dict[str, Any] = {"doc": sorted(gold) or cands[:1]}
                for key in ("type", "level"):
                    if key in rec:
                        meta[key] = rec[key]
                if split is not None:
                    meta["split"] = split
                meta["file"] = file.name
                bench.add_question(
                    Question(qid, text, answers, name, {k: sorted(v) for k, v in gold.items()}, meta=meta), cands
                )
    return bench


def _item_id(items: dict[str, Item], prefix: str, title: str, sentences: list[str]) -> str:
    """``prefix:title``; a different paragraph under an already-used title gets a content-hash suffix."""
    base = f"{prefix}:{title}"
    if base not in items or items[base].sentences == sentences:
        return base
    digest = hashlib.sha1("\n".join(sentences).encode()).hexdigest()[:10]
    return f"{base}#{digest}"
