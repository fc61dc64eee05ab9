"""``run(cfg) -> metrics``: the library function behind ``python train.py`` (METHOD.md §1.2).

Builds the encoder, the LightningModule, the datamodule, callbacks and loggers from their config
groups, fits, saves the best-validation adapter to ``adapter/``, tests it on the held-out split and
writes ``metrics.json``; ``checkpoints/`` hold what a resume needs (all in ``cfg.paths.output_dir``;
the training loop itself lives in ``canopy_lit.training``).
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import lightning as L
import torch
from hydra.experimental.callback import Callback as HydraCallback
from hydra.utils import instantiate
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table

from canopy_lit.io import atomic_dir, atomic_write_text
from canopy_lit.schema import check_train_run, exit_if_invalid

log = logging.getLogger("train")
STOPPED_BY_SIGTERM = 128 + signal.SIGTERM  # the shell's status of a process ended by SIGTERM
UNWRITABLE_RUN_DIR = 1


def exit_if_not_writable(run_dir: Path) -> None:
    """Exit 1 with one line naming the folder unless files can be created in ``run_dir`` and every folder
    already in it (or, before it exists, in its nearest existing parent); nothing is written otherwise."""
    run_dir = Path(run_dir).absolute()
    existing = next(p for p in (run_dir, *run_dir.parents) if p.exists())
    inside = sorted(d for d in existing.iterdir() if d.is_dir()) if existing == run_dir and run_dir.is_dir() else []
    folders = [existing, *inside]
    for folder in folders:
        try:
            with tempfile.TemporaryFile(dir=folder):  # a real write: permission bits lie to root, mounts to all
                pass
        except OSError as err:
            where = (f"run folder {run_dir} is not writable" if folder == run_dir
                     else f"{folder} in run folder {run_dir} is not writable" if folder.parent == run_dir
                     else f"run folder {run_dir} cannot be created: {folder} is not writable")
            print(f"error: {where} ({err.strerror}): make it writable or choose another hydra.run.dir",
                  file=sys.stderr)
            raise SystemExit(UNWRITABLE_RUN_DIR) from None


class CheckRunDirWritable(HydraCallback):
    """Hydra callback: the run (or sweep) folder is checked before Hydra writes ``.hydra/`` and the log there."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        exit_if_not_writable(Path(config.hydra.run.dir))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        exit_if_not_writable(Path(config.hydra.sweep.dir))


class SigtermStop:
    """Stop a run on SIGTERM in every phase, at a point where everything finished so far is saved.

    Inside ``trainer.fit`` / ``trainer.test`` Lightning's own handler (which also calls this one) stops the
    loop after the current batch with ``SIGTERMException``; between them this handler raises it at once,
    except inside :meth:`finishing` (a save that must complete), after which it is raised. A SIGTERM that
    arrives while a loop ends anyway (its last batch) is raised by :meth:`raise_if_received` after it.
    """

    def __init__(self) -> None:
        self.received = False
        self._finishing = 0
        self._previous: Any = None

    def __enter__(self) -> SigtermStop:
        if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = True
        lightning_in_charge = signal.getsignal(signal.SIGTERM) != self._handle
        if not lightning_in_charge and not self._finishing:
            raise SIGTERMException

    @contextmanager
    def finishing(self) -> Iterator[None]:
        self._finishing += 1
        try:
            yield
        finally:
            self._finishing -= 1
        self.raise_if_received()

    def raise_if_received(self) -> None:
        if self.received:
            raise SIGTERMException


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


def _check_resume(ckpt_path: str | None, datamodule: Any) -> None:
    """Before any work: the checkpoint to resume was trained on this run's data (its datamodule fingerprint).

    Lightning checks it again when it restores the checkpoint (``load_state_dict``); this earlier check
    refuses before data loading, loggers or checkpoints touch the run folder.
    """
    if ckpt_path is None or not hasattr(datamodule, "check_fingerprint"):
        return
    # mmap: only the small datamodule entry is read, not the optimizer state
    ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True, mmap=True)
    stored = (ckpt.get(type(datamodule).__qualname__) or {}).get("fingerprint")
    if stored is not None:
        exit_if_invalid(stored, lambda s: datamodule.check_fingerprint(s, ckpt_path))


def _load_best(trainer: L.Trainer, model: L.LightningModule) -> str:
    """Load the best validation checkpoint's adapter weights into ``model``; its path ("" = keep the last)."""
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    if best:
        ckpt = torch.load(best, map_location="cpu", weights_only=True)
        model.on_load_checkpoint(ckpt)
        unexpected = model.load_state_dict(ckpt["state_dict"], strict=False).unexpected_keys
        if unexpected:
            raise ValueError(f"{best}: weights this model does not have: {unexpected[:3]}")
        log.info("best validation checkpoint %s", best)
    return best


