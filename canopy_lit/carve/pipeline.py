"""``CarvePipeline``: stage 1 (parallel retrieval) -> stage 2 (clip-adaptive reranking) -> generation.

Runs over V-RAGBench-style triples (``canopy_lit.data.readers.vragbench``) and writes the
evaluation run-folder contract: ``predictions.jsonl`` (one record per question, resumable),
``metrics.json`` (``carve/retrieval_recall@k``, ``carve/top1_tiou``, ``carve/accuracy``,
``eval/em`` / ``eval/f1``, winning-configuration shares) and ``table.md``.

Methods under the same harness: ``carve``; ``single:<config>`` (that configuration's retrieval
list, no reranking); ``rrf`` (reciprocal rank fusion of the four lists, no reranking).

Built from the composed evaluate config by ``run(cfg)`` (the ``method.runner`` of ``method=carve``):
the ``carve/{visual_encoder,summariser,reranker}`` subgroups are instantiated with the top-level
``encoder`` and ``llm`` passed in (``SharedModels``).
"""

from __future__ import annotations

import inspect
import json
import logging
import time
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from hydra.utils import get_object, instantiate
from omegaconf import DictConfig

from canopy_lit.carve.baselines import reciprocal_rank_fusion, single_config_ranking
from canopy_lit.carve.generate import CarveReader, evidence_blocks, winner_distribution
from canopy_lit.carve.metrics import Window, answer_accuracy, recall_at_k, stage_metrics, top1_tiou
from canopy_lit.carve.representations import CONFIGS, ClipCorpus, check_config, video_clips
from canopy_lit.carve.rerank import ClipAdaptiveReranker, ConfigScore, RankedClip, rank_clips
from canopy_lit.carve.retrieve import Candidate, Hit, ParallelRetriever
from canopy_lit.data import load_benchmark, split_questions
from canopy_lit.eval.harness import write_run_outputs
from canopy_lit.eval.records import RecordLog
from canopy_lit.eval.summary import markdown_table, score_record, summarize
from canopy_lit.types import Item, Question

log = logging.getLogger(__name__)


def parse_method(method: str) -> tuple[str, str | None]:
    """``carve`` | ``rrf`` | ``single:<config>`` -> (kind, config)."""
    m = str(method).strip().lower()
    if m in ("carve", "rrf"):
        return m, None
    if m.startswith("single:"):
        return "single", check_config(m.split(":", 1)[1])
    raise ValueError(f"unknown CARVE method {method!r}; use carve, rrf or single:<{'|'.join(CONFIGS)}>")


