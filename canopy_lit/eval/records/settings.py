"""``settings.json``: every setting a run folder's records depend on (``run_settings``), so that a rerun into a
folder with results made under other settings is refused instead of continuing and relabelling them."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from canopy_lit.eval.records.axes import adapter_axes, plain_config
from canopy_lit.eval.records.predictions import read_predictions
from canopy_lit.io import atomic_write_text, naming

log = logging.getLogger(__name__)


SETTINGS_FILE = "settings.json"
# Config keys (or whole groups) that never change a record: how fast, how many, where, and post hoc
# judging. Every other key of the resolved config is a setting, so a key added later is one too.
ANSWER_NEUTRAL_KEYS = frozenset({
    "threads", "concurrency", "progress", "print_config", "limit", "retry_failed", "max_consecutive_failures", "resume",
    "shard",  # which part of the questions ran (run.json names it; canopy_lit.eval.shards)
    "judge",  # verdicts go to judgements.jsonl, never into the records
    "study",  # a label for reports
    "logger",  # where the results are mirrored (W&B)
    "paths",  # where the project, data, caches and run folder are (paths under them are kept relative)
    "retrieval.cache_dir", "retrieval.node_cache_dir",  # caches keyed by what they hold
    "loop.batched", "loop.max_batch",  # the same records as sequential (evaluate.yaml)
    "llm.n_threads", "llm.base_url", "llm.api_key_env", "llm.timeout", "llm.max_retries", "llm.max_concurrency",
})  # fmt: skip

def _flat(tree: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in tree.items():
        if isinstance(value, Mapping) and value:
            yield from _flat(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _answer_keys(tree: Mapping[str, Any]) -> dict[str, Any]:
    """The flat ``a.b.c`` keys of ``tree`` but the answer-neutral ones."""
    neutral = tuple(f"{k}." for k in ANSWER_NEUTRAL_KEYS)
    return {k: v for k, v in _flat(tree) if k not in ANSWER_NEUTRAL_KEYS and not k.startswith(neutral)}


def run_settings(cfg: Any) -> dict[str, Any]:
    """What a run's records depend on: every key of the resolved config (flat, dotted) but
    ``ANSWER_NEUTRAL_KEYS``, with paths under ``paths.*`` folders written relative to them (a moved
    checkout is the same run), plus ``encoder.adapter_hash``: retrained weights at the same path change answers.
    """
    tree = plain_config(cfg)
    tree.pop("hydra", None)
    roots = sorted(
        ((str(v).rstrip("/"), f"${{paths.{k}}}") for k, v in (tree.get("paths") or {}).items()
         if isinstance(v, str) and v.startswith("/") and v.strip("/")),
        key=lambda root: -len(root[0]),
    )  # fmt: skip
    settings: dict[str, Any] = {}
    for key, value in _answer_keys(tree).items():
        if isinstance(value, str):
            root = next(((r, name) for r, name in roots if value == r or value.startswith(f"{r}/")), None)
            value = value if root is None else root[1] + value[len(root[0]) :]
        settings[key] = value
    adapter_hash = adapter_axes(tree)[1]
    if adapter_hash:
        settings["encoder.adapter_hash"] = adapter_hash
    return json.loads(json.dumps(settings, default=str))  # as settings.json holds them


def settings_fingerprint(settings: Mapping[str, Any]) -> str:
    """A short hash of ``run_settings``: one id for every run folder made with the same settings."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


class RunFolderError(RuntimeError):
    """A run folder holds something a run cannot continue from; the message names the file and the remedy."""


def run_has_results(run_dir: str | Path) -> bool:
    """Whether a run folder holds results of an earlier run: records in predictions.jsonl, or metrics.json.

    Raises:
        RunFolderError: a line of predictions.jsonl before the last is not JSON (names file and line).
    """
    run_dir = Path(run_dir)
    try:
        records = read_predictions(run_dir / "predictions.jsonl")
    except ValueError as err:
        raise RunFolderError(f"{err}; fix or remove that line to resume") from None
    return bool(records) or (run_dir / "metrics.json").is_file()


def discard_refused_run_folder(run_dir: str | Path, log_names: tuple[str, ...] = ("evaluate.log",)) -> None:
    """A run refused before any work leaves no folder behind: remove ``run_dir`` when it holds nothing but what
    Hydra wrote at start (``.hydra/`` and the job log, one of ``log_names``). A folder with anything else (an
    earlier run's records, the user's own files) is left as it is."""
    run_dir = Path(run_dir)
    try:
        names = {p.name for p in run_dir.iterdir()}
    except OSError:
        return
    if not names <= {".hydra", *log_names}:
        return
    shutil.rmtree(run_dir / ".hydra", ignore_errors=True)
    for name in names - {".hydra"}:
        (run_dir / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        run_dir.rmdir()


def settings_changes(run_dir: str | Path, cfg: Any) -> list[tuple[str, Any, Any]]:
    """``(key, recorded, now)`` for every setting of ``cfg`` that differs from the ones ``run_dir``'s
    results were made with, as its ``settings.json`` records them ([] when they match). A folder whose
    ``settings.json`` is missing records no settings to continue under: one change, ``settings.json`` itself."""
    stored = Path(run_dir) / SETTINGS_FILE
    if not stored.is_file():
        return [(SETTINGS_FILE, "<absent>", "<this run's settings>")]
    try:
        recorded = json.loads(stored.read_text(encoding="utf-8"))["settings"]
    except (ValueError, KeyError, TypeError) as err:
        raise RunFolderError(f"{stored}: not a settings file ({err}); restore it, or use another hydra.run.dir") from None
    now, absent = run_settings(cfg), "<absent>"
    keys = sorted(recorded.keys() | now.keys())
    return [(k, recorded.get(k, absent), now.get(k, absent)) for k in keys if recorded.get(k, absent) != now.get(k, absent)]


def write_run_settings(run_dir: str | Path, cfg: Any) -> Path:
    """``<run_dir>/settings.json``: the settings (``run_settings``) and their fingerprint, written atomically."""
    settings = run_settings(cfg)
    text = json.dumps({"fingerprint": settings_fingerprint(settings), "settings": settings}, indent=1, ensure_ascii=False)
    path = Path(run_dir) / SETTINGS_FILE
    with naming(path):
        return atomic_write_text(path, text + "\n")


def write_hydra_files(run_dir: str | Path, cfg: Any) -> None:
    """``.hydra/config.yaml``, ``hydra.yaml`` and ``overrides.yaml`` as Hydra writes them at job start, which
    the evaluate config turns off (``hydra.output_subdir: null``) so that they are written only once the run
    folder is locked and checked. Outside a Hydra job only ``config.yaml``."""

    files = {"config.yaml": OmegaConf.to_yaml(cfg)}
    if HydraConfig.initialized():
        files["hydra.yaml"] = OmegaConf.to_yaml(HydraConfig.instance().cfg)
        files["overrides.yaml"] = OmegaConf.to_yaml(HydraConfig.get().overrides.task)
    for name, text in files.items():
        path = Path(run_dir) / ".hydra" / name
        with naming(path):
            atomic_write_text(path, text)
