"""``evaluate(cfg) -> metrics``: ``python evaluate.py`` (QA pipeline, refinement probe, evidence, retrieval).

Thin and linear: read the benchmark split, build the configured stages, run every
question durably, summarise. All stage choices come from the config groups.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table as RichTable

from canopy_lit.eval.harness import RunFailed, notify, run_questions, write_run_outputs
from canopy_lit.eval.records import RunLock
from canopy_lit.eval.summary import markdown_table, summarize
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.pipeline.trace import STAGES

log = logging.getLogger(__name__)


def load_questions(cfg: DictConfig):
    """The benchmark and the configured split of its questions (first ``limit`` of them)."""
    from canopy_lit.data import load_split

    bench, questions = load_split(**OmegaConf.to_container(cfg.data, resolve=True))
    for line in bench.skip_messages():  # never silent: stderr, evaluate.log and metrics.json (data/skipped/*)
        notify(line)
    if cfg.get("limit"):
        questions = questions[: int(cfg.limit)]
    bench.require(questions, f"usable questions in split {cfg.data.get('split')!r}")
    return bench, questions


def load_encoder_from_cfg(cfg: DictConfig):
    from canopy_lit.encoders import load_encoder

    enc = OmegaConf.to_container(cfg.encoder, resolve=True)
    enc.pop("_target_", None)
    return load_encoder(**enc)


def _setting(cfg: DictConfig) -> str:
    return (
        f"benchmark={cfg.data.name} split={cfg.data.get('split')} method={cfg.method.name} "
        f"k={cfg.retrieval.k} B={cfg.tree.branching} R={cfg.loop.max_rounds} "
        f"refine={cfg.refine._target_.rsplit('.', 1)[-1]} encoder={cfg.encoder.get('backbone')} "
        f"adapter={cfg.encoder.get('adapter')}"
        + (f" scorer={cfg.refine.scorer}" if cfg.refine.get("scorer") else "")  # a refiner's own scorer (recomp: f0)
    )


def run_probe(cfg: DictConfig, out_dir: Path) -> dict[str, float]:
    from canopy_lit.eval.probe import RefinementProbe, gold_questions
    from canopy_lit.pipeline.scoring import NodeScorer

    bench, questions = load_questions(cfg)
    bench.require(gold_questions(questions, bench.items), "questions with located gold evidence to probe")
    hierarchy: Hierarchy = instantiate(cfg.tree)
    probe = RefinementProbe(hierarchy, NodeScorer(load_encoder_from_cfg(cfg), hierarchy))
    from rich.progress import track

    for q in track(questions, description="probe", disable=not cfg.get("progress", True)):
        probe.add(q, bench.items, bench.candidates.get(q.id, ()))
    metrics = {**probe.metrics(), **bench.skip_metrics()}
    with (out_dir / "probe_nodes.jsonl").open("w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in probe.node_rows)
    cols = ["decision_accuracy", "gold_recall", "pruned_share", "kept_token_ratio", "distractor_kept_token_ratio", "n_nodes"]
    row = {c: metrics.get(f"probe/{c}") for c in cols}
    row["benchmark"] = cfg.data.name
    setting = f"benchmark={cfg.data.name} split={cfg.data.get('split')} B={cfg.tree.branching} encoder={cfg.encoder.get('backbone')} adapter={cfg.encoder.get('adapter')}"
    write_run_outputs(out_dir, metrics, markdown_table([row], ["benchmark", *cols], setting))
    return metrics


def run_qa(cfg: DictConfig, out_dir: Path) -> dict[str, float]:
    from canopy_lit.pipeline.build import build_loop

    bench, questions = load_questions(cfg)
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
    write_run_outputs(out_dir, metrics, markdown_table([row], ["method", "benchmark", *[c for c in cols if c in metrics]], _setting(cfg)))
    if stopped is not None:
        raise stopped
    return metrics


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


def evaluate(cfg: DictConfig) -> dict[str, float]:
    """Run the configured evaluation into ``cfg.paths.output_dir``; return its flat metrics.

    Raises:
        ConfigError: an invalid config (checked before any work). RunLocked: another live
            evaluation holds the run folder. RunFailed: the LLM backend kept failing (metrics written).
        DataFormatError: unreadable data, or no usable question (names the file).
    """
    from canopy_lit.schema import validate_eval_config

    validate_eval_config(cfg)
    out_dir = Path(cfg.paths.output_dir)
    with RunLock(out_dir):  # a second evaluation into this folder must not redo (and double) every question
        return _evaluate(cfg, out_dir)


def _evaluate(cfg: DictConfig, out_dir: Path) -> dict[str, float]:
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per local tokenize call otherwise
    mode = cfg.get("mode", "qa")
    if mode == "retrieval":
        from canopy_lit.retrieval import evaluate_retrieval

        metrics = evaluate_retrieval(cfg, out_dir=out_dir)
    elif mode == "probe":
        metrics = run_probe(cfg, out_dir)
    elif mode == "evidence":
        from canopy_lit.eval.evidence import run_evidence  # the QA stages, one round, no LLM

        metrics = run_evidence(cfg, out_dir)
    elif mode == "qa" and cfg.method.name == "carve":
        from canopy_lit.carve import evaluate_carve  # CARVE has its own two-stage video pipeline

        metrics = evaluate_carve(cfg)
    elif mode == "qa":
        metrics = run_qa(cfg, out_dir)
    else:
        raise ValueError(f"unknown mode {mode!r}: expected qa | probe | evidence | retrieval")
    if cfg.get("progress", True):
        print_summary(metrics)
    return metrics

