"""Study tables from run folders: ``python -m canopy_lit.eval.tables RUN_DIR... --out DIR``.

Every number comes from a run folder (``metrics.json`` + ``.hydra/config.yaml``), never
from a hand-typed value. Runs are grouped into *studies* (the ``study`` key that
``configs/ablation/*.yaml`` sets, else the multirun folder's name); each study gets

- ``<study>.md``: the fixed setting (what every run shares), a systems x benchmarks
  table (quality, tokens, calls, rounds, averaged over benchmarks), and a per-run table
  with 95% bootstrap CIs and duplicate rates (follow-up rounds, and all rounds); probe runs get a decision-accuracy table;
- ``<study>.csv`` (one row per run, plus per-system averages) and ``<study>_wide.csv``.

A setting (k, B, R, refiner, scorer, ...) that varies *within* a method becomes a
column; one shared by all runs goes into the setting line; one that only follows the
method (vanilla is R = 1) is left to the method's config.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

log = logging.getLogger(__name__)

FINGERPRINT_FILE = "encoder_fingerprint.json"  # canopy_lit.encoders.base.FINGERPRINT_FILE (no torch import here)


def cfg_get(cfg: Mapping[str, Any], dotted: str, default: Any = None) -> Any:
    """``cfg["a"]["b"]`` for ``"a.b"``; ``default`` when any part is missing."""
    cur: Any = cfg
    for part in dotted.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return default
        cur = cur[part]
    return cur


def _refiner_name(target: Any) -> str | None:
    """``canopy_lit.refine.FlatTopMRefiner`` -> ``flat_top_m``."""
    if not target:
        return None
    cls = str(target).rsplit(".", 1)[-1].removesuffix("Refiner")
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", cls).lower()
    return {"flat_top_m": "flat_top_m", "flat_top": "flat_top_m"}.get(snake, snake)


def _adapter(cfg: Mapping[str, Any]) -> str | None:
    """The adapter as a portable label: ``outputs/<...>/adapter`` (or its folder name), plus its hash.

    Absolute paths name the machine that ran the study, so the path is cut to start at its
    ``outputs`` folder, else made relative to the project root, else reduced to its name. The
    short adapter hash comes from ``<adapter>/encoder_fingerprint.json`` (written by ``save_adapter``)
    when the folder is still there, so two tables with the same label can be told apart.
    """
    raw = cfg_get(cfg, "encoder.adapter")
    if raw in (None, "", "null", "None"):
        return None
    path = Path(str(raw))
    root = cfg_get(cfg, "paths.root_dir")
    full = path if path.is_absolute() or not isinstance(root, str) or "${" in root else Path(root) / path
    if path.is_absolute():
        if "outputs" in path.parts[:-1]:
            path = Path(*path.parts[path.parts.index("outputs") :])
        elif isinstance(root, str) and path.is_relative_to(root):
            path = path.relative_to(root)
        else:
            path = Path(path.name)
    label = path.as_posix()
    meta_file = full / FINGERPRINT_FILE
    if meta_file.is_file():
        try:
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{meta_file}: not valid JSON ({err})") from err
        digest = meta.get("adapter_hash") if isinstance(meta, dict) else None
        if digest:
            label += f" (adapter {str(digest)[:12]})"
    return label


def _scorer(cfg: Mapping[str, Any]) -> str | None:
    """The node scorer behind a row's evidence: a refiner's own (``refine.scorer``, e.g. RECOMP's f0),
    None for whole items in QA runs (nothing scored), else fθ when an adapter is loaded and f0 otherwise."""
    if cfg_get(cfg, "encoder") is None:
        return None
    own = cfg_get(cfg, "refine.scorer")
    if own:
        return {"ftheta": "fθ"}.get(str(own), str(own))
    if cfg_get(cfg, "mode", "qa") in ("qa", "evidence") and _refiner_name(cfg_get(cfg, "refine._target_")) == "keep_whole":
        return None
    return "fθ" if cfg_get(cfg, "encoder.adapter") not in (None, "", "null", "None") else "f0"


@dataclass(frozen=True)
class Setting:
    """One knob of a run: its column name and how to read it from the resolved config."""

    name: str
    read: Callable[[Mapping[str, Any]], Any]
    axis: bool = True  # may become a table column (else only stated in the setting line)
    describe: str = ""
    modes: tuple[str, ...] = ("qa",)  # run modes the knob matters for


def _key(path: str) -> Callable[[Mapping[str, Any]], Any]:
    return lambda cfg: cfg_get(cfg, path)


def _refine_m(cfg: Mapping[str, Any]) -> Any:
    return cfg_get(cfg, "refine.m") if _refiner_name(cfg_get(cfg, "refine._target_")) == "flat_top_m" else None


def _retriever(cfg: Mapping[str, Any]) -> str | None:
    """dense | bm25 | hybrid: the candidate ranking (scope=candidates/benchmark) or the corpus retriever."""
    if cfg_get(cfg, "retrieval") is None:
        return None
    if (cfg_get(cfg, "retrieval.scope") or "corpus") in ("candidates", "benchmark"):
        return str(cfg_get(cfg, "retrieval.candidate_ranking") or "dense")
    target = str(cfg_get(cfg, "retrieval._target_") or "")
    return {"build_bm25_retriever": "bm25", "build_hybrid_retriever": "hybrid"}.get(target.rsplit(".", 1)[-1], "dense")


SETTINGS: tuple[Setting, ...] = (
    Setting("refine", lambda c: _refiner_name(cfg_get(c, "refine._target_")), describe="refiner", modes=("qa", "evidence")),
    Setting("m", _refine_m, describe="flat top-m", modes=("qa", "evidence")),
    Setting("k", _key("retrieval.k"), describe="k (items per round)", modes=("qa", "evidence")),
    Setting("B", _key("tree.branching"), describe="B (branching)", modes=("qa", "probe", "evidence")),
    Setting("R", _key("loop.max_rounds"), describe="R (max rounds)"),
    Setting("exclude_seen", _key("retrieval.exclude_seen"), describe="exclude_seen"),
    Setting("routing", _key("retrieval.routing"), describe="modality routing"),
    Setting("scope", _key("retrieval.scope"), describe="retrieval scope", modes=("qa", "evidence")),
    Setting("retriever", _retriever, describe="retriever", modes=("qa", "evidence", "retrieval")),
    Setting("scorer", _scorer, describe="scorer", modes=("qa", "probe", "evidence")),
    Setting("adapter", _adapter, axis=False, describe="adapter", modes=("qa", "probe", "evidence")),
    Setting(
        "encoder",
        lambda c: cfg_get(c, "encoder.backbone") or cfg_get(c, "encoder.name"),
        describe="encoder",
        modes=("qa", "probe", "evidence", "retrieval"),
    ),
    Setting("reader", lambda c: cfg_get(c, "llm.model") or cfg_get(c, "llm.name"), describe="reader/critic LLM"),
    Setting("cap", _key("loop.reader_max_tokens"), describe="reader evidence cap (tokens)"),
    Setting("split", _key("data.split"), axis=False, describe="split", modes=("qa", "probe", "evidence", "retrieval")),
    Setting("limit", _key("limit"), axis=False, describe="questions per benchmark (limit)", modes=("qa", "probe", "evidence")),
    Setting("tokenizer", _key("evidence.tokenizer"), axis=False, describe="tokens counted by", modes=("evidence",)),
)


@dataclass
class Run:
    """One run folder: its flat metrics and resolved config.

    Attributes:
        path: the run folder.
        metrics: ``metrics.json`` (flat numbers).
        config: ``.hydra/config.yaml`` as plain dicts ({} when absent).
        overrides: ``.hydra/overrides.yaml`` (the job's command-line + sweep overrides).
        study: study name (config ``study``, else the multirun folder's name, else ``"runs"``).
    """

    path: Path
    metrics: dict[str, float]
    config: dict[str, Any] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)
    study: str = "runs"

    @property
    def mode(self) -> str:
        mode = cfg_get(self.config, "mode")
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
        """The row label: ``method.label`` where a config qualifies its baseline, else ``method.name``."""
        name = cfg_get(self.config, "method.label") or cfg_get(self.config, "method.name")
        if name:
            return str(name)
        return "probe" if self.mode == "probe" else "?"

    @property
    def benchmark(self) -> str:
        name = cfg_get(self.config, "data.name")
        if name:
            return str(name)
        first = _first_record(self.path / "predictions.jsonl")
        return str(first.get("benchmark") or self.path.name) if first else self.path.name

    def setting(self, name: str) -> Any:
        for s in SETTINGS:
            if s.name == name:
                return s.read(self.config)
        raise KeyError(name)

    def metric(self, key: str) -> float | None:
        v = self.metrics.get(key)
        if v is None and key in _LEGACY_KEYS:
            v = self.metrics.get(_LEGACY_KEYS[key])
        if v is None and key == "eval/followup_duplicate_rate" and self.mode == "qa":
            # Older runs lack it: recompute from their records (absent when no question had a round 2).
            from canopy_lit.eval.summary import duplicate_rates

            v = duplicate_rates(r for r in self.records() if r.get("status") == "ok").get("followup_duplicate_rate")
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)

    def records(self) -> list[dict[str, Any]]:
        """``predictions.jsonl`` (empty when absent); a torn last line (run killed mid-write) is ignored."""
        from canopy_lit.eval.records import read_predictions  # one record per question id

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
                    return json.loads(line)
                except json.JSONDecodeError:
                    return None
    return None


def _read_yaml(path: Path) -> Any:
    return _read_yaml_text(path.read_text(encoding="utf-8"), path)


def load_config(run_dir: str | Path) -> dict[str, Any]:
    """A run's ``.hydra/config.yaml`` as plain dicts, interpolations resolved where possible.

    Hydra saves the config unresolved (``${paths.data_dir}/hotpotqa``); ``${hydra:runtime.*}``
    comes from the run's ``.hydra/hydra.yaml``, and a value that still cannot be resolved
    (an unset env variable) stays as written instead of failing the whole table.
    """
    from omegaconf import OmegaConf

    hyd = Path(run_dir) / ".hydra"
    cfile = hyd / "config.yaml"
    if not cfile.is_file():
        return {}
    text = cfile.read_text(encoding="utf-8")
    runtime = cfg_get(_read_yaml(hyd / "hydra.yaml") or {}, "hydra.runtime", {}) if (hyd / "hydra.yaml").is_file() else {}
    subs = {"cwd": runtime.get("cwd") or str(Path.cwd()), "output_dir": runtime.get("output_dir") or str(Path(run_dir))}
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


def _read_yaml_text(text: str, where: Path) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(f"{where}: not valid YAML ({err})") from err


def load_run(path: str | Path, study: str | None = None) -> Run:
    """Read one run folder (``metrics.json`` required; the Hydra config is optional)."""
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
    metrics = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    ofile = path / ".hydra" / "overrides.yaml"
    config = load_config(path)
    overrides = _read_yaml(ofile) if ofile.is_file() else []
    name = study or cfg_get(config, "study") or None
    if not name and (path.parent / "multirun.yaml").is_file():
        name = path.parent.name
    return Run(path, metrics, config, [str(o) for o in overrides or []], str(name or "runs"))


def find_runs(paths: Iterable[str | Path], study: str | None = None) -> list[Run]:
    """Runs under ``paths``: each a run folder, or any folder above run folders (multirun, outputs/).

    A folder is a run when it holds ``metrics.json``; folders are walked in sorted order and
    each run is read once.
    """
    runs: list[Run] = []
    seen: set[Path] = set()
    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such run folder")
        found = [p] if (p / "metrics.json").is_file() else sorted(m.parent for m in p.rglob("metrics.json"))
        if not found:
            log.warning("%s: no run folders (metrics.json) below it", p)
        for r in found:
            key = r.resolve()
            if key in seen or ".hydra" in r.parts:
                continue
            seen.add(key)
            runs.append(load_run(r, study))
    return runs


# --- grouping -------------------------------------------------------------------------------------


def _value(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def split_settings(runs: Sequence[Run]) -> tuple[list[str], dict[str, str]]:
    """(axes, fixed) of a set of runs.

    axes: settings that take more than one value within one method (become columns);
    fixed: setting -> value for settings that every run shares.
    """
    axes: list[str] = []
    fixed: dict[str, str] = {}
    modes = {r.mode for r in runs}
    for s in SETTINGS:
        if not modes & set(s.modes):
            continue
        vals = [_value(s.read(r.config)) for r in runs]
        if not any(vals):
            continue
        if s.name == "scorer":  # blank = whole items; one scorer -> setting line, several -> a column per row
            used = sorted({v for v in vals if v})
            if len(used) == 1:
                fixed[s.name] = used[0]
            else:
                axes.append(s.name)
            continue
        if len(set(vals)) == 1:
            fixed[s.name] = vals[0]
            continue
        by_method: dict[str, set[str]] = {}
        for r, v in zip(runs, vals):
            by_method.setdefault(r.method, set()).add(v)
        if s.axis and any(len(v) > 1 for v in by_method.values()):
            axes.append(s.name)
    if "scorer" in axes:
        fixed.pop("adapter", None)
    return axes, fixed


def setting_line(runs: Sequence[Run], fixed: Mapping[str, str] | None = None) -> str:
    """The fixed setting of a table, stated in words above it."""
    if fixed is None:
        fixed = split_settings(runs)[1]
    describe = {s.name: s.describe or s.name for s in SETTINGS}
    parts = [f"{describe[k]} = {v}" for k, v in fixed.items() if v]
    n = sorted({int(r.metrics.get("eval/n", r.metrics.get("probe/n_questions", r.metrics.get("evidence/n", 0)))) for r in runs})
    if n and n != [0] and [str(x) for x in n] != [fixed.get("limit")]:
        parts.append("questions per run = " + (str(n[0]) if len(n) == 1 else f"{n[0]}-{n[-1]}"))
    return "**Fixed setting:** " + ("; ".join(parts) if parts else "(none recorded)") + "."


def system_key(run: Run, axes: Sequence[str]) -> tuple[str, ...]:
    return (run.method, *(_value(run.setting(a)) for a in axes))


# --- rows -----------------------------------------------------------------------------------------

QA_METRICS: tuple[tuple[str, str], ...] = (
    ("n", "eval/n"),
    ("failed", "eval/failed"),
    ("em", "eval/em"),
    ("em_ci_low", "eval/em_ci_low"),
    ("em_ci_high", "eval/em_ci_high"),
    ("f1", "eval/f1"),
    ("f1_ci_low", "eval/f1_ci_low"),
    ("f1_ci_high", "eval/f1_ci_high"),
    ("match", "eval/match"),
    ("match_ci_low", "eval/match_ci_low"),
    ("match_ci_high", "eval/match_ci_high"),
    ("accuracy", "eval/accuracy"),
    ("accuracy_ci_low", "eval/accuracy_ci_low"),
    ("accuracy_ci_high", "eval/accuracy_ci_high"),
    ("evidence_tokens", "eval/evidence_tokens"),
    ("kept_token_ratio", "eval/kept_token_ratio"),
    ("llm_calls", "eval/llm_calls"),
    ("rounds", "eval/rounds"),
    ("followup_duplicate_rate", "eval/followup_duplicate_rate"),
    ("duplicate_rate_all_rounds", "eval/duplicate_rate_all_rounds"),
    ("latency_s", "eval/latency_s"),
)
# Runs written before the rename: ``eval/duplicate_rate`` was computed over all rounds.
_LEGACY_KEYS = {"eval/duplicate_rate_all_rounds": "eval/duplicate_rate"}
# Averaged over benchmarks (macro); counts are summed instead.
_AVERAGED = ("em", "f1", "match", "accuracy", "evidence_tokens", "kept_token_ratio", "llm_calls", "rounds",
             "followup_duplicate_rate", "duplicate_rate_all_rounds", "latency_s")
_SUMMED = ("n", "failed")

PROBE_METRICS: tuple[tuple[str, str], ...] = (
    ("n_questions", "probe/n_questions"),
    ("n_items", "probe/n_items"),
    ("n_nodes", "probe/n_nodes"),
    ("decision_accuracy", "probe/decision_accuracy"),
    ("gold_recall", "probe/gold_recall"),
    ("pruned_share", "probe/pruned_share"),
    ("kept_token_ratio", "probe/kept_token_ratio"),
    ("distractor_kept_token_ratio", "probe/distractor_kept_token_ratio"),
)


def _run_row(run: Run, axes: Sequence[str], metrics: Sequence[tuple[str, str]]) -> dict[str, Any]:
    row: dict[str, Any] = {"method": run.method, **{a: _value(run.setting(a)) for a in axes}}
    row["benchmark"] = run.benchmark
    for name, key in metrics:
        row[name] = run.metric(key)
    row["run"] = str(run.path)
    return row


def _mean(vals: Iterable[float | None]) -> float | None:
    xs = [v for v in vals if v is not None]
    return float(np.mean(xs)) if xs else None


def qa_rows(runs: Sequence[Run], axes: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """One row per QA run, then an ``average`` row per system that ran on more than one benchmark.

    Averages are macro (mean of the per-benchmark means); a system missing a benchmark that
    others have gets no average, so averages always cover the same benchmarks.
    """
    runs = [r for r in runs if r.mode == "qa"]
    if axes is None:
        axes = split_settings(runs)[0]
    rows = sorted((_run_row(r, axes, QA_METRICS) for r in runs), key=lambda x: _sort_key(x, axes))
    benches = sorted({r["benchmark"] for r in rows})
    out: list[dict[str, Any]] = []
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["method"], *(row[a] for a in axes)), []).append(row)
    for key, grp in groups.items():
        out.extend(grp)
        if len(benches) > 1 and sorted({g["benchmark"] for g in grp}) == benches:
            avg: dict[str, Any] = {"method": key[0], **dict(zip(axes, key[1:])), "benchmark": "average"}
            for name, _ in QA_METRICS:
                if name in _SUMMED:
                    avg[name] = float(sum(g[name] or 0 for g in grp))
                elif name in _AVERAGED:
                    avg[name] = _mean(g[name] for g in grp)
            avg["run"] = ""
            out.append(avg)
    return out


def probe_rows(runs: Sequence[Run], axes: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """One row per probe run, with decision accuracy per tree depth (``acc_depth_d``)."""
    runs = [r for r in runs if r.mode == "probe"]
    if axes is None:
        axes = split_settings(runs)[0]
    axes = list(axes) if "scorer" in axes else [*axes, "scorer"]
    rows = []
    for r in runs:
        row = _run_row(r, axes, PROBE_METRICS)
        for key, v in sorted(r.metrics.items(), key=lambda kv: _depth_order(kv[0])):
            m = re.fullmatch(r"probe/decision_accuracy/depth_(\d+)", key)
            if m:
                row[f"acc_depth_{m.group(1)}"] = v
        rows.append(row)
    return sorted(rows, key=lambda x: _sort_key(x, axes))


def _depth_order(key: str) -> tuple[int, str]:
    m = re.search(r"depth_(\d+)$", key)
    return (int(m.group(1)) if m else -1, key)


METHOD_ORDER = ("no_retrieval", "vanilla", "ircot", "universalrag", "recomp", "flat", "canopy")


def _sort_key(row: Mapping[str, Any], axes: Sequence[str]) -> tuple:
    def num(v: Any) -> tuple:
        try:
            return (0, float(v), "")
        except (TypeError, ValueError):
            return (1, 0.0, str(v))

    m = row["method"]
    base = m.split(" (", 1)[0]  # "universalrag (modality routing only)" sorts as universalrag
    order = METHOD_ORDER.index(base) if base in METHOD_ORDER else len(METHOD_ORDER)
    return (order, m, *(num(row.get(a)) for a in axes), row["benchmark"] == "average", row["benchmark"])


def wide_rows(rows: Sequence[Mapping[str, Any]], axes: Sequence[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Systems x benchmarks from ``qa_rows`` output: per benchmark EM, F1 (or Acc) and tokens, then averages.

    Returns:
        (rows, benchmark names in column order).
    """
    benches = sorted({r["benchmark"] for r in rows if r["benchmark"] != "average"})
    out: dict[tuple[str, ...], dict[str, Any]] = {}
    for r in rows:
        key = (r["method"], *(r[a] for a in axes))
        w = out.setdefault(key, {"method": r["method"], **{a: r[a] for a in axes}})
        tag = "avg" if r["benchmark"] == "average" else r["benchmark"]
        for name in ("em", "f1", "accuracy", "evidence_tokens", "llm_calls", "rounds", "followup_duplicate_rate"):
            w[f"{tag}/{name}"] = r.get(name)
    return list(out.values()), benches


# --- rendering ------------------------------------------------------------------------------------

PERCENT = {"em", "f1", "match", "accuracy", "followup_duplicate_rate", "duplicate_rate_all_rounds",
           "decision_accuracy", "gold_recall", "pruned_share", "answer_recall", "item_recall"}
TITLES = {
    "em": "EM",
    "f1": "F1",
    "match": "Match",
    "accuracy": "Acc",
    "evidence_tokens": "tokens",
    "kept_token_ratio": "kept ratio",
    "llm_calls": "LLM calls",
    "rounds": "rounds",
    "followup_duplicate_rate": "follow-up dup %",
    "duplicate_rate_all_rounds": "dup % all rounds",
    "latency_s": "latency s",
    "n": "n",
    "failed": "failed",
    "n_questions": "questions",
    "n_items": "items",
    "n_nodes": "nodes",
    "decision_accuracy": "decision acc",
    "gold_recall": "gold recall",
    "pruned_share": "pruned %",
    "distractor_kept_token_ratio": "distractor kept ratio",
}


def fmt(name: str, v: Any) -> str:
    """A cell: scores and shares in %, tokens as integers, other numbers to 2 decimals."""
    base = name.split("/")[-1]
    if v is None or v == "" or (isinstance(v, float) and math.isnan(v)):
        return ""
    if not isinstance(v, (int, float)):
        return str(v)
    if base in PERCENT or base.startswith("acc_depth_"):
        return f"{100 * v:.1f}"
    if base in ("evidence_tokens", "tokens", "n", "failed", "n_questions", "n_items", "n_nodes"):
        return f"{v:.0f}"
    return f"{v:.2f}"


def _ci(row: Mapping[str, Any], name: str) -> str:
    lo, hi = row.get(f"{name}_ci_low"), row.get(f"{name}_ci_high")
    return f"[{fmt(name, lo)}, {fmt(name, hi)}]" if lo is not None and hi is not None else ""


def md_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |" for cells in body]
    return "\n".join(lines) + "\n"


def _present(rows: Sequence[Mapping[str, Any]], name: str) -> bool:
    return any(r.get(name) is not None for r in rows)


def render_qa_wide(rows: Sequence[Mapping[str, Any]], axes: Sequence[str]) -> str:
    """Markdown systems x benchmarks table."""
    wide, benches = wide_rows(rows, axes)
    cols: list[tuple[str, str]] = []
    for b in [*benches, "avg"]:
        for name in ("em", "f1", "accuracy", "evidence_tokens"):
            if _present(wide, f"{b}/{name}"):
                cols.append((f"{b}/{name}", f"{b if b != 'avg' else 'Avg'} {TITLES[name]}"))
    for name in ("llm_calls", "rounds", "followup_duplicate_rate"):
        for tag in ("avg", *(benches if len(benches) == 1 else ())):
            if _present(wide, f"{tag}/{name}"):
                cols.append((f"{tag}/{name}", f"{tag if tag != 'avg' else 'Avg'} {TITLES[name]}"))
    header = ["method", *axes, *(t for _, t in cols)]
    body = [[w["method"], *(w[a] for a in axes), *(fmt(k, w.get(k)) for k, _ in cols)] for w in wide]
    return md_table(header, body)


def render_qa_long(rows: Sequence[Mapping[str, Any]], axes: Sequence[str]) -> str:
    """Markdown per-run table with 95% CIs."""
    cols: list[tuple[str, str]] = [("n", "n"), ("failed", "failed")]
    for name in ("em", "f1", "match", "accuracy"):
        if _present(rows, name):
            cols += [(name, TITLES[name]), (f"{name}:ci", f"{TITLES[name]} 95% CI")]
    for name in ("evidence_tokens", "kept_token_ratio", "llm_calls", "rounds", "followup_duplicate_rate",
                 "duplicate_rate_all_rounds", "latency_s"):
        if _present(rows, name):
            cols.append((name, TITLES[name]))
    header = ["method", *axes, "benchmark", *(t for _, t in cols)]
    body = []
    for r in rows:
        cells = [r["method"], *(r[a] for a in axes), r["benchmark"]]
        cells += [_ci(r, k.split(":")[0]) if k.endswith(":ci") else fmt(k, r.get(k)) for k, _ in cols]
        body.append(cells)
    return md_table(header, body)


def render_probe(rows: Sequence[Mapping[str, Any]], axes: Sequence[str]) -> str:
    depth_cols = sorted({k for r in rows for k in r if k.startswith("acc_depth_")}, key=_depth_order)
    names = [n for n, _ in PROBE_METRICS if _present(rows, n)]
    header = ["benchmark", *axes, *(TITLES[n] for n in names), *(f"acc d={k.rsplit('_', 1)[1]}" for k in depth_cols)]
    body = [[r["benchmark"], *(r[a] for a in axes), *(fmt(n, r.get(n)) for n in [*names, *depth_cols])] for r in rows]
    return md_table(header, body)


EVIDENCE_METRICS: tuple[tuple[str, str], ...] = tuple(
    (f"{name}{suffix}", f"evidence/{name}{suffix}")
    for name in ("answer_recall", "gold_recall", "item_recall", "tokens", "kept_ratio")
    for suffix in ("", "_ci_low", "_ci_high")
) + (("n", "evidence/n"), ("failed", "evidence/failed"), ("answer_recall_n", "evidence/answer_recall_n"))


def evidence_label(run: Run) -> str:
    """The evidence a run hands the reader: its refiner and scorer, e.g. ``parent_relative (fθ)``."""
    refine = _value(run.setting("refine")) or "?"
    scorer = _value(run.setting("scorer"))
    return f"{refine} ({scorer})" if scorer else refine


def evidence_rows(runs: Sequence[Run], axes: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """One row per evidence run (``mode: evidence``): method label, axes, benchmark, metrics + CIs."""
    runs = [r for r in runs if r.mode == "evidence"]
    if axes is None:
        axes = split_settings(runs)[0]
    axes = [a for a in axes if a not in ("refine", "scorer")]
    rows = []
    for r in runs:
        row: dict[str, Any] = {"method": evidence_label(r), **{a: _value(r.setting(a)) for a in axes}}
        row["benchmark"] = r.benchmark
        for name, key in EVIDENCE_METRICS:
            row[name] = r.metric(key)
        row["run"] = str(r.path)
        rows.append(row)
    return sorted(rows, key=lambda x: (x["benchmark"], _sort_key(x, axes)))


def render_evidence(rows: Sequence[Mapping[str, Any]], axes: Sequence[str]) -> str:
    """Markdown: answer recall (95% CI), gold-leaf and item recall, reader tokens, kept ratio per run."""
    axes = [a for a in axes if a not in ("refine", "scorer")]
    header = ["benchmark", "method", *axes, "n", "answer recall", "95% CI", "gold recall", "item recall",
              "tokens", "tokens 95% CI", "kept ratio"]  # fmt: skip
    body = [
        [r["benchmark"], r["method"], *(r[a] for a in axes), fmt("n", r.get("n")), fmt("answer_recall", r.get("answer_recall")),
         _ci(r, "answer_recall"), fmt("gold_recall", r.get("gold_recall")), fmt("item_recall", r.get("item_recall")),
         fmt("tokens", r.get("tokens")), _ci(r, "tokens"), fmt("kept_ratio", r.get("kept_ratio"))]  # fmt: skip
        for r in rows
    ]
    return md_table(header, body)


def render_generic(runs: Sequence[Run]) -> str:
    """Any other mode (e.g. retrieval): every metric as a column."""
    keys = sorted({k for r in runs for k in r.metrics})
    header = ["benchmark", "run", *keys]
    body = [[r.benchmark, r.path.name, *(fmt(k, r.metrics.get(k)) for k in keys)] for r in runs]
    return md_table(header, body)


NOTE = (
    "Scores (EM, F1, Acc, decision accuracy, recall, shares) in %; tokens = mean evidence tokens given to the "
    "reader per question (reader tokenizer); LLM calls and rounds are means per question; follow-up dup % = "
    "share of the items retrieved in rounds >= 2 that were already held (all rounds: round 1 included); "
    "failed questions score 0. CIs: 95% bootstrap over questions. Averages are means over benchmarks."
)


def render_study(name: str, runs: Sequence[Run]) -> str:
    """The markdown of one study: setting line, then the tables its runs support."""
    out = [f"### {name}\n"]
    for mode in ("qa", "probe", "evidence"):
        sub = [r for r in runs if r.mode == mode]
        if not sub:
            continue
        axes, fixed = split_settings(sub)
        out.append(setting_line(sub, fixed) + "\n")
        if mode == "qa":
            rows = qa_rows(sub, axes)
            out.append(render_qa_wide(rows, axes))
            out.append("<details><summary>Per run, with 95% CIs</summary>\n\n" + render_qa_long(rows, axes) + "\n</details>\n")
        elif mode == "evidence":
            out.append(render_evidence(evidence_rows(sub, axes), axes))
        else:
            out.append(render_probe(probe_rows(sub, axes), [a for a in axes if a != "scorer"] + ["scorer"]))
    other = [r for r in runs if r.mode not in ("qa", "probe", "evidence")]
    if other:
        out.append(render_generic(other))
    out.append(f"<sub>{NOTE} Generated from {len(runs)} run folder(s) by `canopy_lit.eval.tables`.</sub>\n")
    return "\n".join(out)


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({k: "" if r.get(k) is None else r.get(k) for k in cols})


def group_studies(runs: Sequence[Run]) -> dict[str, list[Run]]:
    studies: dict[str, list[Run]] = {}
    for r in runs:
        studies.setdefault(r.study, []).append(r)
    return studies


def study_rows(runs: Sequence[Run]) -> dict[str, list[dict[str, Any]]]:
    """Plain rows of a study by table kind (``qa``, ``qa_wide``, ``probe``): for CSV and W&B tables."""
    out: dict[str, list[dict[str, Any]]] = {}
    qa = [r for r in runs if r.mode == "qa"]
    if qa:
        axes = split_settings(qa)[0]
        out["qa"] = qa_rows(qa, axes)
        out["qa_wide"] = wide_rows(out["qa"], axes)[0]
    probe = [r for r in runs if r.mode == "probe"]
    if probe:
        out["probe"] = probe_rows(probe)
    evidence = [r for r in runs if r.mode == "evidence"]
    if evidence:
        out["evidence"] = evidence_rows(evidence)
    return out


def write_tables(runs: Sequence[Run], out_dir: str | Path) -> dict[str, Path]:
    """Write ``<study>.md`` / ``.csv`` per study and ``main.md`` (systems x benchmarks).

    ``main`` is the study named ``main`` when there is one, else all QA runs together.

    Returns:
        study name -> its markdown file.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    studies = group_studies(runs)
    if "main" not in studies:
        qa = [r for r in runs if r.mode == "qa"]
        if qa and len(studies) > 1:
            studies = {"main": qa, **studies}
    written: dict[str, Path] = {}
    for name, sub in studies.items():
        md = out / f"{name}.md"
        md.write_text(render_study(name, sub), encoding="utf-8")
        written[name] = md
        for kind, rows in study_rows(sub).items():
            suffix = {"qa": "", "qa_wide": "_wide", "probe": "_probe", "evidence": "_evidence"}[kind]
            write_csv(out / f"{name}{suffix}.csv", rows)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m canopy_lit.eval.tables",
        description="Gather run folders (metrics.json + .hydra/config.yaml) into markdown + CSV study tables.",
    )
    ap.add_argument("runs", nargs="+", help="run folders, or folders above them (multirun dirs, outputs/)")
    ap.add_argument("--out", required=True, help="folder for <study>.md / .csv")
    ap.add_argument("--study", default=None, help="put every run into this one study")
    ap.add_argument("--plots", action="store_true", help="also write the PNG plots the runs support")
    ap.add_argument("--wandb-project", default=None, help="also log tables and plots to this W&B project")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        runs = find_runs(args.runs, args.study)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not runs:
        print("error: no run folders (with metrics.json) found", file=sys.stderr)
        return 2
    written = write_tables(runs, args.out)
    images: dict[str, Path] = {}
    if args.plots:
        from canopy_lit.eval.plots import make_all

        studies = group_studies(runs)
        for name, sub in studies.items():
            made = make_all(sub, args.out, prefix=f"{name}_" if len(studies) > 1 else "")
            images.update({(f"{name}/{k}" if len(studies) > 1 else k): v for k, v in made.items()})
    if args.wandb_project:
        from canopy_lit.eval.wandb_report import log_report

        log_report(runs, images, project=args.wandb_project)
    for name, path in written.items():
        print(f"{name}: {path}")
    for name, path in images.items():
        print(f"plot {name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
