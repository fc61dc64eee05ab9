"""Kill-safe training: ``last.ckpt`` every N steps, at epoch ends and on SIGTERM, and an exact resume.

Exact means a run killed after a checkpoint and resumed with ``ckpt_path=last`` ends at the same
global step, learning rate and adapter weights (to float tolerance) as an uninterrupted run:

- the torch RNG is reseeded from ``(seed, epoch)`` before each epoch's data order is drawn and from
  ``(seed, global_step)`` before each step, so shuffling and dropout do not depend on what ran before
  (validation passes, a restart);
- a run resumed mid-epoch skips the batch indices the killed run already trained on (cheap: only
  the batch sampler is advanced, no data is loaded) and sets the sampler's epoch first;
- a checkpoint written at an epoch end is rewritten on load to "that epoch is finished": Lightning
  otherwise resumes such a checkpoint into a short last epoch when ``max_steps`` is set.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import ModelCheckpoint, RichProgressBar
from lightning.pytorch.utilities.exceptions import SIGTERMException

log = logging.getLogger(__name__)


def _seed(*parts: int) -> int:
    """A 63-bit seed derived from integers (stable across processes, unlike ``hash``)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(2, dtype=np.uint64)[0] >> 1)


def _set_epoch(loader: Any, epoch: int) -> None:
    """``set_epoch`` on the loader's sampler and batch sampler, where they have one (as Lightning does)."""
    for name in ("sampler", "batch_sampler"):
        fn = getattr(getattr(loader, name, None), "set_epoch", None)
        if callable(fn):
            fn(epoch)


class _SkipFirst:
    """Index-sampler wrapper: drops the first ``n`` batches of indices once, then puts the original back."""

    def __init__(self, loader: Any, attr: str, n: int) -> None:
        self.loader, self.attr, self.inner, self.n = loader, attr, getattr(loader, attr), n

    def __iter__(self):
        it = iter(self.inner)
        for _ in range(self.n):
            next(it, None)
        # DataLoader forbids re-assigning its samplers after construction; this undoes our own swap.
        object.__setattr__(self.loader, self.attr, self.inner)
        yield from it

    def __len__(self) -> int:
        return len(self.inner)

    def __getattr__(self, name: str) -> Any:  # set_epoch, sampler, batch_size, ...
        return getattr(self.inner, name)


def normalize_epoch_end(checkpoint: dict[str, Any]) -> bool:
    """Rewrite the loop state of a checkpoint saved at an epoch end as "epoch finished"; True if changed.

    A checkpoint written in ``on_train_epoch_end`` (after the epoch's validation) has the epoch
    ``processed`` but not ``completed``. With ``max_steps`` set Lightning restarts such a state as an
    unfinished epoch and its epoch counter runs ahead of the steps (3 epochs of 3 batches stop at
    step 6). Epoch-interval LR schedulers would miss that epoch's step: this module only uses step
    schedules.
    """
    fit = (checkpoint.get("loops") or {}).get("fit_loop")
    if not fit or "epoch_progress" not in fit:
        return False
    ep = fit["epoch_progress"]
    tot, cur = ep["total"], ep["current"]
    if not (tot["ready"] == tot["started"] == tot["processed"] == tot["completed"] + 1):
        return False
    tot["completed"] = tot["processed"]
    cur["completed"] = cur["processed"]
    for key in ("epoch_loop.batch_progress", "epoch_loop.val_loop.batch_progress"):
        if key in fit:
            fit[key]["current"] = {k: 0 for k in fit[key]["current"]}
            fit[key]["is_last_batch"] = False
    for key in ("epoch_loop.scheduler_progress", "epoch_loop.manual_optimization.optim_step_progress"):
        if key in fit:
            fit[key]["current"] = {k: 0 for k in fit[key]["current"]}
    opt = fit.get("epoch_loop.automatic_optimization.optim_progress", {}).get("optimizer", {})
    for part in opt.values():
        part["current"] = {k: 0 for k in part["current"]}
    return True


