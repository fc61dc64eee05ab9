"""The four clip representations of CARVE (METHOD.md §2): {visual, text} x {frame, clip}.

A *clip* is one 30-s leaf of a video tree (``VideoTreeBuilder.leaves``) with the frames the
builder samples in it (1 per 10 s). Each configuration turns every clip into retrieval units:

==============  ==========================================  ====================================
configuration   units per clip (vectors)                    text form (CPU reranker / text reader)
==============  ==========================================  ====================================
visual_frame    one visual embedding per sampled frame       the frame's description
visual_clip     one vector: mean of the frame embeddings     all frame descriptions with times
text_frame      one text embedding per frame caption         the frame's caption
text_clip       one text embedding of the clip summary       the clip summary
==============  ==========================================  ====================================

A frame-level configuration scores a clip by its best frame. Visual embeddings come from a
``VisualEmbedder``: ``EncoderVisualEmbedder`` wraps any ``NodeEncoder`` with an image path
(``CLIPNodeEncoder``, Qwen3-VL-Embedding); on CPU no image-text model exists, so
``DescribedFrameEmbedder`` embeds the CPU describer's text of each frame (ImageNet labels + OCR)
with the text encoder: a *text stand-in for a visual embedding*, documented as such in every
run's metadata (``VisualEmbedder.kind``). Text summaries come from a ``Summariser``: user captions
or subtitles (``CaptionSummariser``), a vision-language model (``LLMSummariser``), or the describer
(``DescriberSummariser``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
import torch.nn.functional as F

from canopy_lit.hierarchy.base import Frame, NodeInput
from canopy_lit.hierarchy.video import VideoTreeBuilder, clock, sample_times
from canopy_lit.types import Item, Modality

log = logging.getLogger(__name__)

VISUAL_FRAME, VISUAL_CLIP, TEXT_FRAME, TEXT_CLIP = "visual_frame", "visual_clip", "text_frame", "text_clip"
#: The four configurations, in the fixed order used to break ties everywhere.
CONFIGS: tuple[str, ...] = (VISUAL_FRAME, VISUAL_CLIP, TEXT_FRAME, TEXT_CLIP)


def check_config(name: str) -> str:
    """Canonical configuration name; accepts ``visual/frame`` or ``visual-frame`` spellings."""
    key = str(name).strip().lower().replace("/", "_").replace("-", "_")
    if key not in CONFIGS:
        raise ValueError(f"unknown CARVE configuration {name!r}; choose one of {', '.join(CONFIGS)}")
    return key


def modality_of(config: str) -> str:
    """``visual`` or ``text``."""
    return check_config(config).split("_")[0]


def is_frame_level(config: str) -> bool:
    return check_config(config).endswith("_frame")


# --------------------------------------------------------------------------- clips


@dataclass(frozen=True)
class Clip:
    """One leaf clip of a video: ``[start, end)`` seconds of ``path`` and its sampled frames."""

    id: str
    item_id: str
    video_id: str
    path: str
    index: int
    start: float
    end: float
    frames: tuple[Frame, ...]

    @property
    def label(self) -> str:
        return f"[{self.video_id} {clock(self.start)}-{clock(self.end)}]"


def video_clips(items: Iterable[Item], builder: VideoTreeBuilder | None = None) -> list[Clip]:
    """The leaf clips of every video item, in item then time order (non-video items are skipped).

    Args:
        items: video items (``Item.video`` set).
        builder: clip length and frame sampling (default: 30-s clips, 1 frame / 10 s).
    """
    builder = builder or VideoTreeBuilder()
    out: list[Clip] = []
    for item in items:
        if item.modality != Modality.VIDEO or item.video is None:
            continue
        path = item.video.path
        video_id = str(item.meta.get("video_id") or Path(path).stem)
        for leaf in builder.leaves(item):
            times = sample_times(leaf.t_start, leaf.t_end, builder.frame_interval, builder.max_frames)
            out.append(
                Clip(
                    id=f"{item.id}@{leaf.index}",
                    item_id=item.id,
                    video_id=video_id,
                    path=path,
                    index=leaf.index,
                    start=leaf.t_start,
                    end=leaf.t_end,
                    frames=tuple(Frame(path, t) for t in times),
                )
            )
    return out


# --------------------------------------------------------------------------- visual embedders


@runtime_checkable
class VisualEmbedder(Protocol):
    """Frames and queries in one space. ``kind`` says what the vectors really are (reported per run)."""

    kind: str

    def embed_frames(self, frames: Sequence[Frame]) -> torch.Tensor:
        """(N, D) L2-normalised frame embeddings."""
        ...

    def embed_queries(self, texts: Sequence[str]) -> torch.Tensor:
        """(N, D) L2-normalised query embeddings in the frames' space."""
        ...


