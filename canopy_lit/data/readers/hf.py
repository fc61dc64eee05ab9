"""Hugging Face ``datasets`` on disk: HotpotQA, NQ-open, 2WikiMultiHopQA and MuSiQue in their hub layouts.

Accepted inputs (local only: ``HF_DATASETS_OFFLINE=1``, nothing is downloaded):

- a ``save_to_disk`` folder (``Dataset`` or ``DatasetDict``; every split is read);
- a ``.parquet`` / ``.jsonl`` / ``.json`` file, or a folder of them (a hub snapshot such as
  ``distractor/validation-00000-of-00001.parquet``), read with ``load_dataset(..., streaming=True)``.

Layouts (``layout=auto`` detects them from the first record's fields):

- ``hotpotqa`` (``hotpot_qa``): ``id, question, answer, type, level, supporting_facts{title[], sent_id[]},
  context{title[], sentences[][]}``; ``2wikimultihopqa``: the same with ``_id`` and lists or dicts
  (JSON-string fields are decoded). Both go through the HotpotQA reader's gold mapping
  (``hotpotqa.read_records``).
- ``nq`` (``nq_open``): ``question, answer[]``; no gold passage, so questions load with empty gold and no
  candidates, counted in ``skipped["no_gold_paragraph"]`` (usable for QA over a corpus, not for training).
- ``musique``: ``id, question, answer, answer_aliases, paragraphs[{idx, title, paragraph_text,
  is_supporting}], question_decomposition[{answer, paragraph_support_idx}]``; gold leaves of a supporting
  paragraph = the sentences holding its hop's answer (``_gold.locate_sentences``), else whole-gold.

Split: a ``DatasetDict`` split or file name with ``train`` -> train, ``validation``/``dev``/``test`` -> test.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from canopy_lit.data.base import Benchmark
from canopy_lit.data.readers import hotpotqa
from canopy_lit.data.readers._gold import locate_sentences
from canopy_lit.data.readers._io import DataFormatError, record_guard, require
from canopy_lit.data.readers.nq import question_id
from canopy_lit.types import Item, Modality, Question

# Accepted layout names -> canonical layout (also the benchmark name and item-id prefix).
LAYOUTS = {
    "hotpotqa": "hotpotqa",
    "hotpot_qa": "hotpotqa",
    "nq": "nq",
    "nq_open": "nq",
    "2wikimultihopqa": "2wikimultihopqa",
    "2wiki": "2wikimultihopqa",
    "musique": "musique",
}
_FILES = (".parquet", ".jsonl", ".json", ".jsonl.gz", ".json.gz")
_SAVED = ("dataset_dict.json", "state.json")  # markers of a save_to_disk folder

Source = tuple[Path, str | None, Iterable[Any]]


def is_hf_dataset(path: str | Path) -> bool:
    """True for a ``save_to_disk`` folder, a parquet file or a folder holding parquet files."""
    p = Path(path)
    if p.is_file():
        return p.name.lower().endswith(".parquet")
    if p.is_dir():
        return any((p / m).is_file() for m in _SAVED) or any(p.rglob("*.parquet"))
    return False


def _datasets() -> Any:
    # Local files only: never let a missing file turn into a hub lookup.
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    import datasets

    datasets.config.HF_DATASETS_OFFLINE = True
    return datasets


def _rows(label: Path, ds: Iterable[Any]) -> Iterator[Any]:
    """The dataset's records; a read failure (corrupt parquet, bad JSON line) names file and record."""
    it = iter(ds)
    index = 0
    while True:
        try:
            rec = next(it)
        except StopIteration:
            return
        except Exception as err:  # pyarrow / datasets raise many types: report them all with the location
            raise DataFormatError(label, f"unreadable ({type(err).__name__}: {err})", record=index) from err
        yield rec
        index += 1