class Disabled(L.Callback):
    """A default callback switched off by a preset (``debug=fdr``): takes the settings it replaces, so
    ``callbacks.<name>.<key>=...`` still composes, and does nothing."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings


class ResumableCheckpoint(L.Callback):
    """Writes ``<dirpath>/last.ckpt`` every ``every_n_train_steps`` steps, at each epoch end, at the end
    of fit and on SIGTERM (then Lightning stops); makes ``ckpt_path=last`` resume exactly (module doc).

    Args:
        dirpath: checkpoint folder (the run dir's ``checkpoints/``).
        every_n_train_steps: optimizer steps between saves (0 = only epoch ends, SIGTERM and the end).
        seed: base of the per-epoch / per-step reseeding (the run's ``seed``).
        reseed: reseed torch's RNG per epoch and per step (needed for an exact resume).
        filename: checkpoint file name.
    """

    def __init__(
        self,
        dirpath: str | Path,
        every_n_train_steps: int = 50,
        seed: int = 0,
        reseed: bool = True,
        filename: str = "last.ckpt",
    ) -> None:
        if every_n_train_steps < 0:
            raise ValueError(f"callbacks.last_checkpoint.every_n_train_steps must be >= 0, got {every_n_train_steps}")
        self.dirpath = Path(dirpath)
        self.every_n_train_steps = int(every_n_train_steps)
        self.seed = int(seed)
        self.reseed = reseed
        self.filename = filename
        self._saved_step: int | None = None
        self._pending_step: int | None = None
        self._resumed_from: str | None = None
        self._normalized = False
        self._reseeded_epoch = -1

    @property
    def path(self) -> Path:
        return self.dirpath / self.filename

    # ------------------------------------------------------------------ saving
    def _save(self, trainer: L.Trainer, why: str) -> None:
        if trainer.fast_dev_run or trainer.sanity_checking:
            return
        # The full state (optimizer, loops, callbacks) is what an exact resume needs; saying so also keeps
        # Lightning from logging "weights_only was not set" at every save. Lightning writes through a
        # temp file: a kill never leaves half a file.
        trainer.save_checkpoint(self.path, weights_only=False)
        self._saved_step = trainer.global_step
        log.debug("saved %s at global step %d (%s)", self.path, trainer.global_step, why)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.received_sigterm:
            self._save(trainer, "SIGTERM")
            log.warning("SIGTERM: saved %s at global step %d; resume with ckpt_path=last", self.path, trainer.global_step)
        elif self.every_n_train_steps and trainer.global_step % self.every_n_train_steps == 0 and self._saved_step != trainer.global_step:
            loop = trainer.fit_loop
            if loop.epoch_loop._should_check_val_fx(loop._data_fetcher):
                # This step validates next: a checkpoint from now would resume past that validation (Lightning
                # skips it), so the best checkpoint it picks would be lost. Saved once the validation ended.
                self._pending_step = trainer.global_step
            else:
                self._save(trainer, "periodic")

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._pending_step is None or self._pending_step != trainer.global_step or trainer.sanity_checking:
            return
        self._pending_step = None
        for callback in trainer.checkpoint_callbacks:  # they save after every other callback: record the best first
            if isinstance(callback, ModelCheckpoint):
                callback.on_validation_end(trainer, pl_module)
        self._save(trainer, "periodic, after the step's validation")

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Lightning calls ModelCheckpoint callbacks after every other one: those that save at epoch end record
        # this epoch's best first, so a resume knows it (their own call then skips the step they saw).
        for callback in trainer.checkpoint_callbacks:
            if isinstance(callback, ModelCheckpoint):
                callback.on_train_epoch_end(trainer, pl_module)
        self._save(trainer, "epoch end")  # after the epoch's validation: the fullest state of that step

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._saved_step != trainer.global_step:
            self._save(trainer, "end of fit")

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        # SIGTERM between steps (e.g. during validation): keep the last step's state if not yet saved.
        if isinstance(exception, SIGTERMException) and self._saved_step != trainer.global_step and not trainer.validating:
            self._save(trainer, "SIGTERM")

    # ------------------------------------------------------------------ resuming
    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self._normalized = normalize_epoch_end(checkpoint)
        self._resumed_from = str(trainer.ckpt_path) if trainer.ckpt_path else "checkpoint"

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # A fresh run creates epoch 0's iterator right after this hook (FitLoop.setup_data). The order of
        # "reseed, create the iterator, draw the first batch" must be the same in every path, so the
        # epoch whose iterator was made after a reseed here or in on_train_start is not reseeded again.
        self._reseeded_epoch = 0
        if self.reseed:
            torch.manual_seed(_seed(self.seed, 1, 0))

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._resumed_from is None:
            return
        fit = trainer.fit_loop
        epoch = trainer.current_epoch
        done = fit.epoch_loop.batch_progress.current.processed
        n_batches = trainer.num_training_batches
        skip = done if 0 < done < n_batches else 0
        loader = fit._combined_loader
        fetcher = fit._data_fetcher
        if loader is not None and fetcher is not None:
            # Lightning drew this epoch's iterator before the restore settled the epoch: redraw it the way an
            # uninterrupted run draws epoch `epoch`, then drop the batches already trained on.
            for dl in loader.flattened:
                _set_epoch(dl, epoch)
                # The loader's index sampler: its batch sampler, or (batch_size=None) a sampler of whole batches.
                attr = "batch_sampler" if getattr(dl, "batch_sampler", None) is not None else "sampler"
                if skip and getattr(dl, attr, None) is not None:
                    object.__setattr__(dl, attr, _SkipFirst(dl, attr, skip))
                    # Lightning warns that a plain DataLoader cannot resume mid-epoch: this callback does it.
                    warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before")
                elif skip:
                    log.warning("train dataloader has no sampler to advance: the resumed epoch restarts its order")
            if self.reseed:
                torch.manual_seed(_seed(self.seed, 1, epoch))
            self._reseeded_epoch = epoch
            iter(fetcher)
        lr = [g["lr"] for opt in trainer.optimizers for g in opt.param_groups]
        log.info(
            "resumed from %s: global step %d, epoch %d, %d of %s batches of this epoch done, lr %s%s",
            self._resumed_from,
            trainer.global_step,
            epoch,
            skip,
            n_batches,
            ", ".join(f"{x:.3g}" for x in lr),
            " (epoch-end checkpoint: next epoch starts)" if self._normalized else "",
        )

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Later epochs create their iterator after this hook (TrainingEpochLoop.on_run_start).
        if self.reseed and trainer.current_epoch != self._reseeded_epoch:
            torch.manual_seed(_seed(self.seed, 1, trainer.current_epoch))

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        if self.reseed:  # dropout masks depend on the step only, not on what ran before it
            torch.manual_seed(_seed(self.seed, 2, trainer.global_step))


def _steps_bar_total(trainer: L.Trainer) -> int | float:
    """The training bar's total: this epoch's batches, or fewer when ``max_steps`` ends the run inside it.

    One optimizer step per batch (times ``accumulate_grad_batches``), so a run of ``max_steps=80`` over an
    epoch of 425 batches shows ``n/80``, not ``n/425``; the bar's position is the batch index within the
    epoch, so a resumed run continues on the same scale.
    """
    batches = trainer.num_training_batches
    max_steps = trainer.max_steps
    if max_steps is None or max_steps < 0 or batches == float("inf"):
        return batches
    accumulate = max(1, int(getattr(trainer, "accumulate_grad_batches", 1) or 1))
    done_before_epoch = trainer.current_epoch * int(batches)
    return max(0, min(int(batches), max_steps * accumulate - done_before_epoch))


class StepsRichProgressBar(RichProgressBar):
    """Lightning's rich bar with the training total capped at the run's real number of steps."""

    @property
    def total_train_batches(self) -> int | float:
        return _steps_bar_total(self.trainer)


__all__ = ["Disabled", "ResumableCheckpoint", "StepsRichProgressBar", "normalize_epoch_end"]