def _describe_all(describe: Callable[[Frame], str], frames: Sequence[Frame]) -> list[str]:
    many = getattr(describe, "describe_many", None)  # FrameDescriber batches decoding + classification
    return list(many(frames)) if callable(many) else [describe(f) for f in frames]


class DescribedFrameEmbedder:
    """CPU stand-in for a visual embedding: describer text of each frame, embedded by the text encoder.

    Not a visual embedding: frames are seen only through ImageNet labels and OCR words. Kept
    behind the ``VisualEmbedder`` interface so a real CLIP / Qwen3-VL embedder replaces it by config.

    Args:
        describe: frame -> text (e.g. ``canopy_lit.visual.FrameDescriber``).
        encoder: a ``NodeEncoder`` (queries with f0, descriptions with fθ).
    """

    kind = "describer-text (CPU stand-in: frame labels + OCR embedded by the text encoder)"

    def __init__(self, describe: Callable[[Frame], str], encoder: Any) -> None:
        self.describe = describe
        self.encoder = encoder

    def embed_frames(self, frames: Sequence[Frame]) -> torch.Tensor:
        return self.encoder.encode_nodes(_describe_all(self.describe, frames))

    def embed_queries(self, texts: Sequence[str]) -> torch.Tensor:
        return self.encoder.encode_queries(list(texts))


class EncoderVisualEmbedder:
    """A native image-text embedder: any ``NodeEncoder`` that embeds ``NodeInput`` frames (CLIP, Qwen3-VL)."""

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder
        self.kind = f"native visual embedding ({getattr(encoder, 'name', type(encoder).__name__)})"

    def embed_frames(self, frames: Sequence[Frame]) -> torch.Tensor:
        return self.encoder.encode_nodes([NodeInput("", [f]) for f in frames])

    def embed_queries(self, texts: Sequence[str]) -> torch.Tensor:
        return self.encoder.encode_queries(list(texts))


# --------------------------------------------------------------------------- summarisers


@runtime_checkable
class Summariser(Protocol):
    """Text summaries of clips: one text per sampled frame and one per clip."""

    kind: str

    def frame_texts(self, clip: Clip) -> list[str]:
        """One text per ``clip.frames`` entry, same order."""
        ...

    def clip_text(self, clip: Clip) -> str: ...


class DescriberSummariser:
    """Summaries from the CPU describer: frame text = its description; clip text = all of them with times."""

    kind = "describer"

    def __init__(self, describe: Callable[[Frame], str]) -> None:
        self.describe = describe

    def frame_texts(self, clip: Clip) -> list[str]:
        return _describe_all(self.describe, clip.frames)

    def clip_text(self, clip: Clip) -> str:
        texts = self.frame_texts(clip)
        return "; ".join(f"{clock(f.t or 0.0)} {t}" for f, t in zip(clip.frames, texts))


@dataclass(frozen=True)
class Caption:
    video: str
    start: float
    end: float
    text: str


class CaptionSummariser:
    """User-supplied timestamped captions / subtitles / narrations (JSONL, one caption per line).

    Format: ``{"video": "bikes.mp4" | "bikes", "start": 2.2, "end": 3.4, "text": "..."}``; a
    caption belongs to the video whose file stem equals the stem of ``video``. A frame's text is
    the caption covering its timestamp (else the nearest caption inside the clip); a clip's text
    joins every caption overlapping the clip, in time order.
    """

    kind = "captions"

    def __init__(self, path: str | Path, empty: str = "(no caption)") -> None:
        self.path = Path(path)
        self.empty = empty
        self.by_video: dict[str, list[Caption]] = {}
        if not self.path.is_file():
            raise FileNotFoundError(f"captions file not found: {self.path}")
        for n, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                cap = Caption(Path(str(rec["video"])).stem, float(rec["start"]), float(rec["end"]), str(rec["text"]))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
                raise ValueError(f"{self.path}: line {n}: not a caption record {{video, start, end, text}} ({err})") from err
            if cap.end < cap.start:
                raise ValueError(f"{self.path}: line {n}: caption ends ({cap.end}) before it starts ({cap.start})")
            self.by_video.setdefault(cap.video, []).append(cap)
        for caps in self.by_video.values():
            caps.sort(key=lambda c: (c.start, c.end))

    def _overlapping(self, clip: Clip) -> list[Caption]:
        caps = self.by_video.get(Path(clip.path).stem) or self.by_video.get(clip.video_id) or []
        return [c for c in caps if c.end > clip.start and c.start < clip.end]

    def frame_texts(self, clip: Clip) -> list[str]:
        caps = self._overlapping(clip)
        out = []
        for f in clip.frames:
            t = f.t or 0.0
            cover = [c for c in caps if c.start <= t <= c.end]
            if not cover and caps:  # nearest caption in the clip: a frame between two captions
                cover = [min(caps, key=lambda c: min(abs(c.start - t), abs(c.end - t)))]
            out.append(" ".join(c.text for c in cover) if cover else self.empty)
        return out

    def clip_text(self, clip: Clip) -> str:
        caps = self._overlapping(clip)
        return " ".join(f"{clock(c.start)} {c.text}" for c in caps) if caps else self.empty