def run(cfg: DictConfig) -> dict[str, float]:
    """Fit, save the best adapter, test it on the held-out split, write metrics.json; returns the flat metrics.

    Raises:
        SystemExit: 2 on an invalid config, a checkpoint trained on other data than ``cfg.datamodule`` or an
            empty split (one line per problem on stderr, before any work); 1 when the run folder is not
            writable (one line, nothing changed); 143 (128 + SIGTERM) on SIGTERM in any phase: ``last.ckpt``
            holds the last finished step, ``adapter/`` is saved once fit ended, ``metrics.json`` is written by
            a finished test only (``ckpt_path=last`` completes the run).
    """
    exit_if_invalid(cfg, check_train_run)  # before any work: bad knobs, absent weights or extras exit 2
    start = time.time()
    out_dir = Path(cfg.paths.output_dir)
    exit_if_not_writable(out_dir)
    progress: dict[str, Any] = {"phase": "setup", "step": 0, "adapter": False}
    with SigtermStop() as sigterm:
        try:
            return _run(cfg, out_dir, start, sigterm, progress)
        except SIGTERMException:
            log.warning(
                "stopped by SIGTERM during %s at global step %d (%smetrics.json not written); resume with ckpt_path=last",
                progress["phase"], progress["step"], "adapter/ saved, " if progress["adapter"] else "",
            )
            raise SystemExit(STOPPED_BY_SIGTERM) from None


def _run(cfg: DictConfig, out_dir: Path, start: float, sigterm: SigtermStop, progress: dict[str, Any]) -> dict[str, float]:
    out_dir.mkdir(parents=True, exist_ok=True)
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg.threads))
    L.seed_everything(cfg.seed, workers=True)

    # The data is checked before the encoder loads: a resume on other data or an empty split fails in
    # seconds, not after loading the model or fitting.
    datamodule = instantiate(cfg.datamodule, _convert_="all")
    ckpt_path = _resolve_ckpt(cfg.get("ckpt_path"), out_dir)
    _check_resume(ckpt_path, datamodule)
    datamodule.setup("fit")
    exit_if_invalid(bool(cfg.get("test")), datamodule.check_splits)
    log.info("encoder <%s>", cfg.encoder.backbone)
    encoder = instantiate(cfg.encoder, device="cpu")  # Lightning places it (each DDP rank on its own GPU)
    model = instantiate(cfg.model, encoder=encoder, _convert_="all")
    datamodule.set_tokenizer(encoder.tokenize)  # pre-tokenises the loaded splits
    callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c and "_target_" in c]
    loggers = [instantiate(c) for c in (cfg.get("logger") or {}).values() if c and "_target_" in c]
    trainer: L.Trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)
    for lg in loggers:
        lg.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))

    progress["phase"] = "fit"
    try:
        trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path)
    finally:
        progress["step"] = trainer.global_step
    metrics: dict[str, float] = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    metrics.update(model.f0_results)
    best_val = _best_val(trainer, metrics)
    if best_val is not None:
        metrics["val/best_decision_accuracy"] = best_val
    metrics["train/global_step"] = float(trainer.global_step)

    # The adapter is the best validation checkpoint's (fast_dev_run / no checkpointing: the last weights), saved
    # as soon as fit ended, before a SIGTERM that came meanwhile stops the run: a stop during the test keeps it.
    progress["phase"] = "the adapter save"
    with sigterm.finishing():
        _load_best(trainer, model)
        if trainer.is_global_zero:
            with atomic_dir(out_dir / "adapter") as tmp:  # a kill leaves the old adapter or the new one
                encoder.save_adapter(tmp)
        progress["adapter"] = True
    progress["phase"] = "test"
    if cfg.get("test") and not trainer.interrupted:
        trainer.test(model, datamodule=datamodule, verbose=False)
        sigterm.raise_if_received()  # a SIGTERM in the last test batch: the run still stops, unwritten
        metrics.update(model.test_results)
    metrics["train/seconds"] = time.time() - start
    if trainer.is_global_zero:
        atomic_write_text(out_dir / "metrics.json", json.dumps(dict(sorted(metrics.items())), indent=2) + "\n")
        _summary(metrics, list(datamodule.benchmark_names), list(getattr(datamodule, "zero_shot_names", [])))
        log.info("run dir %s (%.0f s)", out_dir, metrics["train/seconds"])
    return metrics
