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

from canopy_lit.config_tree import TRAIN_ORDER, print_config_tree
from canopy_lit.data.splits import record_adapter_split
from canopy_lit.encoders.late import LATE_POOLINGS
from canopy_lit.io import atomic_dir, atomic_write_text
from canopy_lit.redaction import redact_config, redacted_argv
from canopy_lit.schema import USAGE_ERROR, check_train_run, exit_if_invalid

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


def finished_metrics(run_dir: Path) -> dict[str, Any] | None:
    """The metrics.json of a finished run in ``run_dir`` (written last, atomically), None if unfinished."""
    path = Path(run_dir) / "metrics.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # unreadable, but written by a finished test: still finished


def check_finished_run(run_dir: Path, resuming: bool, force: bool, debug: str | None) -> bool:
    """True when ``run_dir`` holds a finished run that this run must leave as it is (say so and stop, exit 0).

    Raises:
        SystemExit: 2 (one line) when a debug mode would write into the finished run.
    """
    metrics = finished_metrics(run_dir)
    if metrics is None:
        return False
    if debug and (force or not resuming):  # a plain resume writes nothing, debug mode or not
        print(f"error: {run_dir} holds a finished run (metrics.json): debug={debug} does not write into it; "
              "choose another hydra.run.dir", file=sys.stderr)
        raise SystemExit(USAGE_ERROR)
    if not resuming or force:
        return False
    step = metrics.get("train/global_step")
    print(f"{run_dir} holds a finished run (metrics.json{f', global step {step:.0f}' if step is not None else ''}): "
          "nothing to resume, nothing changed (resume=force reruns its test)", file=sys.stderr)
    return True


def _run_debug(cfg: DictConfig) -> str | None:
    """The run's debug mode: Hydra's ``debug=`` choice, else ``fdr`` when fast_dev_run is on."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        choice = HydraConfig.get().runtime.choices.get("debug")
        if choice:
            return str(choice)
    return "fdr" if OmegaConf.select(cfg, "trainer.fast_dev_run", default=False) else None


def _resuming(ckpt_path: Any) -> bool:
    return ckpt_path not in (None, "", "null")


def _debug_choice(config: DictConfig) -> str | None:
    """The ``debug=`` option of a Hydra config (None: none chosen or no Hydra config)."""
    choices = OmegaConf.select(config, "hydra.runtime.choices", default=None)
    return choices.get("debug") if choices is not None else None


class CheckRunDirWritable(HydraCallback):
    """Hydra callback, before Hydra writes ``.hydra/`` and the log in the run (or sweep) folder: a finished
    run is left as it is when resumed (exit 0) or reached by a debug mode (exit 2), and the folder must be
    writable (exit 1)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        run_dir = Path(config.hydra.run.dir)
        force = config.get("resume", "auto") == "force"
        if check_finished_run(run_dir, _resuming(config.get("ckpt_path")), force, _debug_choice(config)):
            raise SystemExit(0)
        exit_if_not_writable(run_dir)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        exit_if_not_writable(Path(config.hydra.sweep.dir))


def search_space_problems(config: DictConfig) -> list[str]:
    """One line per invalid Optuna sweeper setting of a multirun config (``hydra.sweeper``): ``n_trials``,
    and each search space of ``hydra.sweeper.params`` or the command line, built as the sweeper builds it."""
    sweeper = OmegaConf.select(config, "hydra.sweeper", default=None)
    if sweeper is None or "optuna" not in str(sweeper.get("_target_", "")):
        return []
    from hydra_plugins.hydra_optuna_sweeper._impl import create_params_from_overrides

    problems = []
    for key in ("n_trials", "n_jobs"):
        value = sweeper.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            problems.append(f"hydra.sweeper.{key} must be an integer >= 1, got {value!r}")
    params = sweeper.get("params") or {}
    overrides = [(f"hydra.sweeper.params.{k}", f"{k}={v}") for k, v in params.items()]
    overrides += [(o, o) for o in OmegaConf.select(config, "hydra.overrides.task", default=[]) or []]
    for where, override in overrides:
        try:
            create_params_from_overrides([override])
        except Exception as err:  # noqa: BLE001  optuna's ValueError / Hydra's parse error: named here
            problems.append(f"{where}: {str(err).splitlines()[0]}")
    return problems


