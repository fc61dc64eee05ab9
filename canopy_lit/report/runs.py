"""Run folders -> ``Run`` objects: flat metrics, resolved config, recorded axes, per-question records.

A run folder is any folder with a ``metrics.json``. Its ablation axes come from ``run.json``
(written by the evaluation, ``canopy_lit.eval.records.write_run_axes``); a training run's are computed
from its saved ``.hydra/config.yaml``. Hydra's group
choices and the job's overrides come from ``run.json`` (``choices``, ``overrides``: committed study
runs keep no other ``.hydra`` file), else from ``.hydra/hydra.yaml`` and ``.hydra/overrides.yaml``.
Study archives (``experiments/runs/<study>.zip``, ``canopy_lit.report.archive``) are unpacked on first read.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from canopy_lit.eval.records import cfg_get, read_predictions, read_run_axes, run_axes
from canopy_lit.report.archive import (
    SUFFIX,
    ArchiveError,
    corrupt_archives,
    ensure_unpacked,
    folder_path,
    is_study_archive,
)

log = logging.getLogger(__name__)


def label_value(v: Any) -> str:
    """An axis value as a table cell: ``""`` for unset, ``true``/``false``, ``5`` for ``5.0``."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


@dataclass
class Run:
    """One run folder: its flat metrics, resolved config and ablation axes.

    Attributes:
        path: the run folder.
        metrics: ``metrics.json`` (flat numbers).
        config: ``.hydra/config.yaml`` as plain dicts ({} when absent).
        overrides: the job's command-line + sweep overrides (``run.json``, else ``.hydra/overrides.yaml``).
        study: study name (``--study``, else the ``study`` axis, else the multirun folder's name, else ``"runs"``).
        axes: ``run.json``; without its ``mode`` (a training run) computed from ``config``.
    """

    path: Path
    metrics: dict[str, float]
    config: dict[str, Any] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)
    study: str = "runs"
    axes: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.axes:
            self.axes = run_axes(self.config)

    @property
    def mode(self) -> str:
        mode = self.axes.get("mode")
        if mode:
            return str(mode)
        task = cfg_get(self.config, "task_name")
        if task and task != "evaluate":
            return str(task)  # e.g. a training run folder under the same outputs/
        prefixes = {k.split("/", 1)[0] for k in self.metrics}
        for prefix, name in (("eval", "qa"), ("probe", "probe"), ("evidence", "evidence"), ("retrieval", "retrieval")):
            if prefix in prefixes:
                return name
        return "other"

    @property
    def method(self) -> str:
        """The row label: the method's ``label`` where a config qualifies its baseline, else its name."""
        name = self.axes.get("method_label") or self.axes.get("method")
        if name:
            return str(name)
        return "probe" if self.mode == "probe" else "?"

    @property
    def benchmark(self) -> str:
        name = self.axes.get("benchmark")
        if name:
            return str(name)
        first = _first_record(self.path / "predictions.jsonl")
        return str(first.get("benchmark") or self.path.name) if first else self.path.name

    def setting(self, name: str) -> Any:
        """One axis value (None when the run does not have it); ``adapter`` carries its short hash."""
        if name == "adapter":
            path, digest = self.axes.get("adapter"), self.axes.get("adapter_hash")
            return f"{path} (adapter {str(digest)[:12]})" if path and digest else path
        return self.axes.get(name)

    def metric(self, key: str) -> float | None:
        v = self.metrics.get(key)
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)

    def records(self) -> list[dict[str, Any]]:
        """``predictions.jsonl`` (empty when absent), one record per question id; a torn last line is ignored."""
        return read_predictions(self.path / "predictions.jsonl")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """JSON lines of ``path`` ([] when absent). A bad last line is a torn write and is skipped;
    a bad line before it is an error naming file and line."""
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as err:
            if n == len(lines):
                log.warning("%s: ignoring a torn last line", path)
                break
            raise ValueError(f"{path}: line {n} is not valid JSON ({err})") from err
    return out


def _first_record(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                try:
                    first = json.loads(line)
                except json.JSONDecodeError:
                    return None
                return first if isinstance(first, dict) else None
    return None


def _read_yaml_text(text: str, where: Path) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(f"{where}: not valid YAML ({err})") from err


def _read_yaml(path: Path) -> Any:
    return _read_yaml_text(path.read_text(encoding="utf-8"), path)


def _hydra_runtime(run_dir: Path) -> dict[str, Any]:
    """``hydra.runtime`` of a run's ``.hydra/hydra.yaml`` ({} when absent)."""
    path = Path(run_dir) / ".hydra" / "hydra.yaml"
    runtime = cfg_get(_read_yaml(path) or {}, "hydra.runtime", {}) if path.is_file() else {}
    return runtime if isinstance(runtime, dict) else {}


def load_config(run_dir: str | Path) -> dict[str, Any]:
    """A run's ``.hydra/config.yaml`` as plain dicts, interpolations resolved where possible.

    Hydra saves the config unresolved (``${paths.data_dir}/hotpotqa``); ``${hydra:runtime.*}``
    comes from the run's ``.hydra/hydra.yaml`` (committed runs have none: the working directory is
    ``.``, the project root they are read from), and a value that still cannot be resolved
    (an unset env variable) stays as written instead of failing the whole table.
    """

    cfile = Path(run_dir) / ".hydra" / "config.yaml"
    if not cfile.is_file():
        return {}
    text = cfile.read_text(encoding="utf-8")
    runtime = _hydra_runtime(Path(run_dir))
    subs = {"cwd": runtime.get("cwd") or ".", "output_dir": runtime.get("output_dir") or str(Path(run_dir))}
    for key, value in subs.items():
        text = text.replace("${hydra:runtime." + key + "}", str(value))
    try:
        cfg = OmegaConf.create(_read_yaml_text(text, cfile))
    except Exception as err:
        raise ValueError(f"{cfile}: cannot read the run config ({err})") from err
    if not isinstance(OmegaConf.to_container(cfg, resolve=False), dict):
        raise ValueError(f"{cfile}: expected a mapping")

    def walk(node: Any, prefix: str) -> Any:
        if isinstance(node, dict):
            return {k: walk(v, f"{prefix}.{k}" if prefix else str(k)) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, f"{prefix}[{i}]") for i, v in enumerate(node)]
        if isinstance(node, str) and "${" in node:
            try:
                value = OmegaConf.select(cfg, prefix)
                return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
            except Exception:  # an unresolvable interpolation keeps its text
                return node
        return node

    return walk(OmegaConf.to_container(cfg, resolve=False), "")