def method_slug(method: str) -> str:
    kind, config = parse_method(method)
    return f"single_{config}" if kind == "single" else kind


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
        method: ``carve`` | ``rrf`` | ``single:<config>``.
        k: final clips given to the reader.
        pool_k: clips each configuration retrieves (stage 1).
        reranker: stage 2 (required for ``carve``).
        reader: generation (``None`` = retrieval stage only).
        scope: ``corpus`` (all clips) or ``video`` (the query's video only, as in per-video long-video QA).
        recall_ks: cut-offs reported as ``carve/retrieval_recall@k``.
        min_iou: optional IoU floor of the hit rule (``carve.metrics``).
        rrf_k: the RRF constant.
        workers: stage-1 threads.
    """

    def __init__(
        self,
        corpus: ClipCorpus,
        *,
        method: str = "carve",
        k: int = 3,
        pool_k: int = 3,
        reranker: ClipAdaptiveReranker | None = None,
        reader: CarveReader | None = None,
        scope: str = "corpus",
        recall_ks: Sequence[int] = (1, 3),
        min_iou: float = 0.0,
        rrf_k: float = 60.0,
        workers: int = 4,
    ) -> None:
        self.kind, self.single = parse_method(method)
        self.method = method
        if self.kind == "carve" and reranker is None:
            raise ValueError("method=carve needs a reranker (carve.reranker)")
        if scope not in ("corpus", "video"):
            raise ValueError(f"carve.scope must be 'corpus' or 'video', got {scope!r}")
        if k < 1:
            raise ValueError(f"carve.k must be >= 1, got {k}")
        self.corpus = corpus
        self.k = k
        self.retriever = ParallelRetriever(corpus, pool_k, workers=workers)
        self.reranker = reranker
        self.reader = reader
        self.scope = scope
        self.recall_ks = tuple(int(x) for x in recall_ks)
        self.min_iou = min_iou
        self.rrf_k = rrf_k

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
        if self.kind == "carve":
            assert self.reranker is not None
            scored = self.reranker.score_pool(query, pool, self.corpus)
            return rank_clips(scored, self.k), pool, lists, scored
        if self.kind == "rrf":
            return reciprocal_rank_fusion(lists, self.k, self.rrf_k), pool, lists, []
        assert self.single is not None
        return single_config_ranking(lists[self.single], self.k), pool, lists, []

    def _llm(self) -> Any:
        for holder in (self.reader, getattr(self.reranker, "cross_encoder", None) if self.kind == "carve" else None):
            llm = getattr(holder, "llm", None)
            if llm is not None and hasattr(llm, "log"):
                return llm
        return None

    def windows(self, ranking: Sequence[RankedClip]) -> list[Window]:
        return [Window.of(self.corpus.clips[r.clip].path, self.corpus.clips[r.clip].start, self.corpus.clips[r.clip].end) for r in ranking]

    def answer(self, q: Question) -> dict[str, Any]:
        """One record of predictions.jsonl."""
        t_start = time.perf_counter()
        window = question_window(q)
        llm = self._llm()
        mark = len(llm.log) if llm is not None else 0
        times: dict[str, float] = {}
        t0 = time.perf_counter()
        calls_before = self.reranker.calls if self.reranker is not None else 0
        ranking, pool, lists, scored = self.rank(q.text, window)
        calls = (self.reranker.calls - calls_before) if self.reranker is not None else 0
        times["retrieve" if self.kind != "carve" else "retrieve+rerank"] = time.perf_counter() - t0
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
            "method": self.method,
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
        rec["scores"] = score_record(rec, len(q.choices) if q.choices else None) if self.reader is not None else {}
        return rec

    # ------------------------------------------------------------------ a run
    def run(
        self, questions: Sequence[Question], out_dir: str | Path, *, run_meta: dict[str, Any] | None = None
    ) -> dict[str, float]:
        """Answer every question not yet in ``out_dir/predictions.jsonl``; write metrics.json and table.md."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        ids = [q.id for q in questions]
        if len(set(ids)) != len(ids):
            raise ValueError("question ids are not unique; cannot resume by id")
        with RecordLog(out / "predictions.jsonl", retry_failed=True) as book:
            for q in questions:
                if q.id in book:
                    continue
                try:
                    rec = self.answer(q)
                except Exception as err:  # a failed question is recorded, never fatal for the run
                    log.warning("question %s failed: %s", q.id, err)
                    rec = {"id": q.id, "question": q.text, "answers": list(q.answers), "benchmark": q.benchmark,
                           "method": self.method, "status": "failed", "error": f"{type(err).__name__}: {err}"}  # fmt: skip
                book.append(rec)
            wanted = set(ids)
            records = [r for r in book.records() if r["id"] in wanted]
        metrics = self.metrics(records)
        meta = {"method": self.method, "k": self.k, "pool_k": self.retriever.k, "scope": self.scope, **self.corpus.meta}
        if self.reranker is not None and self.kind == "carve":
            meta.update(reranker=self.reranker.cross_encoder.kind, normalisation=self.reranker.normalisation)
        meta.update(run_meta or {})
        (out / "run_meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        write_run_outputs(out, metrics, metrics_table([(self.method, metrics)], self.recall_ks, setting=_setting(meta)))
        return metrics

    def metrics(self, records: Sequence[dict[str, Any]]) -> dict[str, float]:
        m = summarize(records) if self.reader is not None else {"eval/n": float(len(records))}
        m = {k: v for k, v in m.items() if not k.startswith(("eval/rounds", "eval/duplicate_rate"))}  # single-round method
        m.update(stage_metrics(records, self.recall_ks))
        if self.reader is None:
            m.pop("carve/accuracy", None)
        return m


def _setting(meta: dict[str, Any]) -> str:
    keys = ("clips", "clip_seconds", "frame_interval", "frames", "visual_embedder", "summariser", "reranker", "normalisation", "k", "pool_k", "scope")
    return "Setting: " + "; ".join(f"{k} = {meta[k]}" for k in keys if k in meta)


def metrics_table(rows: Sequence[tuple[str, dict[str, float]]], recall_ks: Sequence[int] = (1, 3), setting: str = "") -> str:
    """One markdown row per method: stage metrics, answer metrics and winning-configuration shares."""
    cols = ["method", *[f"R@{k}" for k in recall_ks], "pool R", "top-1 tIoU", "acc", "EM", "F1", "rerank calls"]
    cols += [f"win {c}" for c in CONFIGS]
    table_rows = []
    for name, m in rows:
        r: dict[str, Any] = {"method": name}
        for k in recall_ks:
            r[f"R@{k}"] = m.get(f"carve/retrieval_recall@{k}")
        r.update({
            "pool R": m.get("carve/pool_recall"), "top-1 tIoU": m.get("carve/top1_tiou"), "acc": m.get("carve/accuracy"),
            "EM": m.get("eval/em"), "F1": m.get("eval/f1"), "rerank calls": m.get("carve/rerank_calls"),
        })  # fmt: skip
        for c in CONFIGS:
            r[f"win {c}"] = m.get(f"carve/winner_share/{c}")
        table_rows.append(r)
    return markdown_table(table_rows, cols, setting)


# --------------------------------------------------------------------------- construction from config


class SharedModels:
    """The models several CARVE parts share, each built once from its config on first use.

    The ``carve/*`` subgroups name only their own class; the text encoder (top-level ``encoder``),
    the LLM (top-level ``llm``) and the frame describer (``carve.describer``) cannot live in a
    YAML, so ``build`` passes each one to the constructors that take it by that parameter name
    (``encoder``, ``llm``, ``describe``). The LLM is loaded only when a built part asks for it.

    Args:
        cfg: the composed evaluate config (``encoder``, ``llm``, ``carve``).
    """

    NAMES = ("encoder", "llm", "describe")

    def __init__(self, cfg: DictConfig) -> None:
        self.cfg = cfg

    @cached_property
    def encoder(self) -> Any:
        return instantiate(self.cfg.encoder)

    @cached_property
    def llm(self) -> Any:
        return instantiate(self.cfg.llm)

    @cached_property
    def describe(self) -> Any:
        node = self.cfg.carve.get("describer")
        return instantiate(node) if node is not None else None

    def build(self, node: DictConfig, where: str) -> Any:
        """``instantiate(node)`` plus the shared models its ``_target_`` takes and the config does not set."""
        params = inspect.signature(get_object(str(node._target_))).parameters
        shared: dict[str, Any] = {}
        for name in self.NAMES:
            if name not in params or name in node:
                continue
            value = getattr(self, name)
            if value is None and params[name].default is inspect.Parameter.empty:
                raise ValueError(f"{where} ({node._target_}) needs the frame describer, but carve.describer is null")
            shared[name] = value
        return instantiate(node, **shared)


def build_corpus(cfg: DictConfig, items: Sequence[Item], models: SharedModels) -> ClipCorpus:
    """The clips of every readable video, embedded under the four configurations (``cfg.carve``)."""
    c = cfg.carve
    builder = instantiate(c.clips)
    missing = [i.id for i in items if i.video is not None and not Path(i.video.path).is_file()]
    if missing:
        log.warning("CARVE: %d video(s) not found, left out of the corpus: %s", len(missing), ", ".join(missing[:5]))
    items = [i for i in items if i.video is not None and Path(i.video.path).is_file()]
    corpus = ClipCorpus.build(
        video_clips(items, builder), visual=models.build(c.visual_encoder, "carve.visual_encoder"),
        summariser=models.build(c.summariser, "carve.summariser"), text_encoder=models.encoder,
        describe=models.describe,
    )  # fmt: skip
    corpus.meta["clip_seconds"] = builder.clip_seconds
    corpus.meta["frame_interval"] = builder.frame_interval
    return corpus


def build_pipeline(cfg: DictConfig, method: str, corpus: ClipCorpus, models: SharedModels) -> CarvePipeline:
    """``CarvePipeline`` for one method; the reranker only for ``carve``, the reader only with ``carve.generate``."""
    c = cfg.carve
    kind, _ = parse_method(method)
    reranker = None
    if kind == "carve":
        reranker = ClipAdaptiveReranker(
            models.build(c.reranker, "carve.reranker"), normalisation=str(c.normalisation),  # type: ignore[arg-type]
            frame_units=str(c.frame_units),  # type: ignore[arg-type]
        )  # fmt: skip
    return CarvePipeline(
        corpus,
        method=method,
        k=int(c.k),
        pool_k=int(c.pool_k),
        reranker=reranker,
        reader=models.build(c.reader, "carve.reader") if c.generate else None,
        scope=str(c.scope),
        recall_ks=[int(k) for k in c.recall_ks],
        min_iou=float(c.min_iou),
        rrf_k=float(c.rrf_k),
        workers=int(c.workers),
    )


def run_methods(
    cfg: DictConfig, questions: Sequence[Question], items: Sequence[Item], out_dir: str | Path, methods: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Run several methods over one shared corpus (built once); each into ``out_dir/<method>``, plus a joint table."""
    methods = list(methods)
    for m in methods:
        parse_method(m)
    models = SharedModels(cfg)
    corpus = build_corpus(cfg, items, models)
    out = Path(out_dir)
    results: dict[str, dict[str, float]] = {}
    rerankers: dict[str, str] = {}
    for m in methods:
        t0 = time.perf_counter()
        target = out if len(methods) == 1 else out / method_slug(m)
        pipe = build_pipeline(cfg, m, corpus, models)
        if pipe.reranker is not None:
            rerankers[m] = pipe.reranker.cross_encoder.kind
        results[m] = pipe.run(questions, target)
        log.info("CARVE %s: %.1fs", m, time.perf_counter() - t0)
    if len(methods) > 1:
        c = cfg.carve
        meta = dict(corpus.meta)
        if "carve" in rerankers:
            meta.update(reranker=rerankers["carve"], normalisation=c.normalisation)
        meta.update(k=c.k, pool_k=c.pool_k, scope=c.scope)
        flat = {f"{method_slug(m)}/{k}": v for m, r in results.items() for k, v in r.items()}
        write_run_outputs(out, flat, metrics_table(list(results.items()), list(c.recall_ks), _setting(meta)))
    return results


def load_triples(cfg: DictConfig) -> tuple[list[Question], list[Item]]:
    """The questions of ``cfg.data`` (split, then the first ``cfg.limit``) and every item of the benchmark."""
    data = cfg.data
    bench = load_benchmark(str(data.name), data.get("path"), **dict(data.get("options") or {}))
    if bench.skipped:
        log.warning("triples skipped or incomplete: %s", dict(bench.skipped))
    questions = split_questions(bench, str(data.get("split", "all")), int(data.get("seed", 0)))
    if cfg.get("limit"):
        questions = questions[: int(cfg.limit)]
    return questions, list(bench.items.values())


def run(cfg: DictConfig) -> dict[str, float]:
    """The runner of ``method=carve`` (``method.runner``): ``cfg.carve.method`` over ``cfg.data`` into ``cfg.paths.output_dir``."""
    questions, items = load_triples(cfg)
    method = str(cfg.carve.method)
    return run_methods(cfg, questions, items, Path(cfg.paths.output_dir), [method])[method]
