"""Benchmark readers, the reader registry and deterministic splits.

``load_benchmark(name, path=None, **options) -> Benchmark`` reads one benchmark file
in its official format (or the bundled sample); ``split_questions(bench, split)``
gives a deterministic split, disjoint by source document; ``python -m
canopy_lit.data stats --json`` prints the counts. Benchmarks are registered in
``canopy_lit.data.base.BENCHMARKS`` (the one place to add one); training instances come
from ``canopy_lit.supervision.training_instances``.
"""

from canopy_lit.data.base import BENCHMARKS, Benchmark, BenchmarkSpec, bundled_benchmarks, project_data_dir
from canopy_lit.data.benchmark import load_benchmark
from canopy_lit.data.readers._io import DataFormatError
from canopy_lit.data.splits import assign_splits, load_split, split_questions, split_report

__all__ = [
    "BENCHMARKS",
    "Benchmark",
    "BenchmarkSpec",
    "DataFormatError",
    "assign_splits",
    "bundled_benchmarks",
    "load_benchmark",
    "load_split",
    "project_data_dir",
    "split_questions",
    "split_report",
]
