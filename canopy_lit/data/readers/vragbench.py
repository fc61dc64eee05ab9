"""V-RAGBench-style triples <query, evidence clip, answer> as JSONL (the benchmark itself is not public here).

One JSON object per line::

    {"id": "q1",                      # unique question id (str)
     "query": "What does ...?",       # or "question"
     "answer": "a bicycle",           # str, or a list of acceptable answers
     "evidence": {"video": "ego4d/abc.mp4", "start": 120.0, "end": 150.0},
     "duration": 3600.0,              # optional: seconds, used when the file is absent
     "choices": ["...", "..."]}       # optional: multiple-choice options (answer = letter)

``evidence.video`` is resolved under ``video_root`` (absolute paths as is). The
gold item is the whole video, gold leaves the 30-s clips overlapping
``[start, end]``; the evidence window is kept in ``Question.meta["evidence"]`` for
clip-level retrieval recall. A video with no file and no ``duration`` is counted
as ``skipped["missing_video"]`` and its question keeps empty gold.
"""

from __future__ import annotations

from pathlib import Path

from canopy_lit.data.base import Benchmark
from canopy_lit.data.readers._io import require
from canopy_lit.data.readers._video import VideoQuestion, read_video_benchmark


def read(path: Path, video_root: str | Path | None = None, strict: bool = True) -> Benchmark:
    """Read a V-RAGBench-style JSONL file; ``video_root`` defaults to the file's folder."""
    root = Path(video_root) if video_root is not None else Path(path).parent

    def parse(rec: dict) -> VideoQuestion:
        qid = str(require(rec, "id", (str, int)))
        text = rec["query"] if "query" in rec else rec["question"]
        if not isinstance(text, str):
            raise TypeError(f"query is a {type(text).__name__}, expected str")
        answer = require(rec, "answer", (str, list))
        answers = [str(a) for a in answer] if isinstance(answer, list) else [answer]
        ev = require(rec, "evidence", dict)
        ref = str(require(ev, "video", str))
        t0, t1 = float(require(ev, "start", (int, float))), float(require(ev, "end", (int, float)))
        if t1 < t0:
            raise ValueError(f"evidence end {t1} before start {t0}")
        meta = {"doc": f"vragbench:{Path(ref).stem}", "evidence": {"video": ref, "start": t0, "end": t1}}
        return VideoQuestion(qid, text, answers, ref, t0, t1, rec.get("duration"), rec.get("choices"), meta)

    return read_video_benchmark("vragbench", path, root, strict, parse)
