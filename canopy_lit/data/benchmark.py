"""A loaded benchmark (questions, items, candidates, skip counts), the reader registry and ``load_benchmark``."""

from __future__ import annotations

import inspect
import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from canopy_lit.data.readers._io import DataFormatError
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.supervision import Instance, instances_for
from canopy_lit.types import Item, Question, Tree


@dataclass
class Benchmark:
    """Questions of one benchmark with the items they are delivered with.

    Attributes:
        name: benchmark name (also ``Question.benchmark`` of every question).
        questions: in file order.
        items: item id -> item; ids are globally unique (``"<benchmark>:<source id>"``).
        candidates: question id -> ids of the items delivered with it (HotpotQA's
            10 paragraphs, a TAT-QA document, an OTT-QA table and its passages ...).
        skipped: reason -> count of records (or parts of records) not loaded.
        meta: where the data came from (paths, reader options).

    Invariant: every key of ``Question.gold`` is in ``items``; gold ids that could
    not be resolved to an item stay in ``Question.meta["gold_ids"]``.
    """

    name: str
    questions: list[Question]
    items: dict[str, Item]
    candidates: dict[str, list[str]]
    skipped: Counter = field(default_factory=Counter)
    meta: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"Benchmark({self.name!r}, questions={len(self.questions)}, items={len(self.items)})"

    def skip_metrics(self, prefix: str = "data/skipped") -> dict[str, float]:
        """``{prefix}/<reason>: count`` of everything the reader skipped (for metrics.json)."""
        return {f"{prefix}/{reason}": float(n) for reason, n in sorted(self.skipped.items()) if n}

    def skip_messages(self) -> list[str]:
        """One line per skip reason, naming the benchmark's file: what a user must be told."""
        where = self.meta.get("path", self.name)
        return [
            f"{self.name} ({where}): skipped {n} x {reason}" for reason, n in sorted(self.skipped.items()) if n
        ]

    def require(self, questions: Sequence[Question], what: str = "usable questions") -> None:
        """Raise ``DataFormatError`` naming the file when ``questions`` is empty (nothing to evaluate)."""
        if questions:
            return
        skipped = ", ".join(f"{r}: {n}" for r, n in sorted(self.skipped.items()) if n) or "none"
        raise DataFormatError(
            self.meta.get("path", self.name),
            f"no {what} ({len(self.questions)} question(s) read in all splits; skipped records: {skipped})",
        )

    def trees(self, hierarchy: Hierarchy, item_ids: Iterable[str]) -> dict[str, Tree]:
        """Trees of the given items under ``hierarchy`` (one build per item)."""
        return {i: hierarchy.build(self.items[i]) for i in dict.fromkeys(item_ids)}


def training_instances(
    bench: Benchmark, questions: Iterable[Question] | None = None, hierarchy: Hierarchy | None = None
) -> list[Instance]:
    """All (q, v, P(v)) instances of the gold items of ``questions`` (default: all) under ``hierarchy``.

    Gold items whose span was not located (empty leaf list) are whole-gold and
    yield nothing (METHOD.md §1.2). Trees are built once per item and shared.
    """
    hierarchy = hierarchy or Hierarchy(2)
    cache: dict[str, Tree] = {}
    out: list[Instance] = []
    for q in bench.questions if questions is None else questions:
        for item_id, gold in q.gold.items():
            if not gold:
                continue
            tree = cache.get(item_id)
            if tree is None:
                tree = cache[item_id] = hierarchy.build(bench.items[item_id])
            out.extend(instances_for(q.id, q.text, tree, gold, q.benchmark))
    return out


