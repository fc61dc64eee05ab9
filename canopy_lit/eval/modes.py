"""The runner of each evaluation mode, ``run(cfg) -> metrics``, as ``configs/evaluate.yaml`` names them under
``modes`` (``mode: qa | probe | evidence | retrieval``); qa runs the method's runner, ``run_qa`` (the evidence loop)
unless the method names its own. Each builds its stages with ``canopy_lit.pipeline.build``, runs them through
the harness and writes the run folder's metrics and table. ``canopy_lit.evaluate.run`` builds the mode's runner
(``build_mode_runner``) after validating the config and locking the run folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from rich.progress import track

from canopy_lit.eval.evidence import run_evidence
from canopy_lit.eval.harness import AnswerFn, RunFailed, notify, run_questions, write_run_outputs
from canopy_lit.eval.judge import judge_run
from canopy_lit.eval.probe import RefinementProbe, gold_questions
from canopy_lit.eval.summary import markdown_table, run_setting, summarize
from canopy_lit.pipeline.build import (
    build_judge,
    build_loop,
    build_probe,
    build_retrieval_eval,
    load_questions,
)
from canopy_lit.retrieval.evaluate import evaluate_retrieval

# The setting lines under a run's table (``run_axes`` names).
QA_SETTING = ("benchmark", "split", "method", "k", "B", "R", "refine", "scorer", "encoder", "node_pooling", "adapter")
PROBE_SETTING = ("benchmark", "split", "B", "descend_margin", "scorer", "encoder", "node_pooling", "adapter")


def output_dir(cfg: DictConfig) -> Path:
    return Path(cfg.paths.output_dir)


def run_probe(cfg: DictConfig) -> dict[str, float]:
    """``mode: probe``: refinement decisions on each question's gold items and distractors (no LLM)."""
    out_dir = output_dir(cfg)
    bench, questions = load_questions(cfg, notify)
    bench.require(gold_questions(questions, bench.items), "questions with located gold evidence to probe")
    stages = build_probe(cfg)
    probe = RefinementProbe(stages.hierarchy, stages.scorer, descend_margin=stages.descend_margin)
    for q in track(questions, description="probe", disable=not cfg.get("progress", True)):
        probe.add(q, bench.items, bench.candidates.get(q.id, ()))
    metrics = {**probe.metrics(), **bench.skip_metrics()}
    cache_stats = stages.scorer.cache.stats()  # misses = nodes encoded
    metrics.update({f"probe/node_cache/{k}": float(v) for k, v in cache_stats.items()})
    with (out_dir / "probe_nodes.jsonl").open("w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in probe.node_rows)
    with (out_dir / "probe_questions.jsonl").open("w", encoding="utf-8") as fh:  # for paired bootstrap CIs
        fh.writelines(json.dumps(r) + "\n" for r in probe.question_rows)
    cols = ["decision_accuracy", "gold_recall", "gold_recall_ci95_low", "gold_recall_ci95_high", "pruned_share", "kept_token_ratio", "distractor_kept_token_ratio", "n_nodes"]
    row = {c: metrics.get(f"probe/{c}") for c in cols}
    row["benchmark"] = cfg.data.name
    write_run_outputs(out_dir, metrics, markdown_table([row], ["benchmark", *cols], run_setting(cfg, PROBE_SETTING)))
    return metrics


def qa_outputs(
    cfg: DictConfig, bench: Any, questions: list[Any], answer: AnswerFn, out_dir: Path
) -> tuple[dict[str, float], RunFailed | None]:
    """``questions`` through ``answer`` (the durable, resumable harness), then metrics.json and table.md from
    the records: a QA run's, and a merge of its shards' (whose records all exist, so nothing is answered).

    Returns:
        the metrics, and the ``RunFailed`` that stopped the run (None: it finished), for the caller to raise.
    """
    stopped: RunFailed | None = None
    try:
        records = run_questions(
            questions,
            answer,
            out_dir,
            concurrency=int(cfg.get("concurrency", 1)),
            retry_failed=bool(cfg.get("retry_failed", False)),
            progress=bool(cfg.get("progress", True)),
            max_consecutive_failures=int(cfg.get("max_consecutive_failures", 5)),
        )
    except RunFailed as err:  # metrics of what ran, then the caller exits non-zero
        stopped, records = err, err.records
    metrics = {**summarize(records), **bench.skip_metrics()}
    if stopped is not None:
        metrics["eval/not_run"] = float(stopped.not_run)
    cols = ["eval/n", "eval/failed", "eval/em", "eval/f1", "eval/accuracy", "eval/evidence_tokens", "eval/llm_calls", "eval/rounds", "eval/followup_duplicate_rate", "eval/duplicate_rate_all_rounds", "eval/latency_s"]
    row = {"method": cfg.method.name, "benchmark": cfg.data.name, **{c: metrics.get(c) for c in cols}}
    write_run_outputs(out_dir, metrics, markdown_table([row], ["method", "benchmark", *[c for c in cols if c in metrics]], run_setting(cfg, QA_SETTING)))
    return metrics, stopped


def run_qa(cfg: DictConfig) -> dict[str, float]:
    """The CANOPY evidence loop (every method but CARVE): each question durably, then the summary."""
    out_dir = output_dir(cfg)
    bench, questions = load_questions(cfg, notify, need_answers=True)
    loop = build_loop(cfg, bench)
    metrics, stopped = qa_outputs(cfg, bench, questions, loop.run, out_dir)
    if stopped is None and (cfg.get("judge") or {}).get("enabled"):  # eval/judge into metrics.json (judge.py)
        judged = judge_run(out_dir, build_judge(cfg, loop.llm), progress=bool(cfg.get("progress", True)))
        metrics.update({k: v for k, v in judged.items() if k.startswith("eval/")})
    if stopped is not None:
        raise stopped
    return metrics


def run_evidence_mode(cfg: DictConfig) -> dict[str, float]:
    """``mode: evidence``: the QA stages for one round, no LLM (``canopy_lit.eval.evidence``)."""
    return run_evidence(cfg, output_dir(cfg))


def run_retrieval(cfg: DictConfig) -> dict[str, float]:
    """``mode: retrieval``: recall@k of the bundled benchmarks over their union corpus."""
    return evaluate_retrieval(**build_retrieval_eval(cfg), out_dir=output_dir(cfg))