def open_sources(path: str | Path, split_of: Callable[[str], str | None] | None = None) -> list[Source]:
    """(label named in errors, split or None, records) for every split or file under ``path``.

    ``split_of``: split of a DatasetDict key or a file / folder name (default: the benchmarks' rule,
    train -> train, dev / validation / test -> test).
    """
    split_of = split_of or _split
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"Hugging Face dataset not found: {p}")
    datasets = _datasets()
    if p.is_dir() and any((p / m).is_file() for m in _SAVED):
        try:
            ds = datasets.load_from_disk(str(p))
        except Exception as err:
            raise DataFormatError(
                p, f"not a readable save_to_disk folder ({type(err).__name__}: {err})"
            ) from err
        if isinstance(ds, datasets.DatasetDict):
            return [(p / f"[{name}]", split_of(name), _rows(p / f"[{name}]", d)) for name, d in ds.items()]
        # A bare Dataset often has no split recorded: the folder name may still say train / validation.
        return [(p, split_of(str(ds.split) if ds.split is not None else p.name), _rows(p, ds))]
    files = (
        [p]
        if p.is_file()
        else sorted(f for f in p.rglob("*") if f.is_file() and f.name.lower().endswith(_FILES))
    )
    if not files:
        raise FileNotFoundError(f"no save_to_disk folder or .parquet/.jsonl/.json files in {p}")
    out: list[Source] = []
    for f in files:
        builder = "parquet" if f.name.lower().endswith(".parquet") else "json"
        try:
            ds = datasets.load_dataset(builder, data_files=str(f), split="train", streaming=True)
        except Exception as err:
            raise DataFormatError(f, f"not a readable {builder} file ({type(err).__name__}: {err})") from err
        out.append((f, split_of(f.name), _rows(f, ds)))
    return out


def _split(name: str) -> str | None:
    return hotpotqa.file_split(Path(name))


def detect_layout(record: Any) -> str:
    """Canonical layout of one record from its fields (raises ValueError when none fits)."""
    keys = set(record) if isinstance(record, dict) else set()
    if "paragraphs" in keys:
        return "musique"
    if {"context", "question"} <= keys:
        return "2wikimultihopqa" if "_id" in keys or "evidences" in keys else "hotpotqa"
    if "question" in keys and ("answer" in keys or "answers" in keys):
        return "nq"
    raise ValueError(
        f"no known layout has fields {sorted(keys)} (pass layout=hotpotqa|nq|2wikimultihopqa|musique)"
    )


def _decoded(rec: Any) -> Any:
    """HotpotQA-style record with JSON-string fields (some 2Wiki exports) decoded."""
    if not isinstance(rec, dict):
        return rec
    out = dict(rec)
    for key in ("context", "supporting_facts", "evidences"):
        if isinstance(out.get(key), str):
            try:
                out[key] = json.loads(out[key])
            except json.JSONDecodeError as err:
                raise ValueError(f"field {key!r} is a string that is not JSON ({err.msg})") from err
    return out


def _records_of(value: Any, what: str) -> list[dict[str, Any]]:
    """A list of dicts from a list of dicts or an HF dict-of-lists (``Sequence`` feature)."""
    if isinstance(value, dict):
        cols = list(value.values())
        n = len(cols[0]) if cols else 0
        if any(not isinstance(c, list) or len(c) != n for c in cols):
            raise TypeError(f"{what}: dict of lists with unequal lengths")
        return [{k: value[k][i] for k in value} for i in range(n)]
    if not isinstance(value, list) or not all(isinstance(x, dict) for x in value):
        raise TypeError(f"{what}: expected a list of objects, got {type(value).__name__}")
    return value


def read(path: Path, layout: str = "auto", name: str | None = None, strict: bool = True) -> Benchmark:
    """Read a Hugging Face dataset on disk into a ``Benchmark``.

    Args:
        path: ``save_to_disk`` folder, parquet/JSONL/JSON file, or a folder of such files.
        layout: ``auto`` | hotpotqa | nq | 2wikimultihopqa | musique (and the hub names ``hotpot_qa``,
            ``nq_open``); ``auto`` uses ``name`` when it is a layout, else the first record's fields.
        name: benchmark name and item-id prefix (default: the layout).
        strict: raise on a malformed record (default) or count it as ``skipped["malformed"]``.
    """
    sources = open_sources(path)
    key = layout.lower()
    if key == "auto" and name is not None and name.lower() in LAYOUTS:
        key = name.lower()
    if key == "auto":
        sources, key = _peek_layout(sources)
    if key not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; known: auto, {', '.join(sorted(LAYOUTS))}")
    canon = LAYOUTS[key]
    name = name or canon
    if canon in ("hotpotqa", "2wikimultihopqa"):
        decoded = [(label, split, (_decoded(r) for r in rows)) for label, split, rows in sources]
        bench = hotpotqa.read_records(decoded, name, strict, path)
    elif canon == "nq":
        bench = _read_nq(sources, name, strict)
    else:
        bench = _read_musique(sources, name, strict)
    bench.meta.update({"path": str(path), "layout": canon, "reader": "hf"})
    return bench


