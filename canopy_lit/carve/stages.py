"""``CarvePipeline``: one question through stage 1 (parallel retrieval) -> the method's ranking -> the reader.

The ranking is the ``carve/method`` group's ``ClipRanking``: ``ClipAdaptiveReranker`` (CARVE's
stage 2), ``FusionRanking`` (rrf) or ``SingleConfigRanking`` (single:<config>). ``answer`` returns the
question's record; a question list runs through the shared harness (``canopy_lit.eval.carve``),
and ``canopy_lit.pipeline.build`` builds the pipeline from config.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from annotated_types import Ge, Interval

from canopy_lit.carve.generate import CarveReader, evidence_blocks, winner_distribution
from canopy_lit.carve.metrics import Window, answer_accuracy, recall_at_k, top1_tiou
from canopy_lit.carve.representations import ClipCorpus
from canopy_lit.carve.rerank import ClipRanking, ConfigScore, RankedClip
from canopy_lit.carve.retrieve import Candidate, Hit, ParallelRetriever
from canopy_lit.types import Question


def question_window(q: Question) -> Window:
    """The evidence window of a V-RAGBench-style question (``Question.meta["evidence"]``)."""
    ev = (q.meta or {}).get("evidence")
    if not isinstance(ev, dict) or not {"video", "start", "end"} <= set(ev):
        raise ValueError(f"question {q.id!r} has no evidence window (meta.evidence = {{video, start, end}})")
    return Window.of(ev["video"], ev["start"], ev["end"])


class CarvePipeline:
    """CARVE and its baselines over one embedded clip corpus.

    Args:
        corpus: clips under the four configurations (``ClipCorpus.build``).
        method: the final ranking (``ClipRanking``: the ``carve/method`` group).
        k: final clips given to the reader.
        pool_k: clips each configuration retrieves (stage 1).
        reader: generation (``None`` = retrieval stage only).
        scope: ``corpus`` (all clips) or ``video`` (the query's video only, as in per-video long-video QA).
        recall_ks: cut-offs reported as ``carve/retrieval_recall@k``.
        min_iou: optional IoU floor of the hit rule (``carve.metrics``).
        workers: stage-1 threads.
    """

    def __init__(
        self,
        corpus: ClipCorpus,
        method: ClipRanking,
        *,
        k: Annotated[int, Ge(1)] = 3,
        pool_k: Annotated[int, Ge(1)] = 3,
        reader: CarveReader | None = None,
        scope: Literal["corpus", "video"] = "corpus",
        recall_ks: Sequence[int] = (1, 3),
        min_iou: Annotated[float, Interval(ge=0, le=1)] = 0.0,
        workers: Annotated[int, Ge(1)] = 4,
    ) -> None:
        if scope not in ("corpus", "video"):
            raise ValueError(f"carve.scope must be 'corpus' or 'video', got {scope!r}")
        if k < 1:
            raise ValueError(f"carve.k must be >= 1, got {k}")
        self.corpus = corpus
        self.method = method
        self.k = k
        self.retriever = ParallelRetriever(corpus, pool_k, workers=workers)
        self.reader = reader
        self.scope = scope
        self.recall_ks = tuple(int(x) for x in recall_ks)
        self.min_iou = min_iou

    def settings(self) -> dict[str, Any]:
        """What ``run_meta.json`` records: the method, k, pool_k, scope, the corpus and the method's own settings."""
        meta = {"method": self.method.name, "k": self.k, "pool_k": self.retriever.k, "scope": self.scope, **self.corpus.meta}
        meta.update(self.method.settings())
        return meta

    # ------------------------------------------------------------------ one question
    def _allowed(self, window: Window | None) -> np.ndarray | None:
        if self.scope == "corpus" or window is None:
            return None
        mask = np.asarray([Path(c.path).stem == window.video for c in self.corpus.clips])
        if not mask.any():
            raise ValueError(f"scope=video: no clips of video {window.video!r} in the corpus")
        return mask

    def rank(
        self, query: str, window: Window | None = None
    ) -> tuple[list[RankedClip], list[Candidate], dict[str, list[Hit]], list[ConfigScore]]:
        """(final ranking, stage-1 pool, per-configuration lists, stage-2 scores) for one query."""
        pool, lists = self.retriever(query, self._allowed(window))
        ranking, scored = self.method.rank(query, pool, lists, self.corpus, self.k)
        return ranking, pool, lists, scored

    def _llm(self) -> Any:
        for holder in (self.reader, getattr(self.method, "cross_encoder", None)):
            llm = getattr(holder, "llm", None)
            if llm is not None and hasattr(llm, "log"):
                return llm
        return None

    def windows(self, ranking: Sequence[RankedClip]) -> list[Window]:
        return [Window.of(self.corpus.clips[r.clip].path, self.corpus.clips[r.clip].start, self.corpus.clips[r.clip].end) for r in ranking]

    def answer(self, q: Question) -> dict[str, Any]:
        """One record of predictions.jsonl (the harness adds its ``scores``)."""
        t_start = time.perf_counter()
        window = question_window(q)
        llm = self._llm()
        mark = len(llm.log) if llm is not None else 0
        times: dict[str, float] = {}
        t0 = time.perf_counter()
        calls_before = self.method.calls
        ranking, pool, lists, scored = self.rank(q.text, window)
        calls = self.method.calls - calls_before
        times["retrieve+rerank" if self.method.reranks else "retrieve"] = time.perf_counter() - t0
        clips = self.corpus.clips
        wins = self.windows(ranking)
        pool_windows = [Window.of(clips[c.clip].path, clips[c.clip].start, clips[c.clip].end) for c in pool]
        stage: dict[str, float] = {f"recall@{k}": recall_at_k(wins, window, k, self.min_iou) for k in self.recall_ks}
        stage["top1_tiou"] = top1_tiou(wins, window)
        stage["pool_recall"] = recall_at_k(pool_windows, window, len(pool_windows), self.min_iou)
        rec: dict[str, Any] = {
            "id": q.id,
            "question": q.text,
            "answers": list(q.answers),
            "benchmark": q.benchmark or "vragbench",
            "method": self.method.name,
            "status": "ok",
            "evidence": {"video": window.video, "start": window.start, "end": window.end},
            "lists": {c: [clips[h.clip].id for h in hs] for c, hs in lists.items()},
            "pool": [{"clip": clips[c.clip].id, "configs": {k: round(h.score, 6) for k, h in c.hits.items()}} for c in pool],
            "ranking": [
                {
                    "clip": clips[r.clip].id, "video": clips[r.clip].video_id, "start": clips[r.clip].start,
                    "end": clips[r.clip].end, "winner": r.winner, "score": r.score,
                    "per_config": r.per_config, "raw": r.raw,
                }
                for r in ranking
            ],  # fmt: skip
            "scored": [
                {"clip": clips[x.clip].id, "config": x.config, "raw": x.raw, "norm": x.norm, "unit": x.unit} for x in scored
            ],  # every stage-2 score, so other normalisations can be studied offline
            "winners": winner_distribution([r.winner for r in ranking]),
            "rerank_calls": calls,
        }
        prediction = ""
        if self.reader is not None:
            t0 = time.perf_counter()
            blocks = evidence_blocks(ranking, self.corpus)
            out = self.reader.answer(q.text, blocks, q.choices)
            times["reader"] = time.perf_counter() - t0
            prediction = out.text
            rec.update(raw_prediction=out.raw, evidence_tokens=out.evidence_tokens, image_parts=out.image_parts)
            rec["evidence_blocks"] = [{"clip": b.clip_id, "config": b.config, "text": b.text, "frames": len(b.frames)} for b in blocks]
            stage["accuracy"] = answer_accuracy(prediction, q.answers, q.choices)
        if llm is not None:  # calls of this question only (runs are sequential)
            by_role = llm.log.summary(since=mark)["by_role"]
            rec["llm_calls"] = {role: int(v["calls"]) for role, v in by_role.items()}
            rec["llm_tokens"] = {role: int(v["prompt_tokens"] + v["completion_tokens"]) for role, v in by_role.items()}
        rec["prediction"] = prediction
        rec["stage"] = stage
        rec["time_s"] = times
        rec["latency_s"] = time.perf_counter() - t_start
        return rec
