"""Benchmark readers, the reader registry and deterministic splits.

``load_benchmark(name, path=None, **options) -> Benchmark`` reads one benchmark file
in its official format (or the bundled sample); ``split_questions(bench, split)``
gives a deterministic split, disjoint by source document; ``python -m
canopy_lit.data stats --json`` prints the counts. Benchmarks are registered in
``canopy_lit.data.base.BENCHMARKS``; your own data needs no code (``load_benchmark("custom", FILE)``,
docs/how-to/custom-data.md), a reader outside the package no registry edit
(``load_benchmark(name, FILE, reader="mypkg.readers.MyBench")`` or ``register_benchmark``).
``gold_leaves(item, spans)`` turns gold spans (strings, character offsets, seconds) into the leaf indices
of ``Question.gold``. Training instances come from ``canopy_lit.supervision.training_instances``.
"""

from canopy_lit.data.base import (
    BENCHMARKS,
    Benchmark,
    BenchmarkSpec,
    bundled_benchmarks,
    project_data_dir,
    register_benchmark,
    resolve_reader,
)
from canopy_lit.data.benchmark import load_benchmark
from canopy_lit.data.readers._gold import gold_leaves, leaves_of, locate_sentences
from canopy_lit.data.readers._io import DataFormatError
from canopy_lit.data.splits import assign_splits, load_split, split_questions, split_report

__all__ = [
    "BENCHMARKS",
    "Benchmark",
    "BenchmarkSpec",
    "DataFormatError",
    "assign_splits",
    "bundled_benchmarks",
    "gold_leaves",
    "leaves_of",
    "load_benchmark",
    "load_split",
    "locate_sentences",
    "project_data_dir",
    "register_benchmark",
    "resolve_reader",
    "split_questions",
    "split_report",
]
