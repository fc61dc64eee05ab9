"""Stage 2: clip-adaptive reranking (METHOD.md §2).

Every pooled candidate is rescored by a cross-encoder *under each configuration that retrieved
it*; frame-level configurations score each of the clip's frames and keep the best (the clip
scores by its best frame, as in retrieval). Scores are then normalised **within each
configuration** over that configuration's candidates, so that a configuration whose scorer is
systematically more generous (longer clip summaries read as more relevant) cannot crowd out the
others. The ``carve/normalisation`` group picks one:

- ``ZScore`` (default): (s - mean) / std over the configuration's candidates; a configuration
  with one candidate or constant scores gives 0.
- ``MinMax``: (s - min) / (max - min); constant scores give 0.5.
- ``NoNormalisation``: raw scores (comparable when the scorer is calibrated, e.g. P(yes) of one model).

All (clip, configuration) scores are ranked together. A clip's *winning configuration* is the
argmax of its normalised per-configuration scores (ties: ``CONFIGS`` order); the clip ranks by
that winning score, so the final top-k interleaves clips won by different configurations.

``ClipAdaptiveReranker`` is CARVE's ``ClipRanking`` (``carve/method=carve``); the fixed baselines in
``baselines`` are the others.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from canopy_lit.carve.representations import CONFIGS, ClipCorpus, is_frame_level, modality_of
from canopy_lit.carve.retrieve import Candidate, Hit
from canopy_lit.hierarchy.base import Frame
from canopy_lit.llm import prompts
from canopy_lit.llm.base import LLM, Message
from canopy_lit.llm.context import fit_evidence, yes_probability
from canopy_lit.llm.parsing import PARSE_STATS, ParseStats


@dataclass(frozen=True)
class CandidateRepr:
    """What the cross-encoder sees for one unit of a candidate under one configuration."""

    clip: int
    config: str
    unit: int
    text: str
    frames: tuple[Frame, ...]

    @property
    def modality(self) -> str:
        return modality_of(self.config)


@runtime_checkable
class CrossEncoder(Protocol):
    """Query-candidate relevance; higher = more relevant. ``kind`` names the model for run metadata.

    An implementation may also offer ``score_many(query, candidates) -> list[float]`` (batched);
    the reranker uses it when present.
    """

    kind: str

    def score(self, query: str, candidate: CandidateRepr) -> float: ...


class LLMRelevanceScorer:
    """Cross-encoder-style relevance: P(yes) that a passage helps answer the question.

    Replaces a cross-encoder reranker where none is available (CARVE on CPU): one 1-token call per
    passage; the question-first prompt lets llama.cpp reuse its prefix across passages.
    """

    def __init__(self, llm: LLM, *, top_logprobs: int = 10, stats: ParseStats | None = None) -> None:
        self.llm, self.top_logprobs = llm, top_logprobs
        self.stats = stats or PARSE_STATS

    def score(self, question: str, passages: Sequence[str]) -> list[float]:
        """Scores in [0, 1], one per passage (same order)."""
        return [
            yes_probability(self.llm, self._fit(question, p), "relevance", self.top_logprobs, self.stats)
            for p in passages
        ]

    def _fit(self, question: str, passage: str) -> list[Message]:
        return fit_evidence(
            self.llm, lambda ev: prompts.relevance(question, ev[0] if ev else ""), [passage], 1, "relevance"
        )


class LLMYesNoCrossEncoder:
    """CPU cross-encoder: the LLM layer's yes/no log-probability scorer over the candidate's text form.

    Visual candidates are scored on their frame descriptions, text candidates on their captions /
    summaries (``CandidateRepr.text``). A multimodal LLM would receive the frames as image parts.

    Args:
        llm: any ``canopy_lit.llm.LLM``.
        top_logprobs: alternatives read for the first token.
    """

    def __init__(self, llm: Any, top_logprobs: int = 10) -> None:
        self.llm = llm
        self.scorer = LLMRelevanceScorer(llm, top_logprobs=top_logprobs)
        self.kind = f"llm-yes-no ({getattr(llm, 'model_name', getattr(llm, 'name', 'llm'))})"

    def score(self, query: str, candidate: CandidateRepr) -> float:
        return float(self.scorer.score(query, [candidate.text])[0])

    def score_many(self, query: str, candidates: Sequence[CandidateRepr]) -> list[float]:
        """One 1-token call per candidate, question first so llama.cpp reuses the prompt prefix."""
        return [float(x) for x in self.scorer.score(query, [c.text for c in candidates])]


class EmbeddingCrossEncoder:
    """Bi-encoder stand-in (cos(f0(q), fθ(text))) for runs without an LLM; not a cross-encoder."""

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder
        self.kind = "embedding-cosine (bi-encoder stand-in)"

    def score(self, query: str, candidate: CandidateRepr) -> float:
        return self.score_many(query, [candidate])[0]

    def score_many(self, query: str, candidates: Sequence[CandidateRepr]) -> list[float]:
        """One batched encoder pass for all candidates."""
        return [float(x) for x in self.encoder.score(query, [c.text for c in candidates]).tolist()]


@runtime_checkable
class Normalisation(Protocol):
    """One configuration's scores -> scores comparable across configurations; ``name`` is the run's label."""

    name: str

    def __call__(self, scores: Sequence[float]) -> list[float]: ...


class ZScore:
    """(s - mean) / std over the configuration's candidates; one candidate or constant scores give 0."""

    name = "zscore"

    def __call__(self, scores: Sequence[float]) -> list[float]:
        xs = [float(s) for s in scores]
        if not xs:
            return xs
        mean = sum(xs) / len(xs)
        std = math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))
        return [(x - mean) / std if std > 1e-12 else 0.0 for x in xs]