class LLMSummariser:
    """Captions written by a vision-language model from the frames (an ``LLM`` with ``multimodal=True``).

    A text-only model receives the frames' descriptions instead of pixels (``describe``), which
    makes it a paraphrase of the describer, not a summariser: use it with a VL model.
    """

    kind = "vl-model"
    FRAME_PROMPT = "Describe what this video frame shows in one sentence."
    CLIP_PROMPT = "These are frames of one short video clip, in time order. Summarise what happens in two sentences."

    def __init__(self, llm: Any, describe: Callable[[Frame], str] | None = None, max_side: int = 448) -> None:
        self.llm = llm
        self.describe = describe
        self.max_side = max_side
        self._cache: dict[tuple[str, float | None], str] = {}

    def _images(self, frames: Sequence[Frame]) -> list[dict[str, str]]:
        from canopy_lit.visual.frames import load_frames
        from canopy_lit.visual.messages import jpeg_base64

        descs = _describe_all(self.describe, frames) if self.describe else [""] * len(frames)
        return [
            {"url": f"data:image/jpeg;base64,{jpeg_base64(im, self.max_side)}", "description": d}
            for im, d in zip(load_frames(frames), descs)
        ]

    def _ask(self, prompt: str, frames: Sequence[Frame]) -> str:
        from canopy_lit.llm.base import user

        resp = self.llm.chat([user(prompt, self._images(frames))], max_tokens=96, role="summariser")
        return resp.text.strip() or "(no summary)"

    def frame_texts(self, clip: Clip) -> list[str]:
        out = []
        for f in clip.frames:
            key = (f"{f.path}@frame", f.t)
            if key not in self._cache:
                self._cache[key] = self._ask(self.FRAME_PROMPT, [f])
            out.append(self._cache[key])
        return out

    def clip_text(self, clip: Clip) -> str:
        key = (f"{clip.path}@{clip.start}-{clip.end}", None)
        if key not in self._cache:
            self._cache[key] = self._ask(self.CLIP_PROMPT, clip.frames)
        return self._cache[key]


# --------------------------------------------------------------------------- the corpus under four configurations


@dataclass
class ConfigView:
    """One configuration over a clip corpus.

    Attributes:
        config: configuration name.
        vectors: (M, D) L2-normalised unit embeddings (M = frames or clips).
        owner: (M,) clip index of each unit.
        texts: text form of each unit (what a text cross-encoder / text reader sees).
        frames: frames of each unit (one for frame-level, the clip's for clip-level).
        embed_query: query text -> (D,) embedding in this view's space.
    """

    config: str
    vectors: torch.Tensor
    owner: np.ndarray
    texts: list[str]
    frames: list[tuple[Frame, ...]]
    embed_query: Callable[[str], torch.Tensor]
    units_of: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.units_of:
            n_clips = int(self.owner.max()) + 1 if len(self.owner) else 0
            self.units_of = [[] for _ in range(n_clips)]
            for u, c in enumerate(self.owner.tolist()):
                self.units_of[c].append(u)

    def clip_scores(self, query_vec: torch.Tensor, n_clips: int) -> tuple[np.ndarray, np.ndarray]:
        """Per clip: (best unit cosine, index of that unit); clips without units get -inf / -1.

        Args:
            query_vec: (D,) query embedding.
        """
        sims = (self.vectors @ query_vec).cpu().numpy().astype(np.float64)  # (M,)
        best = np.full(n_clips, -np.inf)
        arg = np.full(n_clips, -1, dtype=np.int64)
        for u, (c, s) in enumerate(zip(self.owner.tolist(), sims.tolist())):
            if s > best[c]:  # max over the clip's frames (frame-level) or its single vector (clip-level)
                best[c], arg[c] = s, u
        return best, arg


