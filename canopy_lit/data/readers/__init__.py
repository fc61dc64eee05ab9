"""One reader per benchmark: ``read(path, **options) -> Benchmark``.

Every reader streams its file, names file and record in errors
(``DataFormatError``), counts what it skips in ``Benchmark.skipped`` and computes
gold leaf indices on the leaves the tree builders produce (``gold_leaves``,
``locate_sentences``, ``leaves_of``: public, for readers written outside the package too).
``hf`` reads Hugging Face datasets on disk (save_to_disk, parquet, JSONL) of HotpotQA,
NQ-open, 2WikiMultiHopQA and MuSiQue in their hub layouts; ``custom`` reads any benchmark
written in its JSONL / Hugging Face format (docs/how-to/custom-data.md).
"""

from canopy_lit.data.readers._gold import clip_leaves, find_span, gold_leaves, leaves_of, locate_sentences
from canopy_lit.data.readers._io import DataFormatError, RecordError

__all__ = [
    "DataFormatError",
    "RecordError",
    "clip_leaves",
    "find_span",
    "gold_leaves",
    "leaves_of",
    "locate_sentences",
]