def project_data_dir() -> Path:
    """Bundled data folder: ``$CANOPY_LIT_DATA`` or ``<repo>/data`` of a source checkout."""
    env = os.environ.get("CANOPY_LIT_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "data"


@dataclass(frozen=True)
class BenchmarkSpec:
    """Registry entry: the reader, the bundled default path (relative to the data dir) and reader defaults."""

    reader: Callable[..., Benchmark]
    bundled: str | None
    description: str
    defaults: dict[str, Any] = field(default_factory=dict)


# Readers import ``Benchmark`` from this module, which is defined above this line.
from canopy_lit.data.readers import hf, hotpotqa, lvbench, mmqa, nq, ottqa, tatqa, vragbench  # noqa: E402

BENCHMARKS: dict[str, BenchmarkSpec] = {
    "hotpotqa": BenchmarkSpec(
        hotpotqa.read, "hotpotqa", "HotpotQA distractor (bundled: train 100 + dev 100)"
    ),
    "2wikimultihopqa": BenchmarkSpec(
        hotpotqa.read, None, "2WikiMultiHopQA converted to HotpotQA format", {"name": "2wikimultihopqa"}
    ),
    "musique": BenchmarkSpec(
        hotpotqa.read, None, "MuSiQue converted to HotpotQA format", {"name": "musique"}
    ),
    "nq": BenchmarkSpec(nq.read, "nq/nq-open-oracle.jsonl.gz", "NQ-open with the annotated gold paragraph"),
    "ottqa": BenchmarkSpec(
        ottqa.read,
        "ottqa/dev.traced.json",
        "OTT-QA dev (tables + linked passages)",
        {"tables": "ottqa/dev_tables_passages.json.gz"},
    ),
    "tatqa": BenchmarkSpec(tatqa.read, "tatqa/tatqa_dataset_dev.json", "TAT-QA dev (table + paragraphs)"),
    "mmqa": BenchmarkSpec(
        mmqa.read, "mmqa/MMQA_dev.jsonl.gz", "MultiModalQA dev (gold ids; contexts optional)"
    ),
    "lvbench": BenchmarkSpec(
        lvbench.read,
        "lvbench/lvbench_universalrag.json",
        "LVBench, UniversalRAG rewrite (videos not bundled)",
        {"video_root": "lvbench/videos"},
    ),
    "vragbench": BenchmarkSpec(vragbench.read, None, "V-RAGBench-style <query, evidence clip, answer> JSONL"),
    "hf": BenchmarkSpec(
        hf.read, None, "Hugging Face dataset on disk (save_to_disk / parquet / JSONL; layout=hotpotqa|nq|2wikimultihopqa|musique)"
    ),
}


def bundled_benchmarks() -> list[str]:
    """Names of the benchmarks whose data ships in ``data/``."""
    return [name for name, spec in BENCHMARKS.items() if spec.bundled is not None]


def load_extra_items(path: str | Path, root: str | Path | None = None) -> list[Item]:
    """``Item`` records (a JSON list, ``Item.to_dict`` layout) to add to a benchmark's pool.

    Relative ``image`` / ``video.path`` fields resolve under ``root`` (default: the file's folder).
    Raises ``DataFormatError`` naming the file and record for anything that is not a valid item.
    """
    path = Path(path)
    base = Path(root) if root is not None else path.parent
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise DataFormatError(path, f"not JSON ({err})") from err
    if not isinstance(records, list):
        raise DataFormatError(path, "expected a JSON list of item records")
    items = []
    for n, rec in enumerate(records):
        try:
            rec = dict(rec)
            if rec.get("image") and not Path(rec["image"]).is_absolute():
                rec["image"] = str(base / rec["image"])
            video = rec.get("video")
            if isinstance(video, dict) and video.get("path") and not Path(video["path"]).is_absolute():
                rec["video"] = {**video, "path": str(base / video["path"])}
            items.append(Item.from_dict(rec))
        except (TypeError, ValueError, KeyError) as err:
            raise DataFormatError(path, str(err), n, rec.get("id") if isinstance(rec, dict) else None) from err
    return items


def load_benchmark(
    name: str,
    path: str | Path | None = None,
    extra_items: str | Path | None = None,
    extra_items_root: str | Path | None = None,
    **options: Any,
) -> Benchmark:
    """Read a benchmark file (or the bundled sample when ``path`` is None).

    Args:
        name: a key of ``BENCHMARKS`` (hotpotqa, 2wikimultihopqa, musique, nq, ottqa,
            tatqa, mmqa, lvbench, vragbench).
        path: a file in the benchmark's official format (HotpotQA also takes a folder
            of files; ``*train*`` files become the train split, others test), or, for hotpotqa,
            nq, 2wikimultihopqa and musique, a Hugging Face ``save_to_disk`` folder or parquet
            file(s) in the hub layout (``readers/hf.py``; ``name="hf"`` with ``layout=`` also reads JSONL).
        extra_items: a JSON list of ``Item`` records added to the pool (e.g. the bundled photos as
            image distractors next to LVBench videos; ``retrieval.scope=benchmark`` ranks them all).
        extra_items_root: folder that relative media paths of ``extra_items`` resolve under.
        **options: reader options (e.g. OTT-QA ``tables``, LVBench ``video_root``);
            relative paths in the registry defaults resolve under the data folder.

    Raises:
        KeyError: unknown benchmark. ValueError: unknown reader option. FileNotFoundError: missing file.
        DataFormatError: malformed record (message names file and record).
    """
    key = name.lower()
    if key not in BENCHMARKS:
        raise KeyError(f"unknown benchmark {name!r}; known: {', '.join(sorted(BENCHMARKS))}")
    spec = BENCHMARKS[key]
    if path is not None and key in hf.LAYOUTS and hf.is_hf_dataset(path):
        # A save_to_disk folder or parquet files in the hub layout of this benchmark: same questions and gold.
        spec = BenchmarkSpec(hf.read, None, spec.description, {"name": key})
    data_dir = project_data_dir()
    if path is None:
        if spec.bundled is None:
            raise FileNotFoundError(
                f"benchmark {key!r} has no bundled data: pass path=<file in its official format>"
            )
        path = data_dir / spec.bundled
    kwargs: dict[str, Any] = {}
    for k, v in spec.defaults.items():
        # Registry defaults name bundled files relative to the data folder.
        kwargs[k] = str(data_dir / v) if isinstance(v, str) and k != "name" else v
    kwargs.update({k: v for k, v in options.items() if v is not None})
    accepted = set(inspect.signature(spec.reader).parameters) - {"path"}
    unknown = sorted(set(kwargs) - accepted)
    if unknown:
        raise ValueError(
            f"benchmark {key!r}: unknown reader option(s) {unknown}; accepted: {sorted(accepted)}"
        )
    bench = spec.reader(Path(path), **kwargs)
    bench.meta.setdefault("path", str(path))
    if extra_items is not None:
        extra = load_extra_items(extra_items, extra_items_root)
        clash = sorted(i.id for i in extra if i.id in bench.items)
        if clash:
            raise ValueError(f"{extra_items}: item ids already in {key!r}: {clash[:5]}")
        bench.items.update({i.id: i for i in extra})
        bench.meta["extra_items"] = str(extra_items)
    return bench