class ClipCorpus:
    """Clips plus one ``ConfigView`` per configuration; built once per corpus, reused by every query and method."""

    def __init__(self, clips: list[Clip], views: dict[str, ConfigView], meta: dict[str, Any] | None = None) -> None:
        self.clips = clips
        self.views = views
        self.meta = dict(meta or {})
        self.by_id = {c.id: i for i, c in enumerate(clips)}

    def __len__(self) -> int:
        return len(self.clips)

    @property
    def configs(self) -> tuple[str, ...]:
        return tuple(c for c in CONFIGS if c in self.views)

    @classmethod
    def build(
        cls,
        clips: list[Clip],
        *,
        visual: VisualEmbedder,
        summariser: Summariser,
        text_encoder: Any,
        describe: Callable[[Frame], str] | None = None,
        configs: Sequence[str] = CONFIGS,
    ) -> ClipCorpus:
        """Embed every clip under each requested configuration.

        Args:
            clips: the corpus (``video_clips``).
            visual: frame embedder for the visual configurations.
            summariser: frame / clip texts for the text configurations.
            text_encoder: ``NodeEncoder`` for the text configurations.
            describe: frame -> text, the text form of visual units (CPU reranker / text reader);
                without it a visual unit's text is its timestamp only.
        """
        if not clips:
            raise ValueError("CARVE corpus is empty: no video clips (are the videos under --video-root?)")
        configs = [check_config(c) for c in configs]
        frames = [f for c in clips for f in c.frames]
        frame_owner = np.asarray([i for i, c in enumerate(clips) for _ in c.frames], dtype=np.int64)
        views: dict[str, ConfigView] = {}
        q_visual = _memo(lambda q: visual.embed_queries([q])[0])
        q_text = _memo(lambda q: text_encoder.encode_queries([q])[0])
        if VISUAL_FRAME in configs or VISUAL_CLIP in configs:
            fv = visual.embed_frames(frames)  # (F, D)
            descs = _describe_all(describe, frames) if describe else [""] * len(frames)
            ftexts = [f"{clock(f.t or 0.0)} {d}".strip() for f, d in zip(frames, descs)]
            if VISUAL_FRAME in configs:
                views[VISUAL_FRAME] = ConfigView(
                    VISUAL_FRAME, fv, frame_owner, [f"{clips[o].label} {t}" for o, t in zip(frame_owner, ftexts)],
                    [(f,) for f in frames], q_visual,
                )  # fmt: skip
            if VISUAL_CLIP in configs:
                pooled = torch.stack([fv[torch.as_tensor(np.flatnonzero(frame_owner == i))].mean(0) for i in range(len(clips))])
                views[VISUAL_CLIP] = ConfigView(
                    VISUAL_CLIP, F.normalize(pooled, dim=-1), np.arange(len(clips)),
                    [f"{c.label} " + "; ".join(t for t, o in zip(ftexts, frame_owner) if o == i) for i, c in enumerate(clips)],
                    [c.frames for c in clips], q_visual,
                )  # fmt: skip
        if TEXT_FRAME in configs:
            texts = [t for c in clips for t in _checked(summariser.frame_texts(c), c)]
            ftexts = [f"{clips[o].label} {clock(f.t or 0.0)} {t}" for f, o, t in zip(frames, frame_owner, texts)]
            views[TEXT_FRAME] = ConfigView(
                TEXT_FRAME, text_encoder.encode_nodes(texts), frame_owner, ftexts, [(f,) for f in frames], q_text
            )
        if TEXT_CLIP in configs:
            texts = [summariser.clip_text(c) for c in clips]
            views[TEXT_CLIP] = ConfigView(
                TEXT_CLIP, text_encoder.encode_nodes(texts), np.arange(len(clips)),
                [f"{c.label} {t}" for c, t in zip(clips, texts)], [c.frames for c in clips], q_text,
            )  # fmt: skip
        meta = {
            "clips": len(clips),
            "frames": len(frames),
            "visual_embedder": getattr(visual, "kind", type(visual).__name__),
            "summariser": getattr(summariser, "kind", type(summariser).__name__),
            "text_encoder": getattr(text_encoder, "fingerprint", getattr(text_encoder, "name", "")),
        }
        return cls(clips, views, meta)


def _checked(texts: list[str], clip: Clip) -> list[str]:
    if len(texts) != len(clip.frames):
        raise ValueError(f"summariser returned {len(texts)} frame texts for clip {clip.id} with {len(clip.frames)} frames")
    return texts


def _memo(fn: Callable[[str], torch.Tensor]) -> Callable[[str], torch.Tensor]:
    cache: dict[str, torch.Tensor] = {}

    def wrapped(q: str) -> torch.Tensor:
        if q not in cache:
            cache[q] = fn(q)
        return cache[q]

    return wrapped