class CheckSearchSpace(HydraCallback):
    """Hydra callback (hparams_search presets): the Optuna search space is checked before the sweep starts;
    exit 2 with one line per problem."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        problems = search_space_problems(config)
        for line in problems:
            print(f"error: {line}", file=sys.stderr)
        if problems:
            raise SystemExit(USAGE_ERROR)


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
    def pct(v: float | None) -> str:
        return "–" if v is None else f"{100 * v:.1f}"  # not measured here (model.test_scorers)

    for name, prefix in rows:
        ft, f0 = metrics.get(f"{prefix}decision_accuracy"), metrics.get(f"{prefix}decision_accuracy_f0")
        if ft is None and f0 is None:
            continue
        n = metrics.get(f"{prefix}n", float("nan"))
        delta = "–" if ft is None or f0 is None else f"{100 * (ft - f0):+.1f}"
        table.add_row(name, f"{n:.0f}", pct(f0), pct(ft), delta)
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


DISABLED = "canopy_lit.training.callbacks.Disabled"


def _say_disabled_overrides(cfg: DictConfig) -> None:
    """One log line per command-line ``callbacks.<name>.*`` override of a callback the preset switched off."""
    from hydra.core.hydra_config import HydraConfig

    off = {n for n, c in (cfg.get("callbacks") or {}).items() if c and c.get("_target_") == DISABLED}
    if not off or not HydraConfig.initialized():
        return
    for override in HydraConfig.get().overrides.task:
        name = override.lstrip("+~").split("=", 1)[0].split(".")
        if len(name) > 2 and name[0] == "callbacks" and name[1] in off:
            log.warning("%s has no effect: debug=%s switches callbacks.%s off (fast_dev_run keeps no checkpoints "
                        "or monitors); use debug=limit to run it", override, _run_debug(cfg), name[1])


def _fit_val_check_interval(trainer: L.Trainer, datamodule: Any) -> None:
    """A ``trainer.val_check_interval`` of more batches than an epoch has (a small file) becomes the epoch's
    batch count, said in the log: validation then runs at each epoch end (Lightning would stop in fit)."""
    interval = trainer.val_check_interval
    if (not isinstance(interval, int) or isinstance(interval, bool) or trainer.check_val_every_n_epoch is None
            or not trainer.limit_val_batches or trainer.fast_dev_run):
        return
    had = getattr(datamodule, "trainer", None)
    datamodule.trainer = trainer  # the loader shards by the trainer's world size, as in fit
    try:
        n = len(datamodule.train_dataloader())
    except TypeError:  # an iterable loader: Lightning decides
        return
    finally:
        datamodule.trainer = had
    limit = trainer.limit_train_batches
    n = min(n, limit) if isinstance(limit, int) else int(n * limit)
    if 0 < n < interval:
        log.warning("trainer.val_check_interval=%d exceeds the %d training batches of an epoch: validating "
                    "every %d batches (each epoch end) instead", interval, n, n)
        trainer.val_check_interval = n


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
    print_config_tree(cfg, TRAIN_ORDER)
    start = time.time()
    out_dir = Path(cfg.paths.output_dir)
    force = cfg.get("resume", "auto") == "force"
    if check_finished_run(out_dir, _resuming(cfg.get("ckpt_path")), force, _run_debug(cfg)):
        return {k: float(v) for k, v in (finished_metrics(out_dir) or {}).items() if isinstance(v, (int, float))}
    # resume=force on a finished run: keys this process does not measure again are kept
    previous = (finished_metrics(out_dir) or {}) if force and _resuming(cfg.get("ckpt_path")) else {}
    exit_if_not_writable(out_dir)
    progress: dict[str, Any] = {"phase": "setup", "step": 0, "adapter": False, "previous": previous}
    with SigtermStop() as sigterm:
        try:
            return _run(cfg, out_dir, start, sigterm, progress)
        except SIGTERMException:
            log.warning(
                "stopped by SIGTERM during %s at global step %d (%smetrics.json not written); resume with ckpt_path=last",
                progress["phase"], progress["step"], "adapter/ saved, " if progress["adapter"] else "",
            )
            raise SystemExit(STOPPED_BY_SIGTERM) from None


def _fit(
    cfg: DictConfig, trainer: L.Trainer, model: L.LightningModule, datamodule: Any, ckpt_path: str | None,
    out_dir: Path, sigterm: SigtermStop, progress: dict[str, Any],
) -> dict[str, float]:
    """Fit, then save the best validation checkpoint's adapter; the fit's flat metrics."""
    _fit_val_check_interval(trainer, datamodule)
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
                model.encoder.save_adapter(tmp)
                if getattr(datamodule, "split_record", None):  # evaluate.py checks data.seed against it
                    record_adapter_split(tmp, datamodule.split_record)
        progress["adapter"] = True
    return metrics


def _run(cfg: DictConfig, out_dir: Path, start: float, sigterm: SigtermStop, progress: dict[str, Any]) -> dict[str, float]:
    out_dir.mkdir(parents=True, exist_ok=True)
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg.threads))
    L.seed_everything(cfg.seed, workers=True)

    # The data is checked before the encoder loads: a resume on other data or an empty split fails in
    # seconds, not after loading the model or fitting.
    datamodule = instantiate(cfg.datamodule, _convert_="all")
    pooling = OmegaConf.select(cfg, "encoder.node_pooling", default=None) or "node"
    if pooling in LATE_POOLINGS:  # the examples name each node's place in its item, batches carry the items
        datamodule.set_node_pooling(pooling)
    ckpt_path = _resolve_ckpt(cfg.get("ckpt_path"), out_dir)
    _check_resume(ckpt_path, datamodule)
    datamodule.setup("fit")
    exit_if_invalid(bool(cfg.get("test")), datamodule.check_splits)
    log.info("encoder <%s>", cfg.encoder.backbone)
    encoder = instantiate(cfg.encoder, device="cpu")  # Lightning places it (each DDP rank on its own GPU)
    model = instantiate(cfg.model, encoder=encoder, _convert_="all")
    # each split is pre-tokenised when its loader is built: the test split's ids are not held through fit
    late = encoder.late_tokenize if getattr(datamodule, "late", False) else None
    datamodule.set_tokenizer(encoder.tokenize, pretokenize=False, **({"late": late} if late else {}))
    callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c and "_target_" in c]
    _say_disabled_overrides(cfg)
    # a logger's name and hyperparameters leave the process (W&B, hparams.yaml): secrets redacted
    loggers = [
        instantiate(redact_config(OmegaConf.to_container(c, resolve=True)))
        for c in (cfg.get("logger") or {}).values() if c and "_target_" in c
    ]  # fmt: skip
    trainer: L.Trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)
    with redacted_argv():  # the first logged hyperparameters start the W&B run, which records the command line
        for lg in loggers:
            lg.log_hyperparams(redact_config(OmegaConf.to_container(cfg, resolve=True)))

    metrics: dict[str, float] = {}
    if cfg.get("train", True):
        metrics = _fit(cfg, trainer, model, datamodule, ckpt_path, out_dir, sigterm, progress)
    else:
        adapter = OmegaConf.select(cfg, "encoder.adapter", default=None)
        log.info("train=false: no fit and no adapter saved; the test pass scores %s (%s)",
                 f"the adapter {adapter} as fθ" if adapter else "the untrained model", ", ".join(model.hparams.test_scorers))
    progress["phase"] = "test"
    if cfg.get("test") and not trainer.interrupted:
        if cfg.get("test_threads"):  # the adapter is saved: the test pass's threads change no weight
            torch.set_num_threads(int(cfg.test_threads))
        trainer.test(model, datamodule=datamodule, verbose=False)
        sigterm.raise_if_received()  # a SIGTERM in the last test batch: the run still stops, unwritten
        metrics.update(model.test_results)
    metrics["train/seconds"] = time.time() - start
    kept = {k: float(v) for k, v in progress["previous"].items() if k not in metrics and isinstance(v, (int, float))}
    if kept:
        log.info("resume=force: %d keys of the finished run's metrics.json kept (not measured again)", len(kept))
        metrics = {**kept, **metrics}
    if trainer.is_global_zero:
        atomic_write_text(out_dir / "metrics.json", json.dumps(dict(sorted(metrics.items())), indent=2) + "\n")
        _summary(metrics, list(datamodule.benchmark_names), list(getattr(datamodule, "zero_shot_names", [])))
        log.info("run dir %s (%.0f s)", out_dir, metrics["train/seconds"])
    return metrics
