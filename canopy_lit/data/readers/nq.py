"""NQ-open "oracle" reader (the lost-in-the-middle ``nq-open-oracle.jsonl.gz`` layout).

Record: ``{"question", "answers": [...], "ctxs": [...], "nq_annotated_gold": {"title",
"long_answer", "chunked_long_answer", "short_answers": [...]}}``. The item is the gold
long-answer paragraph (title + text, sentences by blingfire as the text tree builder
splits them); gold leaves are the sentences holding the first occurrence of a short
answer (``str.find``; then case/whitespace-insensitive). A question whose span is
found nowhere keeps its paragraph as whole-gold (``[]``) and is counted in
``skipped["gold_span_not_located"]``.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

from canopy_lit.data.base import Benchmark
from canopy_lit.data.readers._gold import locate_sentences
from canopy_lit.data.readers._io import iter_records, record_guard, require
from canopy_lit.types import Item, Modality, Question


def question_id(text: str, index: int) -> str:
    """An id for a question record that has none (NQ-open, Hugging Face rows without ``id``)."""
    # NQ-open has no ids: question text hash + line number keeps duplicates apart.
    return f"nq-{index}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


def read(path: Path, strict: bool = True) -> Benchmark:
    """Read an NQ-open oracle JSONL(.gz) file."""
    items: dict[str, Item] = {}
    skipped: Counter = Counter()
    bench = Benchmark("nq", [], items, {}, skipped, {"path": str(path)})
    leaf_cache: dict = {}
    for index, rec in enumerate(iter_records(path)):
        with record_guard(path, index, rec, skipped, strict):
            text = require(rec, "question", str)
            answers = [str(a) for a in require(rec, "answers", list)]
            qid = str(rec.get("id", question_id(text, index)))
            if bench.repeats_question(qid):
                continue
            gold_rec = require(rec, "nq_annotated_gold", dict)
            title = str(gold_rec.get("title", ""))
            body = require(gold_rec, "long_answer", str)
            shorts = [str(s) for s in gold_rec.get("short_answers") or answers]
            if not body.strip():
                skipped["empty_gold_paragraph"] += 1
                bench.add_question(Question(qid, text, answers, "nq", {}, meta={"doc": f"nq:page:{title}"}), [])
                continue
            digest = hashlib.sha1(f"{title}\n{body}".encode()).hexdigest()[:12]
            item_id = f"nq:{title}#{digest}"
            if item_id not in items:
                items[item_id] = Item(item_id, Modality.TEXT, title=title, text=body)
            leaves = locate_sentences(items[item_id], dict.fromkeys(shorts + answers), leaf_cache)
            if not leaves:
                skipped["gold_span_not_located"] += 1
            # The source document is the Wikipedia page: two paragraphs of one page share a split.
            meta = {"doc": f"nq:page:{title}", "short_answers": shorts}
            bench.add_question(Question(qid, text, answers, "nq", {item_id: leaves}, meta=meta), [item_id])
    return bench
