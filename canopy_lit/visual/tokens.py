"""Visual token counting: what a frame costs a vision-language reader (METHOD.md: reader evidence tokens).

With the reader's transformers processor the count is the processor's own (its
``_get_num_multimodal_tokens``, or an image processor's patch count over the merge size). Without
one, the documented fallback is Qwen3-VL's image rule (the paper's reader family):

- the frame is resized to multiples of 32 px (16-px patches merged 2x2 -> one token per 32x32 px),
  keeping the aspect ratio, with the pixel count clamped to [65,536, 16,777,216]
  (``shortest_edge`` / ``longest_edge`` of Qwen3-VL's image preprocessor);
- tokens = (H/32) x (W/32); e.g. a 768x576 frame -> 24 x 18 = 432 tokens, a 320x240 one -> 80.

``tokens_per_frame`` overrides both with a fixed figure (e.g. 85 for an OpenAI "low detail" image).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from canopy_lit.hierarchy.base import Frame
from canopy_lit.visual.frames import frame_size

QWEN3_VL_PATCH = 16
QWEN3_VL_MERGE = 2
QWEN3_VL_MIN_PIXELS = 64 * 32 * 32
QWEN3_VL_MAX_PIXELS = 16384 * 32 * 32


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen-VL resize rule: both sides multiples of ``factor``, aspect kept, area within [min, max]."""
    if min(height, width) <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    h = max(factor, round(height / factor) * factor)
    w = max(factor, round(width / factor) * factor)
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w


def qwen_vl_image_tokens(
    width: int,
    height: int,
    patch_size: int = QWEN3_VL_PATCH,
    merge_size: int = QWEN3_VL_MERGE,
    min_pixels: int = QWEN3_VL_MIN_PIXELS,
    max_pixels: int = QWEN3_VL_MAX_PIXELS,
) -> int:
    """Visual tokens of one image under the Qwen-VL rule (defaults: Qwen3-VL)."""
    factor = patch_size * merge_size
    h, w = smart_resize(height, width, factor, min_pixels, max_pixels)
    return (h // factor) * (w // factor)


class VisualTokenCounter:
    """Tokens a reader spends on frames.

    Args:
        processor: the reader's transformers processor or image processor (optional).
        tokens_per_frame: a fixed per-frame figure; wins over everything else when set.
        patch_size: the fallback Qwen-VL rule's geometry.
        merge_size: see ``patch_size``.
        min_pixels: see ``patch_size``.
        max_pixels: see ``patch_size``.
    """

    def __init__(
        self,
        processor: Any | None = None,
        tokens_per_frame: int | None = None,
        patch_size: int = QWEN3_VL_PATCH,
        merge_size: int = QWEN3_VL_MERGE,
        min_pixels: int = QWEN3_VL_MIN_PIXELS,
        max_pixels: int = QWEN3_VL_MAX_PIXELS,
    ) -> None:
        if tokens_per_frame is not None and tokens_per_frame < 0:
            raise ValueError(f"tokens_per_frame must be >= 0, got {tokens_per_frame}")
        self.processor = processor
        self.tokens_per_frame = tokens_per_frame
        self.geometry = dict(
            patch_size=patch_size, merge_size=merge_size, min_pixels=min_pixels, max_pixels=max_pixels
        )

    @property
    def source(self) -> str:
        """How counts are made: ``fixed``, ``processor`` or ``qwen3-vl-rule``."""
        if self.tokens_per_frame is not None:
            return "fixed"
        return "processor" if self.processor is not None else "qwen3-vl-rule"

    def image_tokens(self, width: int, height: int) -> int:
        """Tokens for one image of ``width`` x ``height`` pixels."""
        if self.tokens_per_frame is not None:
            return self.tokens_per_frame
        p = self.processor
        if p is not None:
            if hasattr(p, "_get_num_multimodal_tokens") and hasattr(p, "image_processor"):
                data = p._get_num_multimodal_tokens(image_sizes=[(height, width)])
                return int(data["num_image_tokens"][0])
            if hasattr(p, "get_number_of_image_patches"):  # a bare image processor (Qwen-VL family)
                merge = int(getattr(p, "merge_size", 1) or 1)
                return int(p.get_number_of_image_patches(height, width, {})) // merge**2
            for attr in ("num_image_tokens", "image_seq_length"):  # fixed-length readers (LLaVA, PaliGemma)
                if isinstance(getattr(p, attr, None), int):
                    return int(getattr(p, attr))
            raise TypeError(f"cannot count image tokens with {type(p).__name__}; pass tokens_per_frame")
        return qwen_vl_image_tokens(width, height, **self.geometry)

    def frame_tokens(self, frame: Frame) -> int:
        """Tokens for one frame; its size comes from file metadata (no decoding)."""
        if self.tokens_per_frame is not None:
            return self.tokens_per_frame
        return self.image_tokens(*frame_size(frame))

    def count(self, frames: Sequence[Frame]) -> int:
        """Total tokens of a node's or an evidence set's frames."""
        return sum(self.frame_tokens(f) for f in frames)
