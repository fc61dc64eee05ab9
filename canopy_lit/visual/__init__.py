"""Visual evidence on CPU and GPU: frame describer (labels + OCR), visual token counts, reader messages, CLIP encoder.

``CLIPNodeEncoder`` is imported lazily (``from canopy_lit.visual.clip import CLIPNodeEncoder``) so
the describer path does not pull in the encoder stack.
"""

from __future__ import annotations

from canopy_lit.visual.describer import FrameDescriber, imagenet_labels, ocr_text, tesseract_available
from canopy_lit.visual.frames import frame_size, load_frames, open_image
from canopy_lit.visual.messages import evidence_parts, image_part, user_message, vllm_inputs
from canopy_lit.visual.tokens import VisualTokenCounter, qwen_vl_image_tokens

__all__ = [
    "FrameDescriber",
    "VisualTokenCounter",
    "evidence_parts",
    "frame_size",
    "image_part",
    "imagenet_labels",
    "load_frames",
    "ocr_text",
    "open_image",
    "qwen_vl_image_tokens",
    "tesseract_available",
    "user_message",
    "vllm_inputs",
]
