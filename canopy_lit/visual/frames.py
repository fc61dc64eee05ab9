"""Pixels for ``Frame`` objects: image files opened with PIL, video frames decoded with PyAV by timestamp."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from PIL import Image

from canopy_lit.hierarchy.base import Frame
from canopy_lit.hierarchy.video import decode_frames


def open_image(path: str | Path) -> Image.Image:
    """An image file as RGB; a clear error naming the file when it is missing or unreadable."""
    try:
        with Image.open(path) as im:
            return im.convert("RGB")
    except FileNotFoundError as err:
        raise FileNotFoundError(f"image file not found: {path}") from err
    except OSError as err:  # PIL.UnidentifiedImageError is an OSError
        raise ValueError(f"{path}: not a readable image ({err})") from err


def load_frames(frames: Sequence[Frame]) -> list[Image.Image]:
    """RGB images for ``frames``, in input order; each video file is opened once for all its timestamps."""
    out: list[Image.Image | None] = [None] * len(frames)
    by_video: dict[str, list[int]] = defaultdict(list)
    for i, f in enumerate(frames):
        if f.t is None:
            out[i] = open_image(f.path)
        else:
            by_video[f.path].append(i)
    for path, idx in by_video.items():
        if not Path(path).is_file():
            raise FileNotFoundError(f"video file not found: {path}")
        for i, im in zip(idx, decode_frames(path, [frames[i].t for i in idx])):
            out[i] = im.convert("RGB")
    return [im for im in out if im is not None]


@lru_cache(maxsize=4096)
def _video_size(path: str) -> tuple[int, int]:
    import av

    if not Path(path).is_file():
        raise FileNotFoundError(f"video file not found: {path}")
    with av.open(path) as container:
        cc = container.streams.video[0].codec_context
        return int(cc.width), int(cc.height)


def frame_size(frame: Frame) -> tuple[int, int]:
    """(width, height) of a frame from file metadata, without decoding pixels."""
    if frame.t is not None:
        return _video_size(frame.path)
    try:
        with Image.open(frame.path) as im:
            return im.size
    except FileNotFoundError as err:
        raise FileNotFoundError(f"image file not found: {frame.path}") from err
