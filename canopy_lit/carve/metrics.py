"""V-RAGBench-style stage metrics: retrieval against the evidence clip, generation by answer accuracy.

Hit rule (retrieval): a retrieved clip *hits* the evidence when it is from the evidence's video
and the two time windows overlap by a positive length (``overlap > 0``); a zero-length evidence
window (a time point) is hit by the clip that contains it. With ``min_iou > 0`` a hit also needs
temporal IoU >= ``min_iou``. Evidence windows are usually shorter than a 30-s clip, so IoU is
small even for the right clip: overlap is the default rule, and IoU is reported separately as
the top-1 clip's temporal IoU.

Generation: ``accuracy`` = multiple-choice accuracy for questions with choices; for open answers
it is *answer containment*: the SQuAD-normalised gold answer (any alias) occurs as a token span of
the normalised prediction. EM / F1 (``eval/em``, ``eval/f1``) come from ``canopy_lit.eval``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from canopy_lit.carve.representations import CONFIGS
from canopy_lit.metrics import choice_accuracy, normalize_answer


@dataclass(frozen=True)
class Window:
    """A time window of one video (``video`` = file stem)."""

    video: str
    start: float
    end: float

    @classmethod
    def of(cls, video: str, start: float, end: float) -> Window:
        return cls(Path(str(video)).stem, float(start), float(end))


def overlap(a: Window, b: Window) -> float:
    """Length in seconds of the intersection (0 for different videos or disjoint windows)."""
    if a.video != b.video:
        return 0.0
    return max(0.0, min(a.end, b.end) - max(a.start, b.start))


def temporal_iou(a: Window, b: Window) -> float:
    """Intersection over union of two windows (0 for different videos); two equal points give 1."""
    if a.video != b.video:
        return 0.0
    inter = overlap(a, b)
    union = max(a.end, b.end) - min(a.start, b.start)
    if union <= 0:
        return 1.0 if a.start == b.start else 0.0
    return inter / union


def is_hit(clip: Window, evidence: Window, min_iou: float = 0.0) -> bool:
    """The module's hit rule (positive overlap; a point evidence inside the clip; optional IoU floor)."""
    if clip.video != evidence.video:
        return False
    if evidence.end <= evidence.start:
        touched = clip.start <= evidence.start <= clip.end
    else:
        touched = overlap(clip, evidence) > 0.0
    return touched and (min_iou <= 0.0 or temporal_iou(clip, evidence) >= min_iou)


def recall_at_k(ranking: Sequence[Window], evidence: Window, k: int, min_iou: float = 0.0) -> float:
    """1.0 when any of the first ``k`` clips hits the evidence, else 0.0."""
    return float(any(is_hit(w, evidence, min_iou) for w in ranking[:k]))


def top1_tiou(ranking: Sequence[Window], evidence: Window) -> float:
    """Temporal IoU of the top-ranked clip with the evidence (0 for an empty ranking)."""
    return temporal_iou(ranking[0], evidence) if ranking else 0.0


def answer_contained(prediction: str, answers: Sequence[str]) -> float:
    """1.0 when a normalised gold answer occurs as a whole-token span of the normalised prediction."""
    pred = f" {normalize_answer(prediction)} "
    return float(any(normalize_answer(a) and f" {normalize_answer(a)} " in pred for a in answers))


def answer_accuracy(prediction: str, answers: Sequence[str], choices: Sequence[str] | None = None) -> float:
    """Multiple choice: the chosen letter; open: ``answer_contained``."""
    if choices:
        return choice_accuracy(prediction, answers[0] if answers else "", len(choices))
    return answer_contained(prediction, answers)


def stage_metrics(records: Sequence[Mapping[str, Any]], ks: Sequence[int] = (1, 3)) -> dict[str, float]:
    """``carve/*`` means over records (failed records score 0 and are counted in ``eval/failed``).

    Each record carries ``stage`` (per-question ``recall@k``, ``pool_recall``, ``top1_tiou``,
    ``accuracy``) and ``ranking`` (with ``winner`` per clip).
    """
    out: dict[str, float] = {}
    if not records:
        return out
    ok = [r for r in records if r.get("status") == "ok"]

    def mean(key: str) -> float:
        return float(np.mean([(r.get("stage") or {}).get(key, 0.0) if r.get("status") == "ok" else 0.0 for r in records]))

    for k in ks:
        out[f"carve/retrieval_recall@{k}"] = mean(f"recall@{k}")
    out["carve/top1_tiou"] = mean("top1_tiou")
    out["carve/accuracy"] = mean("accuracy")
    if any("pool_recall" in (r.get("stage") or {}) for r in ok):
        out["carve/pool_recall"] = mean("pool_recall")
    winners = [c["winner"] for r in ok for c in r.get("ranking") or []]
    top1 = [r["ranking"][0]["winner"] for r in ok if r.get("ranking")]
    for config in CONFIGS:
        out[f"carve/winner_share/{config}"] = winners.count(config) / len(winners) if winners else 0.0
        out[f"carve/top1_winner_share/{config}"] = top1.count(config) / len(top1) if top1 else 0.0
    calls = [r.get("rerank_calls", 0) for r in ok]
    out["carve/rerank_calls"] = float(np.mean(calls)) if calls else 0.0
    return out