def _peek_layout(sources: list[Source]) -> tuple[list[Source], str]:
    """Detect the layout on the first record, putting it back in front of its source."""
    for i, (label, split, rows) in enumerate(sources):
        it = iter(rows)
        first = next(it, None)
        if first is None:
            continue
        try:
            found = detect_layout(first)
        except ValueError as err:
            raise DataFormatError(label, str(err), record=0) from err

        def chain(first: Any = first, it: Iterator[Any] = it) -> Iterator[Any]:
            yield first
            yield from it

        sources = [*sources[:i], (label, split, chain()), *sources[i + 1 :]]
        return sources, found
    raise DataFormatError(sources[0][0] if sources else "", "the dataset has no records")


def _read_nq(sources: list[Source], name: str, strict: bool) -> Benchmark:
    skipped: Counter = Counter()
    bench = Benchmark(name, [], {}, {}, skipped, {})
    n = 0  # running index over all splits keeps hashed ids of repeated questions apart
    for label, split, rows in sources:
        for index, rec in enumerate(rows):
            with record_guard(label, index, rec, skipped, strict):
                text = require(rec, "question", str)
                ans = rec.get("answer", rec.get("answers"))
                if ans is None:
                    raise KeyError("answer")
                answers = [str(a) for a in ans] if isinstance(ans, list) else [str(ans)]
                qid = str(rec["id"]) if rec.get("id") is not None else question_id(text, n)
                meta: dict[str, Any] = {"doc": f"{name}:question:{qid}", "file": label.name}
                if split is not None:
                    meta["split"] = split
                if bench.add_question(Question(qid, text, answers, name, {}, meta=meta), []):
                    skipped["no_gold_paragraph"] += 1
            n += 1
    return bench


def _read_musique(sources: list[Source], name: str, strict: bool) -> Benchmark:
    items: dict[str, Item] = {}
    skipped: Counter = Counter()
    bench = Benchmark(name, [], items, {}, skipped, {})
    leaf_cache: dict = {}
    for label, split, rows in sources:
        for index, rec in enumerate(rows):
            with record_guard(label, index, rec, skipped, strict):
                qid = str(require(rec, "id", (str, int)))
                if bench.repeats_question(qid):  # before its paragraphs join the pool
                    continue
                text = require(rec, "question", str)
                answers = [str(require(rec, "answer", str))]
                answers += [str(a) for a in rec.get("answer_aliases") or [] if str(a) not in answers]
                # The answer of each hop locates the gold sentences of that hop's supporting paragraph.
                needles: dict[int, list[str]] = {}
                for step in _records_of(rec.get("question_decomposition") or [], "question_decomposition"):
                    idx = step.get("paragraph_support_idx")
                    if idx is not None and step.get("answer"):
                        needles.setdefault(int(idx), []).append(str(step["answer"]))
                cands: list[str] = []
                gold: dict[str, list[int]] = {}
                for para in _records_of(require(rec, "paragraphs", (list, dict)), "paragraphs"):
                    title = str(require(para, "title", str))
                    body = require(para, "paragraph_text", str)
                    digest = hashlib.sha1(f"{title}\n{body}".encode()).hexdigest()[:12]
                    item_id = f"{name}:{title}#{digest}"
                    if item_id not in items:
                        items[item_id] = Item(item_id, Modality.TEXT, title=title, text=body)
                    cands.append(item_id)
                    if para.get("is_supporting"):
                        hop = needles.get(int(require(para, "idx", int)), []) or answers
                        leaves = locate_sentences(items[item_id], hop, leaf_cache)
                        if not leaves:
                            skipped["gold_span_not_located"] += 1
                        gold[item_id] = leaves
                meta: dict[str, Any] = {"doc": sorted(gold) or cands[:1], "file": label.name}
                if rec.get("answerable") is not None:
                    meta["answerable"] = bool(rec["answerable"])
                if split is not None:
                    meta["split"] = split
                bench.add_question(Question(qid, text, answers, name, gold, meta=meta), cands)
    return bench
