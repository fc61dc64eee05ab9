"""Reader input for visual evidence: frames for a vision-language reader, describer text for a text-only one.

- ``evidence_parts(..., mode="frames")``: OpenAI-style content parts, a text part per kept time
  window followed by its frames as base64 JPEG ``image_url`` parts (what an OpenAI-compatible VL
  server, vLLM's ``LLM.chat`` and llama.cpp's multimodal server accept).
- ``evidence_parts(..., mode="text")``: one text part, the builder's evidence text (with a
  describer set on the builder, the frames' descriptions and timestamps).
- ``vllm_inputs``: vLLM's offline ``{"prompt", "multi_modal_data"}`` dict for ``LLM.generate``.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from PIL import Image

from canopy_lit.hierarchy.base import Frame, merged_ranges
from canopy_lit.hierarchy.video import VideoTreeBuilder, clock, sample_times
from canopy_lit.types import Modality, Tree
from canopy_lit.visual.frames import load_frames

ContentPart = dict[str, Any]


def jpeg_base64(image: Image.Image, max_side: int = 768, quality: int = 85) -> str:
    """Base64 JPEG of an image, downscaled so its longer side is at most ``max_side`` px."""
    im = image.convert("RGB")
    if max(im.size) > max_side:
        s = max_side / max(im.size)
        im = im.resize((max(1, round(im.width * s)), max(1, round(im.height * s))), Image.BICUBIC)
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=quality)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def image_part(
    image: Image.Image, max_side: int = 768, quality: int = 85, detail: str | None = None
) -> ContentPart:
    """An OpenAI-style ``image_url`` content part carrying the image as a data URL."""
    url: dict[str, Any] = {"url": f"data:image/jpeg;base64,{jpeg_base64(image, max_side, quality)}"}
    if detail:
        url["detail"] = detail
    return {"type": "image_url", "image_url": url}


def text_part(text: str) -> ContentPart:
    return {"type": "text", "text": text}


def evidence_frames(
    builder: VideoTreeBuilder, tree: Tree, node_ids: Sequence[int]
) -> list[tuple[str, list[Frame]]]:
    """(time-window label, frames) per merged kept range of a video tree, in time order.

    Touching kept nodes are merged first, so a window's frames follow the builder's sampling
    (1 per ``frame_interval`` s, at most ``max_frames``) over the merged window.
    """
    assert tree.item.video is not None
    out = []
    for s, e in merged_ranges(tree, node_ids):
        t0, t1 = tree.leaves[s].t_start, tree.leaves[e - 1].t_end
        times = sample_times(t0, t1, builder.frame_interval, builder.max_frames)
        out.append((f"[{clock(t0)}-{clock(t1)}]", [Frame(tree.item.video.path, t) for t in times]))
    return out


def evidence_parts(
    hierarchy: Any,
    tree: Tree,
    node_ids: Sequence[int],
    mode: Literal["frames", "text"] = "frames",
    max_side: int = 768,
) -> list[ContentPart]:
    """Content parts for one item's kept nodes.

    Args:
        hierarchy: a ``Hierarchy`` (its builders render the evidence).
        tree: the item's tree; node_ids: kept nodes.
        mode: ``frames`` for a vision-language reader, ``text`` for a text-only one.
        max_side: frame downscale bound for the JPEG parts.
    """
    item = tree.item
    if mode == "text" or item.modality not in (Modality.IMAGE, Modality.VIDEO):
        return [text_part(hierarchy.evidence_text(tree, node_ids))]
    if mode != "frames":
        raise ValueError(f"reader visual mode must be 'frames' or 'text', got {mode!r}")
    if item.modality == Modality.IMAGE:
        assert item.image is not None
        (im,) = load_frames([Frame(item.image)])
        return [text_part(hierarchy.evidence_text(tree, node_ids)), image_part(im, max_side)]
    builder = hierarchy.builder(item.modality)
    parts: list[ContentPart] = [text_part(f"[video] {item.title}".rstrip())]
    for label, frames in evidence_frames(builder, tree, node_ids):
        parts.append(text_part(label))
        parts.extend(image_part(im, max_side) for im in load_frames(frames))
    return parts


def user_message(question: str, parts: Sequence[ContentPart], instruction: str = "") -> dict[str, Any]:
    """A chat ``user`` message: optional instruction, the evidence parts, then the question."""
    content = (
        ([text_part(instruction)] if instruction else []) + list(parts) + [text_part(f"Question: {question}")]
    )
    return {"role": "user", "content": content}


def vllm_inputs(prompt: str, frames: Sequence[Frame], as_video: bool = False) -> dict[str, Any]:
    """vLLM offline input: ``{"prompt": ..., "multi_modal_data": {"image": [PIL...]}}``.

    ``prompt`` must already contain the model's image (or video) placeholders, as rendered by its
    chat template; ``as_video=True`` passes the frames as one video array (T, H, W, 3) instead.
    """
    images = load_frames(frames)
    if not as_video:
        return {"prompt": prompt, "multi_modal_data": {"image": images}}

    size = images[0].size
    video = np.stack([np.asarray(im.resize(size) if im.size != size else im) for im in images])
    return {"prompt": prompt, "multi_modal_data": {"video": video}}
