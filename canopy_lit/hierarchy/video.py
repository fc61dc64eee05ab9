"""Video items: leaves are 30-s clips of the segment; nodes carry frames sampled at 1 frame / 10 s.

Frames are only *timestamps* until someone needs pixels: ``decode_frames`` opens the
file with PyAV and seeks to each timestamp, so building trees for a long video is free.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from canopy_lit.hierarchy.base import Frame, NodeInput, TreeBuilder, describer_fingerprint, with_elisions
from canopy_lit.types import Item, Leaf, Modality, Tree

# Leaves one video tree may have: 100k 30-s clips are 833 h of video, far past any real recording.
MAX_CLIPS = 100_000


@lru_cache(maxsize=1024)
def video_duration(path: str) -> float:
    """Duration of a video file in seconds (container metadata, else the last decoded frame)."""
    import av

    try:
        with av.open(path) as container:
            if container.duration is not None:
                return container.duration / 1_000_000  # microseconds (av.time_base)
            stream = container.streams.video[0]
            if stream.duration is not None and stream.time_base is not None:
                return float(stream.duration * stream.time_base)
            last = 0.0
            for frame in container.decode(stream):
                last = float(frame.time or last)
            return last
    except (av.error.FileNotFoundError, FileNotFoundError) as err:
        raise FileNotFoundError(f"video file not found: {path}") from err


def sample_times(t_start: float, t_end: float, interval: float = 10.0, max_frames: int = 32) -> list[float]:
    """Frame timestamps for a window: one per ``interval`` seconds at the interval midpoints,
    at least one, evenly thinned to ``max_frames`` (keeps parents of long videos bounded)."""
    span = max(t_end - t_start, 0.0)
    n = max(1, math.ceil(span / interval - 1e-9))
    # Midpoint of each interval window (the last window may be shorter).
    times = [t_start + (i * interval + min((i + 1) * interval, span)) / 2 for i in range(n)]
    if len(times) > max_frames:
        step = len(times) / max_frames
        times = [times[int((j + 0.5) * step)] for j in range(max_frames)]
    return times


def decode_frames(path: str, times: Sequence[float]):
    """Decode the frames nearest to ``times`` (seconds) as PIL images, seeking per timestamp."""
    import av

    out = []
    with av.open(path) as container:
        stream = container.streams.video[0]
        for t in times:
            container.seek(int(t * 1_000_000), backward=True, any_frame=False)  # av.time_base units
            chosen = None
            for frame in container.decode(stream):
                chosen = frame
                if frame.time is not None and frame.time >= t:
                    break
            if chosen is None:
                raise ValueError(f"{path}: no frame decodable at {t:.1f}s")
            out.append(chosen.to_image())
    return out


def clock(t: float) -> str:
    """``t`` seconds as ``MM:SS`` (``H:MM:SS`` from an hour on), the time stamp renderers put before a clip."""
    t = int(round(t))
    return f"{t // 3600:d}:{t % 3600 // 60:02d}:{t % 60:02d}" if t >= 3600 else f"{t // 60:02d}:{t % 60:02d}"


class VideoTreeBuilder(TreeBuilder):
    """30-s clip leaves (last one shorter); a node's frames: 1 per ``frame_interval`` s, at most ``max_frames``.

    Args:
        clip_seconds: leaf length.
        frame_interval: seconds between sampled frames.
        max_frames: cap per node, so a root over hours of video stays a fixed-size input.
        describer: optional frame -> text function (the CPU visual path); without it a node's
            text is its title and time window only.
    """

    modality = Modality.VIDEO

    def __init__(
        self,
        clip_seconds: float = 30.0,
        frame_interval: float = 10.0,
        max_frames: int = 32,
        describer: Callable[[Frame], str] | None = None,
    ) -> None:
        self.clip_seconds = clip_seconds
        self.frame_interval = frame_interval
        self.max_frames = max_frames
        self.describer = describer

    def render_options(self) -> dict[str, Any]:
        # Leaf windows, the frames a node carries and the text of its frames all enter node_input.
        return {
            "clip_seconds": float(self.clip_seconds),
            "frame_interval": float(self.frame_interval),
            "max_frames": int(self.max_frames),
            "describer": describer_fingerprint(self.describer),
        }

    def leaves(self, item: Item) -> list[Leaf]:
        assert item.video is not None
        start = item.video.start
        end = item.video.end if item.video.end is not None else video_duration(item.video.path)
        if not (math.isfinite(start) and math.isfinite(end)):
            raise ValueError(f"video item {item.id!r}: segment [{start}, {end}) is not finite")
        if end <= start:
            raise ValueError(f"video item {item.id!r}: empty segment [{start}, {end})")
        n = max(1, math.ceil((end - start) / self.clip_seconds - 1e-9))
        if n > MAX_CLIPS:  # an `end` far past the video's duration: never build (or hang on) such a tree
            raise ValueError(
                f"video item {item.id!r}: segment [{start:g}, {end:g}) s makes {n:.3g} clips of {self.clip_seconds:g} s, "
                f"more than the {MAX_CLIPS} a video tree holds ({MAX_CLIPS * self.clip_seconds / 3600:g} h): "
                "is its end past the video's duration?"
            )
        return [
            Leaf(i, t_start=start + i * self.clip_seconds, t_end=min(start + (i + 1) * self.clip_seconds, end))
            for i in range(n)
        ]

    def window(self, tree: Tree, node_id: int) -> tuple[float, float]:
        return tree.leaves[int(tree.starts[node_id])].t_start, tree.leaves[int(tree.ends[node_id]) - 1].t_end

    def frames(self, tree: Tree, node_id: int) -> list[Frame]:
        assert tree.item.video is not None
        t0, t1 = self.window(tree, node_id)
        return [Frame(tree.item.video.path, t) for t in sample_times(t0, t1, self.frame_interval, self.max_frames)]

    def _describe(self, tree: Tree, start: int, end: int) -> str:
        t0, t1 = tree.leaves[start].t_start, tree.leaves[end - 1].t_end
        head = f"[{clock(t0)}-{clock(t1)}]"
        if self.describer is None:
            return head
        assert tree.item.video is not None
        descs = [
            f"{clock(f.t or 0.0)} {self.describer(f)}"
            for f in (Frame(tree.item.video.path, t) for t in sample_times(t0, t1, self.frame_interval, self.max_frames))
        ]
        return head + " " + "; ".join(descs)

    def node_input(self, tree: Tree, node_id: int) -> NodeInput:
        text = self._describe(tree, int(tree.starts[node_id]), int(tree.ends[node_id]))
        title = tree.item.title
        return NodeInput(f"{title} {text}" if title else text, self.frames(tree, node_id))

    def evidence_text(self, tree: Tree, node_ids: Sequence[int]) -> str:
        body = with_elisions(tree, node_ids, lambda s, e: self._describe(tree, s, e), "\n")
        return f"[video] {tree.item.title}\n{body}"
