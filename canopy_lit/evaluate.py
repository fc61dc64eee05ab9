"""``run(cfg) -> metrics``: the library function behind ``python evaluate.py``.

Thin and linear: validate the config, lock the run folder, run the configured mode, summarise.
The mode (``mode: qa | probe | evidence | retrieval``) picks the runner from ``MODES``; in ``qa`` mode
the method's runner runs (``method.runner``: a ``_target_`` of ``run(cfg) -> dict[str, float]``, the
CANOPY evidence loop ``run_qa`` by default; CARVE names its own). Every stage is built from its config
group by ``canopy_lit.pipeline.build``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig
from rich.console import Console
from rich.progress import track
from rich.table import Table as RichTable

from canopy_lit.eval.evidence import run_evidence
from canopy_lit.eval.harness import RunFailed, notify, run_questions, start_run_log, write_run_outputs
from canopy_lit.eval.judge import judge_run
from canopy_lit.eval.probe import RefinementProbe, gold_questions
from canopy_lit.eval.records import (
    RunLock,
    run_has_results,
    settings_changes,
    write_hydra_files,
    write_run_axes,
    write_run_settings,
)
from canopy_lit.eval.summary import markdown_table, run_setting, summarize
from canopy_lit.llm.base import redact
from canopy_lit.pipeline.build import (
    build_judge,
    build_loop,
    build_probe,
    build_retrieval_eval,
    build_runner,
    load_questions,
)
from canopy_lit.retrieval.evaluate import evaluate_retrieval
from canopy_lit.schema import ConfigError, check_eval_run
from canopy_lit.tracking import log_evaluation
from canopy_lit.types import STAGES

log = logging.getLogger(__name__)

Runner = Callable[[DictConfig], dict[str, float]]

# The setting lines under a run's table (``run_axes`` names).
QA_SETTING = ("benchmark", "split", "method", "k", "B", "R", "refine", "scorer", "encoder", "adapter")
PROBE_SETTING = ("benchmark", "split", "B", "descend_margin", "scorer", "encoder", "adapter")


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


def run_qa(cfg: DictConfig) -> dict[str, float]:
    """The CANOPY evidence loop (every method but CARVE): each question durably, then the summary."""
    out_dir = output_dir(cfg)
    bench, questions = load_questions(cfg, notify, need_answers=True)
    loop = build_loop(cfg, bench)
    stopped: RunFailed | None = None
    try:
        records = run_questions(
            questions,
            loop.run,
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
    if stopped is None and (cfg.get("judge") or {}).get("enabled"):  # eval/judge into metrics.json (judge.py)
        judged = judge_run(out_dir, build_judge(cfg, loop.llm), progress=bool(cfg.get("progress", True)))
        metrics.update({k: v for k, v in judged.items() if k.startswith("eval/")})
    if stopped is not None:
        raise stopped
    return metrics


def run_method(cfg: DictConfig) -> dict[str, float]:
    """``mode: qa``: the method's runner (``method.runner``: ``run_qa``, the evidence loop, unless the method
    names its own)."""
    return build_runner(cfg)(cfg)


def run_evidence_mode(cfg: DictConfig) -> dict[str, float]:
    """``mode: evidence``: the QA stages for one round, no LLM (``canopy_lit.eval.evidence``)."""
    return run_evidence(cfg, output_dir(cfg))


def run_retrieval(cfg: DictConfig) -> dict[str, float]:
    """``mode: retrieval``: recall@k of the bundled benchmarks over their union corpus."""
    return evaluate_retrieval(**build_retrieval_eval(cfg), out_dir=output_dir(cfg))


MODES: dict[str, Runner] = {
    "qa": run_method,
    "probe": run_probe,
    "evidence": run_evidence_mode,
    "retrieval": run_retrieval,
}


def print_summary(metrics: dict[str, float], console: Console | None = None) -> None:
    console = console or Console()
    table = RichTable(title="metrics", show_header=True)
    table.add_column("key")
    table.add_column("value", justify="right")
    for k, v in metrics.items():
        if k.startswith("time/") or "/depth_" in k or k.endswith(("_ci_low", "_ci_high")):
            continue
        table.add_row(k, f"{v:.4g}")
    console.print(table)
    total = sum(metrics.get(f"time/{s}_s", 0.0) for s in STAGES)
    if total > 0:
        stages = RichTable(title="time by stage", show_header=True)
        for c in ("stage", "seconds", "share"):
            stages.add_column(c, justify="right" if c != "stage" else "left")
        for s in STAGES:
            sec = metrics.get(f"time/{s}_s", 0.0)
            if sec:
                stages.add_row(s, f"{sec:.2f}", f"{100 * sec / total:.1f}%")
        console.print(stages)


_SHOWN_CHANGES = 6  # differing settings named in the refusal line; settings.json has them all


def _shown(value: Any) -> str:
    text = value if value == "<absent>" else json.dumps(value, ensure_ascii=False)
    return redact(text if len(text) <= 48 else text[:45] + "...")


def claim_run_folder(out_dir: Path, cfg: DictConfig, force: bool = False) -> None:
    """Check a locked run folder against this run, then record the run in it: settings.json (what its
    records depend on), ``.hydra/`` and run.json. Nothing in the folder changes before both checks pass.

    Raises:
        RunFolderError: a line of predictions.jsonl before the last is not JSON.
        ConfigError: the folder's results were made with other settings, and ``force`` (``resume=force``)
            is off; with it they are continued, and the folder records this run's settings.
    """
    changes = settings_changes(out_dir, cfg) if run_has_results(out_dir) else []
    if changes:
        named = ", ".join(f"{k} {_shown(old)} (now {_shown(new)})" for k, old, new in changes[:_SHOWN_CHANGES])
        if len(changes) > _SHOWN_CHANGES:
            named += f" and {len(changes) - _SHOWN_CHANGES} more"
        if not force:
            raise ConfigError([
                f"{out_dir}: its results were made with other settings: {named}; use another hydra.run.dir, "
                "or resume=force to continue them under these settings"
            ])  # fmt: skip
        log.warning("resume=force: %s holds results made with other settings (%s); continuing", out_dir, named)
    write_run_settings(out_dir, cfg)
    write_hydra_files(out_dir, cfg)
    write_run_axes(out_dir, cfg)  # run.json: the ablation axes that reports read


def run(cfg: DictConfig) -> dict[str, float]:
    """Run the configured evaluation into ``cfg.paths.output_dir``; return its flat metrics.

    Raises:
        ConfigError: an invalid config (checked before any work), or a run folder whose results were
            made with other settings (``resume=auto``). RunLocked: another live evaluation holds the run
            folder. RunFolderError: a garbled predictions.jsonl. RunFailed: the LLM backend kept failing
            (metrics written). DataFormatError: unreadable data, or no usable question (names the file).
            OSError: the run folder cannot be written (full disk: names the file).
    """
    check_eval_run(cfg)  # config, model weights and optional packages: before any work
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg.threads))
    with RunLock(output_dir(cfg)):  # a second evaluation into this folder must not redo (and double) every question
        claim_run_folder(output_dir(cfg), cfg, force=cfg.get("resume", "auto") == "force")
        start_run_log()
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per local tokenize call otherwise
        metrics = MODES[str(cfg.get("mode", "qa"))](cfg)  # the schema admits only these modes
        if cfg.get("progress", True):
            print_summary(metrics)
        log_evaluation(cfg, output_dir(cfg))  # logger=wandb: metrics, tables and per-question rows to W&B
    return metrics
