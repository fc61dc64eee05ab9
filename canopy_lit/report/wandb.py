"""Weights & Biases reporting: metrics, study tables as W&B tables, plots as images.

``wandb`` is an optional extra (``pip install canopy-lit[wandb]``) and is imported only
when something is logged. ``WANDB_MODE=offline`` (or ``mode="offline"``) writes the run
under ``dir/wandb/`` for a later ``wandb sync``; nothing here needs a network.

Two entry points:

- ``log_report(runs, images, ...)``: a study report (one W&B run) from run folders,
  used by ``python -m canopy_lit.report wandb RUN... --project P`` and ``canopy_lit/studies/refresh.py``;
- ``log_eval_run(run_dir, logger_cfg)``: one evaluation run folder, for ``evaluate.py logger=wandb``
  (``canopy_lit.tracking.log_evaluation``) with the ``logger.wandb`` block's Lightning ``WandbLogger``
  keys (project, name, group, tags, save_dir, offline, entity): the run is named as training runs are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from canopy_lit.redaction import redact, redact_config, redacted_argv
from canopy_lit.report.plots import make_all
from canopy_lit.report.runs import Run, group_studies, load_run, read_jsonl
from canopy_lit.report.tables import study_rows


def _wandb() -> Any:
    try:
        import wandb
    except ImportError as err:  # optional extra
        raise ImportError("W&B logging needs the optional extra: pip install 'canopy-lit[wandb]'") from err
    return wandb


def wandb_kwargs(logger_cfg: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``wandb.init`` arguments from a logger config, or None when no wandb logger is configured.

    Accepts the ``logger`` group (``{wandb: {...}}``) or the wandb entry itself, with Lightning
    ``WandbLogger`` keys (``save_dir`` -> ``dir``, ``offline: true`` -> ``mode="offline"``).
    """
    if not logger_cfg:
        return None
    cfg = dict(logger_cfg)
    if "wandb" in cfg and isinstance(cfg["wandb"], Mapping):
        cfg = dict(cfg["wandb"])
    target = str(cfg.get("_target_", ""))
    if target and "wandb" not in target.lower():
        return None
    if not target and "project" not in cfg:
        return None
    out: dict[str, Any] = {}
    for key in ("project", "name", "group", "tags", "entity", "job_type", "notes"):
        if cfg.get(key) not in (None, ""):  # logger/wandb.yaml's `group: ""` = no group
            out[key] = list(cfg[key]) if key == "tags" else cfg[key]
    if cfg.get("save_dir") or cfg.get("dir"):
        out["dir"] = str(cfg.get("save_dir") or cfg.get("dir"))
    if cfg.get("offline"):
        out["mode"] = "offline"
    elif cfg.get("mode"):
        out["mode"] = cfg["mode"]
    return out


def _clean(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def _cell(value: Any) -> Any:
    value = _clean(value) if not isinstance(value, (list, dict)) else str(value)
    return redact(value) if isinstance(value, str) else value


def _table(wandb: Any, rows: Sequence[Mapping[str, Any]]) -> Any:
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    # cells are redacted: a reply that echoed a credential must not be uploaded with the table
    data = [[_cell(r.get(c)) for c in cols] for r in rows]
    return wandb.Table(columns=cols, data=data, allow_mixed_types=True)


def log_report(
    runs: Sequence[Run],
    images: Mapping[str, str | Path] | None = None,
    *,
    project: str = "canopy-lit",
    name: str | None = None,
    mode: str | None = None,
    dir: str | Path | None = None,
    **init: Any,
) -> str:
    """Log the study tables of ``runs`` (one W&B table per study and kind), every run's flat
    metrics (``<study>/<method>/<benchmark>/<metric>`` in the summary) and ``images`` (name -> PNG).

    Returns:
        the local folder of the W&B run.
    """
    wandb = _wandb()
    with redacted_argv():  # W&B records the command line as the run starts
        run = wandb.init(
            project=project, name=redact(name) if name else name, mode=mode, dir=str(dir) if dir else None,
            job_type="report", **redact_config(init),
        )  # fmt: skip
    try:
        payload: dict[str, Any] = {}
        for study, sub in group_studies(runs).items():
            for kind, rows in study_rows(sub).items():
                payload[f"tables/{study}/{kind}"] = _table(wandb, rows)
            for r in sub:
                tag = "/".join(x for x in (study, r.method, r.benchmark, r.path.name) if x)
                for k, v in r.metrics.items():
                    if not math.isnan(v):
                        run.summary[f"{tag}/{k}"] = v
        for key, path in (images or {}).items():
            payload[f"plots/{key}"] = wandb.Image(str(path))
        if payload:
            run.log(payload)
        return str(Path(run.dir).parent)
    finally:
        run.finish()


def log_eval_run(run_dir: str | Path, logger_cfg: Mapping[str, Any] | None, config: Mapping[str, Any] | None = None) -> str | None:
    """Log one evaluation run folder when a wandb logger is configured; None (nothing done) otherwise.

    Logs ``metrics.json`` (summary + one step), the run's row of the study tables (``tables/<kind>``, as
    ``log_report`` and ``report tables`` build them), the per-question records as W&B tables
    (``predictions``: id, question, prediction, gold, status, scores, tokens, rounds, LLM calls;
    ``probe_questions`` for a probe run) and the run's plots.
    """
    kwargs = wandb_kwargs(logger_cfg)
    if kwargs is None:
        return None
    wandb = _wandb()
    rd = Path(run_dir)
    r = load_run(rd)
    kwargs.setdefault("name", rd.name)
    kwargs.setdefault("job_type", "evaluate")
    # the run's name and config leave the process: a password in a URL (llm.base_url) stays here
    with redacted_argv():  # W&B records the command line as the run starts
        run = wandb.init(config=redact_config(dict(config or r.config)), **redact_config(kwargs))
    try:
        clean = {k: v for k, v in r.metrics.items() if not math.isnan(v)}
        for k, v in clean.items():
            run.summary[k] = v
        payload: dict[str, Any] = dict(clean)
        rows = [
            {
                "id": rec.get("id"),
                "question": rec.get("question"),
                "prediction": rec.get("prediction"),
                "gold": " | ".join(map(str, rec.get("answers") or [])),
                "status": rec.get("status"),
                **{f"score/{k}": v for k, v in (rec.get("scores") or {}).items()},
                "evidence_tokens": rec.get("evidence_tokens"),
                "rounds": len(rec.get("rounds") or []),
                "llm_calls": sum((rec.get("llm_calls") or {}).values()),
                "latency_s": rec.get("latency_s"),
            }
            for rec in r.records()
        ]
        if rows:
            payload["predictions"] = _table(wandb, rows)
        for kind, table_rows in study_rows([r]).items():
            payload[f"tables/{kind}"] = _table(wandb, table_rows)
        probe_rows = read_jsonl(rd / "probe_questions.jsonl")
        if probe_rows:
            payload["probe_questions"] = _table(wandb, probe_rows)
        for key, path in make_all([r], rd / "plots").items():
            payload[f"plots/{key}"] = wandb.Image(str(path))
        run.log(payload)
        return str(Path(run.dir).parent)
    finally:
        run.finish()
