"""One reader per benchmark: ``read(path, **options) -> Benchmark``.

Every reader streams its file, names file and record in errors
(``DataFormatError``), counts what it skips in ``Benchmark.skipped`` and computes
gold leaf indices on the leaves the tree builders produce (``_gold.leaves_of``).
``hf`` reads Hugging Face datasets on disk (save_to_disk, parquet, JSONL) of HotpotQA,
NQ-open, 2WikiMultiHopQA and MuSiQue in their hub layouts.
"""

from canopy_lit.data.readers._io import DataFormatError

__all__ = ["DataFormatError"]
