"""Study tables from run folders: ``python -m canopy_lit.report tables RUN_DIR... --out DIR``.

Every number comes from a run folder (``metrics.json`` + ``run.json``), never from a hand-typed
value. Runs are grouped into *studies* (the ``study`` key that ``configs/ablation/*.yaml`` sets,
else the multirun folder's name); each study gets

- ``<study>.md``: the fixed setting (what every run shares), a systems x benchmarks
  table (quality, tokens, calls, rounds, averaged over benchmarks), and a per-run table
  with 95% bootstrap CIs and duplicate rates (follow-up rounds, and all rounds); probe runs get a decision-accuracy table;
- ``<study>.csv`` (one row per run, plus per-system averages) and ``<study>_wide.csv``.

A setting (k, B, R, refiner, scorer, ...) that varies *within* a method becomes a
column; one shared by all runs goes into the setting line; one that only follows the
method (vanilla is R = 1) is left to the method's config. The study and the variant (the
``variant`` group's option: full, w/o projection, w/o iteration, f0 ...) name every row: a column
wherever the rows differ in them, else the setting line. A table whose runs lost questions has a
``failed`` column.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from canopy_lit.report.render import (
    PROBE_METRICS,
    depth_order,
    render_evidence,
    render_generic,
    render_probe,
    render_qa_long,
    render_qa_wide,
    wide_rows,
)
from canopy_lit.report.runs import Run, evidence_label, group_studies, label_value


@dataclass(frozen=True)
class Setting:
    """One ablation axis of a run (a key of ``run.json``) as the tables present it."""

    name: str
    axis: bool = True  # may become a table column (else only stated in the setting line)
    describe: str = ""
    modes: tuple[str, ...] = ("qa",)  # run modes the knob matters for


ALL_MODES = ("qa", "probe", "evidence", "retrieval")
SETTINGS: tuple[Setting, ...] = (
    Setting("study", describe="study", modes=ALL_MODES),
    Setting("variant", describe="variant", modes=ALL_MODES),
    Setting("refine", describe="refiner", modes=("qa", "evidence")),
    Setting("m", describe="flat top-m", modes=("qa", "evidence")),
    Setting("descend_margin", describe="descend margin δ", modes=("qa", "probe", "evidence")),
    Setting("k", describe="k (items per round)", modes=("qa", "evidence")),
    Setting("B", describe="B (branching)", modes=("qa", "probe", "evidence")),
    Setting("R", describe="R (max rounds)"),
    Setting("exclude_seen", describe="exclude_seen"),
    Setting("routing", describe="modality routing"),
    Setting("scope", describe="retrieval scope", modes=("qa", "evidence")),
    Setting("retriever", describe="retriever", modes=("qa", "evidence", "retrieval")),
    Setting("scorer", describe="scorer", modes=("qa", "probe", "evidence")),
    Setting("adapter", axis=False, describe="adapter", modes=("qa", "probe", "evidence")),
    Setting("encoder", describe="encoder", modes=("qa", "probe", "evidence", "retrieval")),
    Setting("reader", describe="reader/critic LLM"),
    Setting("cap", describe="reader evidence cap (tokens)"),
    Setting("split", axis=False, describe="split", modes=("qa", "probe", "evidence", "retrieval")),
    Setting("limit", axis=False, describe="questions per benchmark (limit)", modes=("qa", "probe", "evidence")),
    Setting("tokenizer", axis=False, describe="tokens counted by", modes=("evidence",)),
)


# Settings that name a row whenever rows differ in them, even where they follow the method.
ROW_NAMES = ("study", "variant")


def variant_label(option: str) -> str:
    """A ``variant`` option as tables name it: ``no_projection`` -> ``w/o projection``, others as they are."""
    return "w/o " + option.removeprefix("no_").replace("_", " ") if option.startswith("no_") else option


def axis_value(run: Run, name: str) -> str:
    """A run's value of one setting as a table cell (``""`` for unset)."""
    value = label_value(run.setting(name))
    return variant_label(value) if name == "variant" else value


# --- grouping -------------------------------------------------------------------------------------


def split_settings(runs: Sequence[Run]) -> tuple[list[str], dict[str, str]]:
    """(axes, fixed) of a set of runs.

    axes: settings that take more than one value within one method (become columns), and the row
        names (study, variant) wherever the runs differ in them;
    fixed: setting -> value for settings that every run shares.
    """
    axes: list[str] = []
    fixed: dict[str, str] = {}
    modes = {r.mode for r in runs}
    for s in SETTINGS:
        if not modes & set(s.modes):
            continue
        vals = [axis_value(r, s.name) for r in runs]
        if not any(vals):
            continue
        if s.name in ROW_NAMES and len(set(vals)) > 1:
            axes.append(s.name)
            continue
        if s.name in ("scorer", "adapter"):
            # blank = whole items (scorer) or f0 (adapter); one value -> setting line, several -> a column:
            # two fθ adapters in one table must not collapse into two rows both labelled fθ
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


