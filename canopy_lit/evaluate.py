"""``run(cfg) -> metrics``: the library function behind ``python evaluate.py``.

Thin and linear: validate the config, lock the run folder, run the configured mode, summarise.
The mode (``mode: qa | probe | evidence | retrieval``) picks its runner, a ``_target_`` block under ``modes``
(``configs/evaluate.yaml``, ``canopy_lit.eval.modes``); in ``qa`` mode the method's runner runs (``method.runner``: a ``_target_`` of ``run(cfg) -> dict[str, float]``,
the CANOPY evidence loop ``canopy_lit.eval.modes.run_qa`` by default; CARVE names its own). Every stage is built
from its config group by ``canopy_lit.pipeline.build``.

``merge_shards`` makes the run folder of an unsharded run from the folders of its ``shard=I/N`` runs, its
metrics and table computed by the same functions (``qa_outputs``, ``evidence_outputs``) from the merged records.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig
from rich.console import Console
from rich.table import Table as RichTable

from canopy_lit.config_tree import EVAL_ORDER, print_config_tree
from canopy_lit.data.shards import Shard
from canopy_lit.data.splits import eval_split_problem
from canopy_lit.eval.evidence import evidence_outputs
from canopy_lit.eval.evidence_stats import score_evidence
from canopy_lit.eval.harness import (
    notify,
    run_questions,
    start_run_log,
)
from canopy_lit.eval.judge import judge_run
from canopy_lit.eval.modes import output_dir, qa_outputs
from canopy_lit.eval.records import (
    RunLock,
    run_has_results,
    settings_changes,
    write_hydra_files,
    write_run_axes,
    write_run_settings,
)
from canopy_lit.eval.shards import (
    ShardMergeError,
    check_shards,
    read_shard_folder,
    recorded_shard,
    shard_records,
    unsharded_overrides,
    write_merged_folder,
    write_shard_axis,
)
from canopy_lit.llm.base import redact
from canopy_lit.pipeline.build import (
    build_judge,
    build_mode_runner,
    load_questions,
)
from canopy_lit.redaction import redact_saved_configs
from canopy_lit.schema import CONFIG_DIR, ConfigError, check_eval_run
from canopy_lit.tracking import log_evaluation
from canopy_lit.types import STAGES

log = logging.getLogger(__name__)

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
    marker = isinstance(value, str) and value.startswith("<") and value.endswith(">")  # "<absent>", not a value
    text = value if marker else json.dumps(value, ensure_ascii=False)
    return redact(text if len(text) <= 48 else text[:45] + "...")


def claim_run_folder(out_dir: Path, cfg: DictConfig, force: bool = False) -> None:
    """Check a locked run folder against this run, then record the run in it: settings.json (what its
    records depend on), ``.hydra/`` and run.json. Nothing in the folder changes before both checks pass.

    Raises:
        RunFolderError: a line of predictions.jsonl before the last is not JSON.
        ConfigError: the folder's results were made with other settings or as another shard (run.json's
            ``shard``), and ``force`` (``resume=force``) is off; with it they are continued, and the folder
            records this run's settings.
    """
    has_results = run_has_results(out_dir)
    changes = settings_changes(out_dir, cfg) if has_results else []
    shard = Shard.parse(cfg.get("shard"))
    now = None if shard is None else str(shard)
    if has_results and (ran := recorded_shard(out_dir)) != now:  # another part of the questions ran here
        changes.append(("shard", ran, now))
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
    redact_saved_configs(out_dir / ".hydra")  # a password typed into llm.base_url is not kept on disk
    write_run_axes(out_dir, cfg)  # run.json: the ablation axes that reports read
    write_shard_axis(out_dir, shard)  # and the shard, if this run is one (canopy_lit.eval.shards)


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
    split_problem = eval_split_problem(cfg)  # an adapter tested on questions it trained on
    if split_problem is not None:
        raise ConfigError([split_problem])
    print_config_tree(cfg, EVAL_ORDER)
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg.threads))
    with RunLock(output_dir(cfg)):  # a second evaluation into this folder must not redo (and double) every question
        claim_run_folder(output_dir(cfg), cfg, force=cfg.get("resume", "auto") == "force")
        start_run_log()
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per local tokenize call otherwise
        start = time.time()
        metrics = build_mode_runner(cfg)(cfg)  # the schema admits only modes with a block under ``modes``
        if cfg.get("progress", True):
            print_summary(metrics)
        log_evaluation(cfg, output_dir(cfg))  # logger=wandb: metrics, tables and per-question rows to W&B
    log.info("run dir %s (%.0f s)", output_dir(cfg), time.time() - start)  # as train.py ends
    return metrics


# --- shard=I/N: merging the shards of one run into its run folder ---------------------------------------


def unsharded_config(shard_dir: Path, out_dir: Path) -> DictConfig:
    """The config of the run ``shard_dir`` is a shard of: its recorded Hydra overrides (``.hydra/overrides.yaml``)
    but ``shard=``, composed again from ``configs/``, with ``out_dir`` as the run folder and the project root
    the shard ran in (``hydra.runtime.cwd`` of its ``.hydra/hydra.yaml``, unless ``PROJECT_ROOT`` is set).

    Raises:
        ShardMergeError: the shard folder has no readable ``.hydra/overrides.yaml``.
    """
    saved = shard_dir / ".hydra"
    try:
        overrides = yaml.safe_load((saved / "overrides.yaml").read_text(encoding="utf-8")) or []
        runtime = saved / "hydra.yaml"  # absent when the shard ran outside Hydra's CLI
        hydra_cfg = yaml.safe_load(runtime.read_text(encoding="utf-8")) if runtime.is_file() else {}
    except (OSError, yaml.YAMLError) as err:
        raise ShardMergeError(f"{saved}: cannot read the overrides the shard ran with ({err})") from None
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("evaluate", overrides=unsharded_overrides(overrides))
    cwd = ((hydra_cfg or {}).get("hydra") or {}).get("runtime", {}).get("cwd") or os.getcwd()
    cfg.paths.root_dir = os.environ.get("PROJECT_ROOT") or str(cwd)  # paths/default.yaml's rule, at the shard's cwd
    cfg.paths.output_dir = str(out_dir)
    cfg.shard = None
    cfg.retry_failed = False  # every record comes from the shards: none is run again
    cfg.progress = False
    return cfg


class _FromShards:
    """The answer function and judge backend of a merge: every record and verdict comes from the shards, so a
    call means one is missing (``check_shards`` and ``shard_records`` make sure no answer is)."""

    def __call__(self, question: Any) -> dict[str, Any]:
        raise ShardMergeError(f"question {question.id}: no shard has its record")

    def chat(self, *args: Any, **kwargs: Any) -> Any:
        raise _Unjudged


class _Unjudged(Exception):
    """A merge's judge was asked for a verdict no shard cached."""


