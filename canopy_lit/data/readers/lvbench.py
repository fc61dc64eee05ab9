"""LVBench reader (the UniversalRAG rewrite, ``lvbench.json``).

Record: ``{"index", "question": "<stem>\\n(A) ..\\n(B) ..", "answer": "<letter>",
"time_reference": [start_s, end_s], "gt_videos": ["<rel path>.mp4"], ...}``.

A question becomes ``Question(text=<stem>, choices=[option texts], answers=[letter])``.
The gold item is the whole video (``lvbench:<video id>``), gold leaves the 30-s
clips overlapping ``time_reference``. Video files are looked up under
``video_root``; the duration comes from the file, else from the record
(``duration``) or a ``durations`` map (video id -> seconds). When neither exists
the question is still returned, without gold, and counted as
``skipped["missing_video"]`` (the bundled file: no videos ship with it).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from canopy_lit.data.base import Benchmark
from canopy_lit.data.readers._io import load_json, require
from canopy_lit.data.readers._video import VideoQuestion, read_video_benchmark

_OPTION = re.compile(r"^\(([A-Z])\)\s*(.*)$")


def split_choices(question: str) -> tuple[str, list[str], list[str]]:
    """'stem\\n(A) x\\n(B) y' -> (stem, ['x', 'y'], ['A', 'B'])."""
    stem, choices, letters = [], [], []
    for line in question.splitlines():
        m = _OPTION.match(line.strip())
        if m:
            letters.append(m.group(1))
            choices.append(m.group(2).strip())
        elif choices:  # an option's text wrapped onto the next line
            choices[-1] += " " + line.strip()
        else:
            stem.append(line)
    return "\n".join(stem).strip(), choices, letters


def _durations(durations: str | Path | dict[str, float] | None) -> dict[str, float]:
    if durations is None:
        return {}
    if isinstance(durations, dict):
        return {str(k): float(v) for k, v in durations.items()}
    return {str(k): float(v) for k, v in load_json(durations).items()}


def read(
    path: Path,
    video_root: str | Path | None = None,
    durations: str | Path | dict[str, float] | None = None,
    strict: bool = True,
) -> Benchmark:
    """Read LVBench questions; videos resolved under ``video_root``."""
    dur = _durations(durations)

    def parse(rec: dict) -> VideoQuestion:
        qid = str(require(rec, "index", (str, int)))
        raw = require(rec, "question", str)
        stem, choices, letters = split_choices(raw)
        answer = str(require(rec, "answer", str)).strip().strip("()")
        if letters and answer not in letters:
            raise ValueError(f"answer {answer!r} is not one of the options {letters}")
        t0, t1 = (float(x) for x in require(rec, "time_reference", list)[:2])
        videos = [str(v) for v in require(rec, "gt_videos", list)]
        if not videos:
            raise ValueError("gt_videos is empty")
        video_id = Path(videos[0]).stem
        meta: dict[str, Any] = {
            "doc": f"lvbench:{video_id}",
            "gold_ids": [[video_id, "video"]],
            "time_reference": [t0, t1],
            "raw_question": raw,
        }
        seconds = rec.get("duration", dur.get(video_id))
        return VideoQuestion(qid, stem, [answer], videos[0], t0, t1, seconds, choices or None, meta)

    return read_video_benchmark("lvbench", path, video_root, strict, parse)
