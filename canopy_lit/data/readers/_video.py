"""Video benchmarks shared by the LVBench and V-RAGBench readers: resolve the file, know the duration,
gold clips, and the read loop itself (``read_video_benchmark``)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from canopy_lit.data.base import Benchmark
from canopy_lit.data.readers._gold import clip_leaves, leaves_of
from canopy_lit.data.readers._io import iter_records, record_guard
from canopy_lit.hierarchy import video_duration
from canopy_lit.types import Item, Modality, Question, VideoRef


def resolve_video(video_root: str | Path | None, ref: str) -> Path | None:
    """The file for ``ref`` (as written in the benchmark): absolute, ``root/ref``, ``root/<name>`` or ``root/<stem>.*``."""
    p = Path(ref)
    if p.is_absolute() and p.is_file():
        return p
    if video_root is None:
        return None
    root = Path(video_root)
    for cand in (root / ref, root / p.name):
        if cand.is_file():
            return cand
    if root.is_dir():
        hits = sorted(root.glob(f"{p.stem}.*"))
        if hits:
            return hits[0]
    return None


def video_item(
    prefix: str,
    ref: str,
    video_root: str | Path | None,
    duration: float | None,
    items: dict[str, Item],
    skipped: Counter,
) -> Item | None:
    """The whole-video item for ``ref`` (created once), or None when neither file nor duration is known.

    A present file gives the duration (container metadata); an absent file still
    yields an item when the benchmark record (or a durations map) states the
    duration, so gold leaves and trees exist without pixels.
    """
    stem = Path(ref).stem
    item_id = f"{prefix}:{stem}"
    if item_id in items:
        return items[item_id]
    file = resolve_video(video_root, ref)
    if file is not None:
        try:
            duration = video_duration(str(file))
        except Exception:  # a corrupt file must not stop the whole benchmark
            skipped["unreadable_video"] += 1
            file = None
    if duration is not None and not math.isfinite(float(duration)):
        raise ValueError(f"duration of video {ref!r} is {duration!r}: give a finite number of seconds")
    if duration is None or duration <= 0:
        skipped["missing_video"] += 1
        return None
    path = str(file) if file is not None else str(Path(video_root or ".") / Path(ref).name)
    meta = {"video_id": stem, "available": file is not None}
    items[item_id] = Item(
        item_id, Modality.VIDEO, title="", video=VideoRef(path, 0.0, float(duration)), meta=meta
    )
    return items[item_id]


def clip_gold(item: Item, t0: float, t1: float, skipped: Counter) -> list[int]:
    """30-s clip leaves overlapping ``[t0, t1]``; ``[]`` (whole-gold) when the window lies outside the video."""
    gold = clip_leaves(leaves_of(item), float(t0), float(t1))
    if not gold:
        skipped["time_reference_outside_video"] += 1
    return gold


@dataclass
class VideoQuestion:
    """One parsed record of a video benchmark: the question and the window of the video holding its evidence.

    ``duration`` (seconds) is used when the video file is absent; ``video`` is the reference as
    written in the record (resolved by ``resolve_video``).
    """

    qid: str
    text: str
    answers: list[str]
    video: str
    t0: float
    t1: float
    duration: float | None = None
    choices: list[str] | None = None
    meta: dict[str, Any] = field(default_factory=dict)


def read_video_benchmark(
    name: str,
    path: Path,
    video_root: str | Path | None,
    strict: bool,
    parse: Callable[[dict], VideoQuestion],
) -> Benchmark:
    """Each record -> ``parse`` -> a question whose gold item is the whole video (``<name>:<video id>``) and
    whose gold leaves are the clips overlapping ``[t0, t1]``; the video is its only candidate."""
    items: dict[str, Item] = {}
    skipped: Counter = Counter()
    bench = Benchmark(name, [], items, {}, skipped, {"path": str(path), "video_root": str(video_root)})
    for index, rec in enumerate(iter_records(path)):
        with record_guard(path, index, rec, skipped, strict):
            q = parse(rec)
            if bench.repeats_question(q.qid):
                continue
            item = video_item(name, q.video, video_root, q.duration, items, skipped)
            gold = {item.id: clip_gold(item, q.t0, q.t1, skipped)} if item is not None else {}
            question = Question(q.qid, q.text, q.answers, name, gold, choices=q.choices, meta=q.meta)
            bench.add_question(question, [item.id] if item is not None else [])
    return bench