def merge_shards(out_dir: str | Path, shard_dirs: Sequence[str | Path]) -> dict[str, float]:
    """Merge the run folders of ``shard=0/N`` ... ``shard=N-1/N`` into ``out_dir``, the run folder an unsharded
    run of the same settings writes: its predictions.jsonl (in question order), and metrics.json and table.md
    computed from them by that run's own code (``qa_outputs`` / ``evidence_outputs``), with settings.json,
    run.json and ``.hydra/`` as it records them; the shards' judge verdicts give ``eval/judge``. The questions
    are composed again from the shards' config and must be exactly the shards' (``shard_records``).

    Returns:
        the merged metrics.

    Raises:
        ShardMergeError: a shard missing, given twice, unfinished, made with other settings or on other
            questions, or ``out_dir`` one of them or holding results. RunLocked: a shard still runs (or
            ``out_dir`` is in use). RunFailed: every question of the run failed (metrics written, as a run).
    """
    out = Path(out_dir)
    folders = check_shards([read_shard_folder(d) for d in shard_dirs])
    if any(out.resolve() == f.path.resolve() for f in folders):
        raise ShardMergeError(f"{out}: is one of the shards; merge into a new folder")
    cfg = unsharded_config(folders[0].path, out)
    with contextlib.ExitStack() as held:
        for f in folders:
            held.enter_context(RunLock(f.path))  # not while a shard still runs (or is resumed)
        held.enter_context(RunLock(out))
        if run_has_results(out):
            raise ShardMergeError(f"{out}: holds results already; merge into a new folder")
        changes = settings_changes(folders[0].path, cfg)
        if changes:
            key, old, new = changes[0]
            raise ShardMergeError(
                f"{folders[0].path}: configs/ now give other settings than the shards ran with: {key} "
                f"{_shown(old)} (now {_shown(new)}); merge with the code and configs the shards ran with"
            )
        mode = str(cfg.get("mode", "qa"))
        bench, questions = load_questions(cfg, notify, need_answers=mode == "qa")
        write_merged_folder(out, folders, shard_records(folders, [q.id for q in questions]))
        if mode == "evidence":
            records = run_questions(questions, _FromShards(), out, progress=False, score=score_evidence)
            return evidence_outputs(cfg, out, records)
        metrics, stopped = qa_outputs(cfg, bench, questions, _FromShards(), out)
        if stopped is None and (cfg.get("judge") or {}).get("enabled"):
            try:
                judged = judge_run(out, build_judge(cfg, _FromShards()))
                metrics.update({k: v for k, v in judged.items() if k.startswith("eval/")})
            except _Unjudged:
                notify(f"{out}: merged without eval/judge (a shard did not judge all its questions); "
                       f"python -m canopy_lit.eval.judge {out} adds it")  # fmt: skip
        if stopped is not None:
            raise stopped
        return metrics