class MinMax:
    """(s - min) / (max - min); constant scores give 0.5."""

    name = "minmax"

    def __call__(self, scores: Sequence[float]) -> list[float]:
        xs = [float(s) for s in scores]
        if not xs:
            return xs
        lo, hi = min(xs), max(xs)
        return [(x - lo) / (hi - lo) if hi - lo > 1e-12 else 0.5 for x in xs]


class NoNormalisation:
    """Raw scores: comparable only when the scorer is calibrated across representations (P(yes) of one model)."""

    name = "none"

    def __call__(self, scores: Sequence[float]) -> list[float]:
        return [float(s) for s in scores]


@dataclass(frozen=True)
class ConfigScore:
    """One candidate under one configuration: raw cross-encoder score, normalised score, best unit."""

    clip: int
    config: str
    raw: float
    norm: float
    unit: int


@dataclass
class RankedClip:
    """A clip of the final ranking with its winning configuration and every per-configuration score."""

    clip: int
    winner: str
    score: float
    unit: int
    per_config: dict[str, float] = field(default_factory=dict)
    raw: dict[str, float] = field(default_factory=dict)


def rank_clips(scores: Sequence[ConfigScore], k: int) -> list[RankedClip]:
    """Group (clip, configuration) scores by clip, pick each clip's winner (argmax), rank, keep top ``k``.

    Ties: winner by ``CONFIGS`` order; clips by clip index.
    """
    by_clip: dict[int, list[ConfigScore]] = {}
    for s in scores:
        by_clip.setdefault(s.clip, []).append(s)
    ranked = []
    for clip, ss in by_clip.items():
        win = max(ss, key=lambda s: (s.norm, -CONFIGS.index(s.config)))
        ranked.append(
            RankedClip(
                clip, win.config, win.norm, win.unit,
                {s.config: s.norm for s in ss}, {s.config: s.raw for s in ss},
            )
        )  # fmt: skip
    ranked.sort(key=lambda r: (-r.score, r.clip))
    return ranked[:k]