_N_KEYS = ("eval/n", "probe/n_questions", "evidence/n")  # questions per run, by mode


def setting_line(runs: Sequence[Run], fixed: Mapping[str, str] | None = None) -> str:
    """The fixed setting of a table, stated in words above it."""
    if fixed is None:
        fixed = split_settings(runs)[1]
    describe = {s.name: s.describe or s.name for s in SETTINGS}
    parts = [f"{describe[k]} = {v}" for k, v in fixed.items() if v]
    n = sorted({int(next((v for k in _N_KEYS if (v := r.metric(k)) is not None), 0)) for r in runs})
    if n and n != [0] and [str(x) for x in n] != [fixed.get("limit")]:
        parts.append("questions per run = " + (str(n[0]) if len(n) == 1 else f"{n[0]}-{n[-1]}"))
    return "**Fixed setting:** " + ("; ".join(parts) if parts else "(none recorded)") + "."


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
    ("judge", "eval/judge"),
    ("judge_ci_low", "eval/judge_ci_low"),
    ("judge_ci_high", "eval/judge_ci_high"),
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
# Averaged over benchmarks (macro); counts are summed instead.
_AVERAGED = ("em", "f1", "match", "judge", "accuracy", "evidence_tokens", "kept_token_ratio", "llm_calls", "rounds",
             "followup_duplicate_rate", "duplicate_rate_all_rounds", "latency_s")
_SUMMED = ("n", "failed")



def metric_cell(run: Run, key: str) -> float | None:
    """A run's metric for a table: None when the run lacks it, NaN when its metrics.json holds no number
    there (a blank cell that keeps the column; ``load_run`` has named file and key)."""
    v = run.metric(key)
    return math.nan if v is None and key in run.metrics else v


def display_path(path: Path) -> str:
    """``path`` relative to the working directory when inside it: generated tables name no machine path."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _run_row(run: Run, axes: Sequence[str], metrics: Sequence[tuple[str, str]]) -> dict[str, Any]:
    row: dict[str, Any] = {"method": run.method, **{a: axis_value(run, a) for a in axes}}
    row["benchmark"] = run.benchmark
    for name, key in metrics:
        row[name] = metric_cell(run, key)
    row["run"] = display_path(run.path)
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
        for key, v in sorted(r.metrics.items(), key=lambda kv: depth_order(kv[0])):
            m = re.fullmatch(r"probe/decision_accuracy/depth_(\d+)", key)
            if m:
                row[f"acc_depth_{m.group(1)}"] = v
        rows.append(row)
    return sorted(rows, key=lambda x: _sort_key(x, axes))


METHOD_ORDER = ("no_retrieval", "vanilla", "ircot", "universalrag", "recomp", "flat", "canopy")


def _sort_key(row: Mapping[str, Any], axes: Sequence[str]) -> tuple:
    def num(v: Any) -> tuple:
        try:
            return (0, float(v), "")
        except (TypeError, ValueError):
            return (1, 0.0, str(v))

    def value(axis: str) -> tuple:
        v = row.get(axis)
        return (v != "full", *num(v)) if axis == "variant" else num(v)  # the reference variant first

    m = row["method"]
    base = m.split(" (", 1)[0]  # "universalrag (modality routing only)" sorts as universalrag
    order = METHOD_ORDER.index(base) if base in METHOD_ORDER else len(METHOD_ORDER)
    return (order, m, *(value(a) for a in axes), row["benchmark"] == "average", row["benchmark"])


EVIDENCE_METRICS: tuple[tuple[str, str], ...] = tuple(
    (f"{name}{suffix}", f"evidence/{name}{suffix}")
    for name in ("answer_recall", "answer_recall_content", "gold_recall", "item_recall", "tokens", "kept_ratio")
    for suffix in ("", "_ci_low", "_ci_high")
) + (("n", "evidence/n"), ("failed", "evidence/failed"), ("answer_recall_n", "evidence/answer_recall_n"),
     ("truncated_questions", "evidence/truncated_questions"))  # fmt: skip


def evidence_rows(runs: Sequence[Run], axes: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """One row per evidence run (``mode: evidence``): method label, axes, benchmark, metrics + CIs."""
    runs = [r for r in runs if r.mode == "evidence"]
    if axes is None:
        axes = split_settings(runs)[0]
    axes = [a for a in axes if a not in ("refine", "scorer")]
    rows = []
    for r in runs:
        row: dict[str, Any] = {"method": evidence_label(r), **{a: axis_value(r, a) for a in axes}}
        row["benchmark"] = r.benchmark
        for name, key in EVIDENCE_METRICS:
            row[name] = metric_cell(r, key)
        row["run"] = display_path(r.path)
        rows.append(row)
    return sorted(rows, key=lambda x: (x["benchmark"], _sort_key(x, axes)))


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
    out.append(f"<sub>{NOTE} Generated from {len(runs)} run folder(s) by `canopy_lit.report`.</sub>\n")
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
