"""``run(cfg) -> metrics``: the library function behind ``python train.py`` (METHOD.md §1.2).

Builds the encoder, the LightningModule, the datamodule, callbacks and loggers from their config
groups, fits, tests the best-validation adapter on the held-out split and writes ``adapter/``,
``metrics.json`` and ``checkpoints/`` into ``cfg.paths.output_dir`` (the training loop itself lives
in ``canopy_lit.training``).
"""

from __future__ import annotations

import json
import logging
import signal
import time
from collections.abc import Sequence
from pathlib import Path

import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table

from canopy_lit.io import atomic_dir, atomic_write_text
from canopy_lit.schema import exit_if_invalid, validate_train_config

log = logging.getLogger("train")


def _resolve_ckpt(ckpt_path: str | None, out_dir: Path) -> str | None:
    """The checkpoint to resume: a path, or ``last`` = <run dir>/checkpoints/last.ckpt (None: start fresh)."""
    if ckpt_path in (None, "", "null"):
        return None
    if ckpt_path == "last":
        last = out_dir / "checkpoints" / "last.ckpt"
        if not last.is_file():
            log.warning("ckpt_path=last: nothing to resume (no %s); training starts at step 0", last)
            return None
        ckpt_path = str(last)
    elif not Path(ckpt_path).is_file():
        raise FileNotFoundError(f"ckpt_path={ckpt_path}: no such checkpoint")
    log.info("resuming from %s", ckpt_path)
    return ckpt_path


def _best_val(trainer: L.Trainer, metrics: dict[str, float]) -> float | None:
    """Best val/decision_accuracy of the run (the checkpoint callback's), else the last one logged."""
    ckpt = trainer.checkpoint_callback
    best = getattr(ckpt, "best_model_score", None)
    if best is not None and getattr(ckpt, "monitor", None) == "val/decision_accuracy":
        return float(best)
    return metrics.get("val/decision_accuracy")


def _summary(metrics: dict[str, float], benchmarks: Sequence[str], zero_shot: Sequence[str] = ()) -> None:
    """A short table: decision accuracy of f0 and fθ per benchmark on the test split, in-domain and
    zero-shot benchmarks pooled apart."""
    table = Table(title="refinement-decision accuracy (test split)")
    for col in ("benchmark", "instances", "f0", "fθ", "Δ (points)"):
        table.add_column(col, justify="right" if col != "benchmark" else "left")
    rows = [(f"{b} (zero-shot)" if b in zero_shot else b, f"test/{b}/") for b in benchmarks]
    rows += [("in-domain", "test/in_domain/"), ("zero-shot", "test/zero_shot/"), ("all", "test/")]
    for name, prefix in rows:
        ft, f0 = metrics.get(f"{prefix}decision_accuracy"), metrics.get(f"{prefix}decision_accuracy_f0")
        if ft is None or f0 is None:
            continue
        n = metrics.get(f"{prefix}n", float("nan"))
        table.add_row(name, f"{n:.0f}", f"{100 * f0:.1f}", f"{100 * ft:.1f}", f"{100 * (ft - f0):+.1f}")
    Console().print(table)


def run(cfg: DictConfig) -> dict[str, float]:
    """Fit, test on the held-out split, save the adapter and metrics.json; returns the flat metrics.

    Raises:
        SystemExit: 2 on an invalid config (one line per problem on stderr, before any work);
            143 (128 + SIGTERM) when SIGTERM stopped training after saving ``last.ckpt``.
    """
    exit_if_invalid(cfg, validate_train_config)  # before any work: bad knobs exit 2 with one line each
    start = time.time()
    out_dir = Path(cfg.paths.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg.threads))
    L.seed_everything(cfg.seed, workers=True)

    log.info("encoder <%s>", cfg.encoder.backbone)
    encoder = instantiate(cfg.encoder, device="cpu")  # Lightning places it (each DDP rank on its own GPU)
    model = instantiate(cfg.model, encoder=encoder, _convert_="all")
    datamodule = instantiate(cfg.datamodule, _convert_="all")
    datamodule.set_tokenizer(encoder.tokenize)
    callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c and "_target_" in c]
    loggers = [instantiate(c) for c in (cfg.get("logger") or {}).values() if c and "_target_" in c]
    trainer: L.Trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)
    for lg in loggers:
        lg.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))

    try:
        trainer.fit(model, datamodule=datamodule, ckpt_path=_resolve_ckpt(cfg.get("ckpt_path"), out_dir))
    except SIGTERMException:
        # the last_checkpoint callback saved last.ckpt at the step SIGTERM interrupted
        log.warning("stopped by SIGTERM at global step %d; resume with ckpt_path=last", trainer.global_step)
        raise SystemExit(128 + signal.SIGTERM) from None
    metrics: dict[str, float] = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    metrics.update(model.f0_results)
    best_val = _best_val(trainer, metrics)
    if best_val is not None:
        metrics["val/best_decision_accuracy"] = best_val
    metrics["train/global_step"] = float(trainer.global_step)

    if cfg.get("test") and not trainer.interrupted:
        best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
        # Test (and save) the best validation adapter; fast_dev_run / no checkpointing uses the last weights.
        trainer.test(model, datamodule=datamodule, ckpt_path=best or None, verbose=False)
        metrics.update(model.test_results)
    metrics["train/seconds"] = time.time() - start
    if trainer.is_global_zero:
        with atomic_dir(out_dir / "adapter") as tmp:  # a kill leaves the old adapter or the new one
            encoder.save_adapter(tmp)
        atomic_write_text(out_dir / "metrics.json", json.dumps(dict(sorted(metrics.items())), indent=2) + "\n")
        _summary(metrics, list(datamodule.benchmark_names), list(getattr(datamodule, "zero_shot_names", [])))
        log.info("run dir %s (%.0f s)", out_dir, metrics["train/seconds"])
    return metrics
