"""Experiment tracking around the entry points: W&B offline when no key is configured, one W&B run per
Hydra job, evaluation runs mirrored to W&B.

``train.py`` and ``evaluate.py`` register :class:`WandbRuns` as a Hydra callback (``hydra.callbacks`` in
their configs). With ``logger=wandb`` and nothing that says how to reach W&B (no ``WANDB_API_KEY``, no
``~/.netrc`` entry from ``wandb login``, no ``WANDB_MODE``, no ``wandb online|offline|disabled`` setting), a
job runs with ``WANDB_MODE=offline`` and says so in one line: it never waits on a login prompt and never
needs a network; ``wandb sync`` uploads the run later. ``log_evaluation`` is evaluate.py's W&B logging:
the run folder's metrics, table and per-question rows, under the logger config's project, name and group.
"""

from __future__ import annotations

import configparser
import importlib.util
import logging
import netrc
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback as HydraCallback
from omegaconf import DictConfig, OmegaConf

from canopy_lit.redaction import redact_config, redact_saved_configs

log = logging.getLogger(__name__)

WANDB_LOGGER = "canopy_lit.loggers.WandbLogger"
# a logger block is W&B's with either target (a user's config may name Lightning's class itself)
WANDB_LOGGERS = (WANDB_LOGGER, "lightning.pytorch.loggers.WandbLogger")
_WANDB_HOST = "https://api.wandb.ai"


def wandb_logger_config(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any] | None:
    """The resolved ``logger.<name>`` block whose target is a ``WandbLogger`` (``WANDB_LOGGERS``); None without one."""
    loggers = cfg.get("logger") if cfg is not None else None
    if not loggers:
        return None
    for block in loggers.values():
        if isinstance(block, Mapping) and block.get("_target_") in WANDB_LOGGERS:
            plain = (
                OmegaConf.to_container(block, resolve=True) if isinstance(block, DictConfig) else dict(block)
            )
            assert isinstance(plain, dict)
            return plain
    return None


def _wandb_setting(key: str) -> str | None:
    """A value of W&B's settings files (``wandb login|online|offline|disabled`` write them): the working
    directory's ``wandb/settings`` first, then the user's."""
    config_dir = Path(os.environ.get("WANDB_CONFIG_DIR") or Path.home() / ".config" / "wandb")
    for path in (Path(os.environ.get("WANDB_DIR") or ".") / "wandb" / "settings", config_dir / "settings"):
        parser = configparser.ConfigParser()
        try:
            parser.read(path)
        except (OSError, configparser.Error):
            continue
        if parser.get("default", key, fallback=None):
            return parser.get("default", key)
    return None


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: sys.modules[module] is None (hidden on purpose)
        return False


def wandb_credentials() -> str | None:
    """Where a W&B key would come from (an environment variable, a netrc file, W&B's settings), or None."""
    for var in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE"):
        if os.environ.get(var):
            return var
    host = urlsplit(os.environ.get("WANDB_BASE_URL") or _WANDB_HOST).hostname
    netrc_path = Path(os.environ.get("NETRC") or Path.home() / ".netrc")
    try:
        if host and netrc.netrc(netrc_path).authenticators(host):
            return str(netrc_path)
    except (OSError, netrc.NetrcParseError):
        pass
    return "W&B settings" if _wandb_setting("api_key") else None


def wandb_mode_chosen(logger: Mapping[str, Any]) -> bool:
    """Whether the user said how W&B runs: ``WANDB_MODE`` / ``WANDB_DISABLED``, ``logger.wandb.offline``, or
    ``wandb online|offline|disabled`` (a ``mode`` in W&B's settings)."""
    if os.environ.get("WANDB_MODE") or os.environ.get("WANDB_DISABLED"):
        return True
    return bool(logger.get("offline")) or _wandb_setting("mode") is not None


