"""Video items shared by the LVBench and V-RAGBench readers: resolve the file, know the duration, gold clips."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from canopy_lit.data.readers._gold import clip_leaves, leaves_of
from canopy_lit.hierarchy import video_duration
from canopy_lit.types import Item, Modality, VideoRef


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
