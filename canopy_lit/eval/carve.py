"""CARVE runs: ``run(cfg)`` (the runner of ``method=carve``) and the multi-method compare.

Runs over V-RAGBench-style triples (``canopy_lit.data.readers.vragbench``, loaded as every benchmark is,
``pipeline.build.load_questions``) and writes the evaluation run-folder contract: ``predictions.jsonl``
(one record per question, resumable), ``metrics.json`` (``carve/retrieval_recall@k``,
``carve/top1_tiou``, ``carve/accuracy``, ``eval/em`` / ``eval/f1``, winning-configuration shares),
``run_meta.json`` and ``table.md``.

Questions run through the shared harness (``eval.harness.run_questions``), as QA questions do: a
question that fails is recorded (secrets redacted) and scores 0 on every score, and the run stops
after ``max_consecutive_failures`` backend failures in a row (``RunFailed``, metrics of what ran
written). Every part is built from config by ``canopy_lit.pipeline.build``.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from canopy_lit.carve.build import CarveParts, build_carve_corpus, build_carve_pipeline, check_carve_method
from canopy_lit.carve.metrics import stage_metrics
from canopy_lit.carve.representations import CONFIGS
from canopy_lit.carve.stages import CarvePipeline
from canopy_lit.eval.harness import RunFailed, notify, run_questions, write_run_outputs
from canopy_lit.eval.summary import markdown_table, summarize
from canopy_lit.pipeline.build import load_questions
from canopy_lit.types import Item, Question

log = logging.getLogger(__name__)


def method_slug(name: str) -> str:
    """A method's folder name in a compare (``single:text_clip`` -> ``single_text_clip``)."""
    return name.replace(":", "_")


def carve_metrics(records: Sequence[dict[str, Any]], recall_ks: Sequence[int], generated: bool) -> dict[str, float]:
    """``eval/*`` (answers, when the reader ran) and ``carve/*`` (stages) over a run's records."""
    m = summarize(records) if generated else {"eval/n": float(len(records))}
    m = {k: v for k, v in m.items() if not k.startswith(("eval/rounds", "eval/duplicate_rate"))}  # single-round method
    m.update(stage_metrics(records, recall_ks))
    if not generated:
        m.pop("carve/accuracy", None)
    return m


def run_pipeline(
    pipe: CarvePipeline,
    questions: Sequence[Question],
    out_dir: str | Path,
    *,
    retry_failed: bool = False,
    progress: bool = False,
    max_consecutive_failures: int = 5,
) -> dict[str, float]:
    """Answer every question not yet in ``out_dir/predictions.jsonl``; write metrics.json, run_meta.json, table.md.

    Raises:
        RunFailed: the backend kept failing (or every question failed); the outputs of what ran are written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    generated = pipe.reader is not None

    def unscored(rec: dict[str, Any], q: Question) -> dict[str, float]:
        return {}  # retrieval stage alone: no prediction to score

    stopped: RunFailed | None = None
    try:
        # One question at a time (the harness's default): a record's LLM calls are read off the shared call
        # log. score=None: the harness's EM / F1 / accuracy of the prediction.
        records = run_questions(
            questions, pipe.answer, out, retry_failed=retry_failed, progress=progress,
            score=None if generated else unscored, max_consecutive_failures=max_consecutive_failures,
            fields={"method": pipe.method.name},
        )  # fmt: skip
    except RunFailed as err:
        stopped, records = err, err.records
    metrics = carve_metrics(records, pipe.recall_ks, generated)
    if stopped is not None:
        metrics["eval/not_run"] = float(stopped.not_run)
    meta = pipe.settings()
    (out / "run_meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    write_run_outputs(out, metrics, metrics_table([(pipe.method.name, metrics)], pipe.recall_ks, setting=_setting(meta)))
    if stopped is not None:
        raise stopped
    return metrics


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


def with_method(cfg: DictConfig, method: DictConfig) -> DictConfig:
    """A copy of ``cfg`` whose ``carve.method`` is ``method`` (an option of the ``carve/method`` group)."""
    out = copy.deepcopy(cfg)
    out.carve.method = method
    return out


def run_methods(
    cfg: DictConfig,
    questions: Sequence[Question],
    items: Sequence[Item],
    out_dir: str | Path,
    methods: Sequence[DictConfig] | None = None,
) -> dict[str, dict[str, float]]:
    """Run several methods over one shared corpus (built once); each into ``out_dir/<method>``, plus a joint table.

    Args:
        methods: options of the ``carve/method`` group (default: ``cfg.carve.method`` alone, into ``out_dir``).

    Raises:
        RunFailed: a method's backend kept failing; its outputs are written and the methods after it do not run.
    """
    method_cfgs = [cfg] if methods is None else [with_method(cfg, m) for m in methods]
    parts = CarveParts(cfg)
    for method_cfg in method_cfgs:  # before the corpus, which takes minutes
        check_carve_method(method_cfg)
    corpus = build_carve_corpus(cfg, items, parts)
    out = Path(out_dir)
    results: dict[str, dict[str, float]] = {}
    settings: dict[str, Any] = {}
    for method_cfg in method_cfgs:
        t0 = time.perf_counter()
        pipe = build_carve_pipeline(method_cfg, corpus, parts)
        name = pipe.method.name
        settings.update(pipe.method.settings())
        results[name] = run_pipeline(
            pipe, questions, out if len(method_cfgs) == 1 else out / method_slug(name),
            retry_failed=bool(cfg.get("retry_failed", False)), progress=bool(cfg.get("progress", True)),
            max_consecutive_failures=int(cfg.get("max_consecutive_failures", 5)),
        )  # fmt: skip
        log.info("CARVE %s: %.1fs", name, time.perf_counter() - t0)
    if len(method_cfgs) > 1:
        c = cfg.carve
        meta = {**corpus.meta, **settings, "k": c.k, "pool_k": c.pool_k, "scope": c.scope}
        flat = {f"{method_slug(m)}/{k}": v for m, r in results.items() for k, v in r.items()}
        write_run_outputs(out, flat, metrics_table(list(results.items()), list(c.recall_ks), _setting(meta)))
    return results


def load_triples(cfg: DictConfig) -> tuple[list[Question], list[Item]]:
    """The questions of ``cfg.data`` (split, then the first ``cfg.limit``) and every item of the benchmark."""
    bench, questions = load_questions(cfg, notify)
    return questions, list(bench.items.values())


def run(cfg: DictConfig) -> dict[str, float]:
    """The runner of ``method=carve``: ``cfg.carve.method`` over ``cfg.data`` into ``cfg.paths.output_dir``."""
    questions, items = load_triples(cfg)
    return next(iter(run_methods(cfg, questions, items, Path(cfg.paths.output_dir)).values()))