def _metric_value(mfile: Path, key: str, value: Any) -> float:
    """A metrics.json value as a float; anything but a finite number is NaN (a blank cell that keeps
    its column, ``Run.metric`` gives None) and one warning line naming file and key."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    log.warning("%s: %s is %s, not a finite number; its table cells are left blank", mfile, key,
                json.dumps(value)[:60])  # fmt: skip
    return math.nan


def load_run(path: str | Path, study: str | None = None) -> Run:
    """Read one run folder (``metrics.json`` required; ``run.json`` and the Hydra config optional)."""
    path = Path(path)
    mfile = path / "metrics.json"
    try:
        metrics = json.loads(mfile.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise FileNotFoundError(f"{path}: no metrics.json (the run has not finished)") from err
    except json.JSONDecodeError as err:
        raise ValueError(f"{mfile}: not valid JSON ({err})") from err
    if not isinstance(metrics, dict):
        raise ValueError(f"{mfile}: expected a JSON object of numbers, got {type(metrics).__name__}")
    metrics = {key: _metric_value(mfile, key, v) for key, v in metrics.items()}
    config = load_config(path)
    recorded = read_run_axes(path) or {}
    overrides = recorded.get("overrides")
    if overrides is None:
        ofile = path / ".hydra" / "overrides.yaml"
        overrides = _read_yaml(ofile) if ofile.is_file() else []
    axes = recorded
    if "mode" not in recorded:  # a training run, or a folder written by hand: the axes from the saved config
        choices = recorded.get("choices") or _hydra_runtime(path).get("choices") or {}
        axes = {**run_axes(config, choices), **recorded}
    name = study or axes.get("study") or None
    if not name and (path.parent / "multirun.yaml").is_file():
        name = path.parent.name
    return Run(path, metrics, config, [str(o) for o in overrides or []], str(name or "runs"), axes)


def _refuse_corrupt(path: Path) -> None:
    """Raise naming the corrupt zip behind ``path``, if one is why it holds no runs."""
    bad = corrupt_archives(path)
    if bad:
        archive, why = bad[0]
        raise ArchiveError(f"{archive}: corrupt zip archive, its runs cannot be read ({why}); restore it "
                           "(a committed one: from git) or delete it")  # fmt: skip


def _study_folder(path: Path) -> Path:
    """A study archive given by name (``experiments/runs/<study>.zip``) stands for its folder, unpacked first."""
    if path.suffix == SUFFIX and path.is_file():
        _refuse_corrupt(path)
        if not is_study_archive(path):
            raise ArchiveError(f"{path}: not a study archive (python -m canopy_lit.report pack writes those)")
        return folder_path(path)
    return path


def find_runs(paths: Iterable[str | Path], study: str | None = None) -> list[Run]:
    """Runs under ``paths``: each a run folder, or any folder above run folders (multirun, outputs/).

    A folder is a run when it holds ``metrics.json``; folders are walked in sorted order and
    each run is read once. A study archive behind a path (``experiments/runs/<study>.zip``) is unpacked first.
    """
    runs: list[Run] = []
    seen: set[Path] = set()
    paths = [_study_folder(Path(p)) for p in paths]
    ensure_unpacked(paths)
    for p in paths:
        if not p.exists():
            _refuse_corrupt(p)
            raise FileNotFoundError(f"{p}: no such run folder")
        found = [p] if (p / "metrics.json").is_file() else sorted(m.parent for m in p.rglob("metrics.json"))
        if not found:
            _refuse_corrupt(p)
            log.warning("%s: no run folders (metrics.json) below it", p)
        for r in found:
            key = r.resolve()
            if key in seen or ".hydra" in r.parts:
                continue
            seen.add(key)
            runs.append(load_run(r, study))
    return runs


def group_studies(runs: Sequence[Run]) -> dict[str, list[Run]]:
    """Study name -> its runs, in the order first seen."""
    studies: dict[str, list[Run]] = {}
    for r in runs:
        studies.setdefault(r.study, []).append(r)
    return studies


def evidence_label(run: Run) -> str:
    """The evidence a run hands the reader: its refiner and scorer, e.g. ``parent_relative (fθ)``."""
    refine = label_value(run.setting("refine")) or "?"
    scorer = label_value(run.setting("scorer"))
    return f"{refine} ({scorer})" if scorer else refine