def offline_unless_configured(cfg: DictConfig | Mapping[str, Any]) -> str | None:
    """With a W&B logger configured and neither a key nor a chosen mode: ``WANDB_MODE=offline`` for this
    process, and the line that says so (also returned); None when nothing changed."""
    logger = wandb_logger_config(cfg)
    if logger is None or wandb_mode_chosen(logger) or wandb_credentials():
        return None
    if not _installed("wandb"):  # the config check names the extra to install
        return None
    os.environ["WANDB_MODE"] = "offline"
    runs = Path(str(logger.get("save_dir") or os.environ.get("WANDB_DIR") or ".")) / "wandb"
    line = (
        f"W&B: no API key (WANDB_API_KEY or `wandb login`), logging offline to {runs}; "
        f"upload later with `wandb sync {runs}/offline-run-*`"
    )
    log.warning(line)
    return line


def finish_wandb_run(summary: Mapping[str, float] | None = None) -> None:
    """End the process's active W&B run, if any, with ``summary`` added to its summary (a multirun's next
    job starts a run of its own)."""
    wandb = sys.modules.get("wandb")
    run = getattr(wandb, "run", None) if wandb is not None else None
    if run is None:
        return
    for key, value in (summary or {}).items():
        run.summary[key] = value
    wandb.finish()


class WandbRuns(HydraCallback):
    """Hydra callback: each job with ``logger=wandb`` runs offline without a key (one line), and ends its
    W&B run when it ends, so that every job of a multirun (Optuna trials, grids) is a run of its own.
    A finished training run's summary gets the value train.py returned to sweepers (``optimized_metric``,
    the best validation score), beside the last one logged."""

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        offline_unless_configured(config)

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        key = config.get("optimized_metric")
        value = job_return.return_value if job_return.status == JobStatus.COMPLETED else None
        finish_wandb_run({key: float(value)} if key and isinstance(value, int | float) else None)


class RedactSavedConfig(HydraCallback):
    """Hydra callback: the job's saved ``.hydra/config.yaml``, ``hydra.yaml`` and ``overrides.yaml`` are
    rewritten with secrets redacted (``canopy_lit.redaction``) as soon as Hydra has written them, before the
    job runs: a ``user:password@`` in ``llm.base_url`` typed on the command line is not kept on disk."""

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized():
            return
        hydra = HydraConfig.get()
        if hydra.output_subdir is not None:
            redact_saved_configs(Path(hydra.runtime.output_dir) / str(hydra.output_subdir))


def log_evaluation(cfg: DictConfig, run_dir: str | Path) -> str | None:
    """evaluate.py with ``logger=wandb``: the run folder's metrics, its study-table row and per-question rows
    as one W&B run (project, name, group and tags of ``logger.wandb``, the resolved config as its config).

    Returns:
        the W&B run's local folder; None without a W&B logger.
    """
    others = [
        name
        for name, block in (cfg.get("logger") or {}).items()
        if isinstance(block, Mapping) and block.get("_target_") not in (None, *WANDB_LOGGERS)
    ]
    if others:
        log.warning(
            "logger.%s: evaluate.py logs to W&B only (logger=wandb); its results are in %s",
            ", logger.".join(others),
            run_dir,
        )
    logger = wandb_logger_config(cfg)
    if logger is None:
        return None
    from canopy_lit.report.wandb import log_eval_run

    offline_unless_configured(cfg)  # library callers have no Hydra callback
    config = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(config, dict)
    # a password in llm.base_url (or the run name made of the command line) must not reach W&B
    return log_eval_run(run_dir, redact_config(logger), config=redact_config(config))


__all__ = [
    "WANDB_LOGGER",
    "WANDB_LOGGERS",
    "RedactSavedConfig",
    "WandbRuns",
    "finish_wandb_run",
    "log_evaluation",
    "offline_unless_configured",
    "wandb_credentials",
    "wandb_logger_config",
    "wandb_mode_chosen",
]
