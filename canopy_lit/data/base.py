"""What a benchmark reader returns (``Benchmark``) and the registry of readers (``BENCHMARKS``).

Readers import ``Benchmark`` from here, and the registry names each reader by its import path,
so this module imports no reader: no circle between the registry and the readers.

Own data needs no code: ``data=custom data.path=FILE`` reads questions, items and gold spans from JSONL or a
Hugging Face dataset on disk (``readers/custom.py``, docs/how-to/custom-data.md). A reader outside the
package needs no edit here either: ``data.reader=mypkg.readers.MyBench`` (a dotted path, ``resolve_reader``),
or ``register_benchmark`` from Python. A benchmark of the package: one reader module in
``canopy_lit/data/readers/`` with ``read(path, **options) -> Benchmark``, one entry in ``BENCHMARKS`` below
(the catalogue of names the library and training read), and ``configs/data/<name>.yaml`` with ``name: <key>``
and ``reader: <the entry's reader path>`` (tests/unit/test_data_readers_in_config.py keeps them equal).
"""

from __future__ import annotations

import inspect
import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from canopy_lit.data.readers._io import DataFormatError
from canopy_lit.dotted import locate
from canopy_lit.hierarchy import Hierarchy
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

    Invariants: every key of ``Question.gold`` is in ``items``; gold ids that could
    not be resolved to an item stay in ``Question.meta["gold_ids"]``. Question ids are unique:
    readers add questions with ``add_question``, which keeps the first record of an id and counts
    the others as ``skipped["duplicate_question"]`` (so does the constructor, for a given list).
    """

    name: str
    questions: list[Question]
    items: dict[str, Item]
    candidates: dict[str, list[str]]
    skipped: Counter = field(default_factory=Counter)
    meta: dict[str, Any] = field(default_factory=dict)
    _ids: set[str] = field(default_factory=set, init=False, repr=False)

    def __post_init__(self) -> None:
        given, self.questions = self.questions, []
        for q in given:
            self.add_question(q)

    def __repr__(self) -> str:
        return f"Benchmark({self.name!r}, questions={len(self.questions)}, items={len(self.items)})"

    def repeats_question(self, question_id: str) -> bool:
        """True when a question with this id was already read: the record is counted as
        ``skipped["duplicate_question"]`` and the reader skips it (a reader may ask before parsing it)."""
        if question_id in self._ids:
            self.skipped["duplicate_question"] += 1
            return True
        return False

    def add_question(self, question: Question, candidates: Sequence[str] | None = None) -> bool:
        """Append ``question`` (and the ids of the items delivered with it); False when its id repeats."""
        if self.repeats_question(question.id):
            return False
        self._ids.add(question.id)
        self.questions.append(question)
        if candidates is not None:
            self.candidates[question.id] = list(candidates)
        return True

    def answered(self, questions: Sequence[Question]) -> list[Question]:
        """The ``questions`` with a gold answer; the others count as ``skipped["no_answer"]``: an answer
        metric cannot score them (EM / F1 / Match / accuracy would be 0 whatever the reply)."""
        keep = [q for q in questions if any(str(a).strip() for a in q.answers)]
        if len(keep) < len(questions):
            self.skipped["no_answer"] += len(questions) - len(keep)
        return keep

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


def project_data_dir() -> Path:
    """Bundled data folder: ``$CANOPY_LIT_DATA`` or ``<repo>/data`` of a source checkout."""
    env = os.environ.get("CANOPY_LIT_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "data"


@dataclass(frozen=True)
class BenchmarkSpec:
    """Registry entry: the reader, the bundled default path (relative to the data dir) and reader defaults.

    Attributes:
        reader: the reader function, or its import path (``"canopy_lit.data.readers.nq.read"``,
            imported on first use so that the registry imports no reader).
    """

    reader: str | Callable[..., Benchmark]
    bundled: str | None
    description: str
    defaults: dict[str, Any] = field(default_factory=dict)

    def read_fn(self) -> Callable[..., Benchmark]:
        """The reader function (imports its module when ``reader`` is a path)."""
        return resolve_reader(self.reader)


def resolve_reader(reader: str | Callable[..., Any]) -> Callable[..., Benchmark]:
    """The function that reads a benchmark: ``read(path, **options) -> Benchmark``.

    Args:
        reader: a callable; a key of ``BENCHMARKS`` (``custom``, ``hotpotqa`` ...); or a dotted import path
            (``mypkg.readers.MyBench``) of a function, of a class with a ``read`` method (instantiated
            without arguments) or of a module with a ``read`` function.

    Raises:
        ImportError: the path does not import (the message names it). TypeError: it names no reader.
    """
    if isinstance(reader, str) and reader.lower() in BENCHMARKS:
        return BENCHMARKS[reader.lower()].read_fn()
    target: Any = reader
    if isinstance(reader, str):
        target = locate(reader, "reader")
    if inspect.ismodule(target) or inspect.isclass(target):
        what = "module" if inspect.ismodule(target) else "class"
        if not callable(getattr(target, "read", None)):
            raise TypeError(f"reader {reader!r}: the {what} has no read(path, **options) -> Benchmark")
        target = target.read if inspect.ismodule(target) else target().read
    if not callable(target):
        raise TypeError(f"reader {reader!r} is a {type(target).__name__}, not a function, class or module")
    return target


_READERS = "canopy_lit.data.readers"

BENCHMARKS: dict[str, BenchmarkSpec] = {
    "hotpotqa": BenchmarkSpec(
        f"{_READERS}.hotpotqa.read", "hotpotqa", "HotpotQA distractor (bundled: train 100 + dev 100)"
    ),
    "2wikimultihopqa": BenchmarkSpec(
        f"{_READERS}.hotpotqa.read", None, "2WikiMultiHopQA converted to HotpotQA format", {"name": "2wikimultihopqa"}
    ),
    "musique": BenchmarkSpec(
        f"{_READERS}.hotpotqa.read", None, "MuSiQue converted to HotpotQA format", {"name": "musique"}
    ),
    "nq": BenchmarkSpec(f"{_READERS}.nq.read", "nq/nq-open-oracle.jsonl.gz", "NQ-open with the annotated gold paragraph"),
    "ottqa": BenchmarkSpec(
        f"{_READERS}.ottqa.read",
        "ottqa/dev.traced.json",
        "OTT-QA dev (tables + linked passages)",
        {"tables": "ottqa/dev_tables_passages.json.gz"},
    ),
    "tatqa": BenchmarkSpec(f"{_READERS}.tatqa.read", "tatqa/tatqa_dataset_dev.json", "TAT-QA dev (table + paragraphs)"),
    "mmqa": BenchmarkSpec(
        f"{_READERS}.mmqa.read", "mmqa/MMQA_dev.jsonl.gz", "MultiModalQA dev (gold ids; contexts optional)"
    ),
    "lvbench": BenchmarkSpec(
        f"{_READERS}.lvbench.read",
        "lvbench/lvbench_universalrag.json",
        "LVBench, UniversalRAG rewrite (videos not bundled)",
        {"video_root": "lvbench/videos"},
    ),
    "vragbench": BenchmarkSpec(
        f"{_READERS}.vragbench.read", None, "V-RAGBench-style <query, evidence clip, answer> JSONL"
    ),
    "hf": BenchmarkSpec(
        f"{_READERS}.hf.read",
        None,
        "Hugging Face dataset on disk (save_to_disk / parquet / JSONL; layout=hotpotqa|nq|2wikimultihopqa|musique)",
    ),
    "custom": BenchmarkSpec(
        f"{_READERS}.custom.read",
        None,
        "Your questions, items and gold spans: JSONL / JSON or a Hugging Face dataset on disk (docs/how-to/custom-data.md)",
    ),
}


def register_benchmark(
    name: str,
    reader: str | Callable[..., Benchmark],
    description: str = "",
    bundled: str | None = None,
    defaults: dict[str, Any] | None = None,
    replace: bool = False,
) -> BenchmarkSpec:
    """Add a benchmark to ``BENCHMARKS`` from outside the package (for this process).

    Args:
        name: the key ``load_benchmark`` and ``data.name`` use (lower case).
        reader: the reader or its dotted path (see ``resolve_reader``), resolved here so a typo fails now.
        description: as in ``BenchmarkSpec``.
        bundled: see ``description``.
        defaults: see ``description``.
        replace: allow replacing an existing entry (otherwise a clash is a ValueError).
    """
    key = name.lower()
    if key in BENCHMARKS and not replace:
        raise ValueError(f"benchmark {key!r} is already registered (pass replace=True to change it)")
    resolve_reader(reader)
    spec = BenchmarkSpec(reader, bundled, description, dict(defaults or {}))
    BENCHMARKS[key] = spec
    return spec


def bundled_benchmarks() -> list[str]:
    """Names of the benchmarks whose data ships in ``data/``."""
    return [name for name, spec in BENCHMARKS.items() if spec.bundled is not None]