@runtime_checkable
class ClipRanking(Protocol):
    """A CARVE method's ranking (the ``carve/method`` group): stage-1 results -> the final top-k clips.

    Attributes:
        name: the method's label in records, tables and compare folders (``carve``, ``rrf``,
            ``single:<config>``).
        calls: cross-encoder calls made so far (0 for methods without stage 2).
        reranks: whether a stage-2 model rescores the pool (timed as ``retrieve+rerank``).
    """

    name: str
    calls: int
    reranks: bool

    def rank(
        self, query: str, pool: Sequence[Candidate], lists: Mapping[str, Sequence[Hit]], corpus: ClipCorpus, k: int
    ) -> tuple[list[RankedClip], list[ConfigScore]]:
        """(final top-``k`` ranking, every stage-2 score: empty without stage 2)."""
        ...

    def settings(self) -> dict[str, Any]:
        """What the run folder's ``run_meta.json`` and setting line record of this method."""
        ...


class ClipAdaptiveReranker:
    """CARVE's ranking: rescore a stage-1 pool under each candidate's retrieving configurations, rank together.

    Args:
        cross_encoder: the relevance scorer (``CrossEncoder``; the ``carve/reranker`` group).
        normalisation: within-configuration normalisation (the ``carve/normalisation`` group; default z-score).
        frame_units: for frame-level configurations, score ``all`` frames of the clip and keep the
            best, or only the ``best`` frame the retriever matched (fewer scorer calls).
    """

    name = "carve"
    reranks = True

    def __init__(
        self,
        cross_encoder: CrossEncoder,
        normalisation: Normalisation | None = None,
        frame_units: Literal["all", "best"] = "all",
    ) -> None:
        if frame_units not in ("all", "best"):
            raise ValueError(f"carve.frame_units must be 'all' or 'best', got {frame_units!r}")
        self.cross_encoder = cross_encoder
        self.normalisation: Normalisation = normalisation if normalisation is not None else ZScore()
        self.frame_units = frame_units
        self.calls = 0

    def repr_of(self, corpus: ClipCorpus, clip: int, config: str, unit: int) -> CandidateRepr:
        view = corpus.views[config]
        return CandidateRepr(clip, config, unit, view.texts[unit], view.frames[unit])

    def score_pool(self, query: str, pool: Sequence[Candidate], corpus: ClipCorpus) -> list[ConfigScore]:
        """Raw and normalised scores of every (candidate, retrieving configuration) pair."""
        reprs: list[CandidateRepr] = []
        for cand in pool:
            for config, hit in ((c, cand.hits[c]) for c in cand.configs):
                view = corpus.views[config]
                units = view.units_of[cand.clip] if is_frame_level(config) and self.frame_units == "all" else [hit.unit]
                reprs.extend(self.repr_of(corpus, cand.clip, config, u) for u in units)
        many = getattr(self.cross_encoder, "score_many", None)
        if callable(many):
            values = [float(v) for v in many(query, reprs)]
        else:
            values = [float(self.cross_encoder.score(query, r)) for r in reprs]
        self.calls += len(reprs)
        best: dict[tuple[int, str], tuple[float, int]] = {}
        for r, v in zip(reprs, values):  # a clip scores by its best unit (frame) under a configuration
            key = (r.clip, r.config)
            if key not in best or v > best[key][0]:
                best[key] = (v, r.unit)
        raw = [(clip, config, v, u) for (clip, config), (v, u) in best.items()]
        out: list[ConfigScore] = []
        for config in CONFIGS:
            rows = [r for r in raw if r[1] == config]
            for (clip, cfg, s, u), n in zip(rows, self.normalisation([r[2] for r in rows])):
                out.append(ConfigScore(clip, cfg, s, n, u))
        return out

    def __call__(self, query: str, pool: Sequence[Candidate], corpus: ClipCorpus, k: int) -> list[RankedClip]:
        return rank_clips(self.score_pool(query, pool, corpus), k)

    def rank(
        self, query: str, pool: Sequence[Candidate], lists: Mapping[str, Sequence[Hit]], corpus: ClipCorpus, k: int
    ) -> tuple[list[RankedClip], list[ConfigScore]]:
        scored = self.score_pool(query, pool, corpus)
        return rank_clips(scored, k), scored

    def settings(self) -> dict[str, Any]:
        return {"reranker": self.cross_encoder.kind, "normalisation": self.normalisation.name}
