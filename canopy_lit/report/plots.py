"""Study plots (PNG) from run folders; matplotlib's Agg canvas, no pyplot state, no display needed.

- ``quality_vs_tokens``: answer quality vs reader evidence tokens, one curve per method over k;
- ``probe_depth_accuracy``: refinement-decision accuracy per tree depth, f0 vs fθ (probe runs);
- ``decisions_by_modality``: keep / split / drop decisions per modality, from the kept leaf ranges
  recorded per item (a tree's shape depends only on its leaf count and B, so it is rebuilt exactly);
- ``root_relative_scores``: s(q, v) - s(q, root) per depth for gold vs non-gold nodes, f0 vs fθ
  (``probe_nodes.jsonl`` of probe runs).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from canopy_lit.report.decisions import DECISIONS, run_decisions
from canopy_lit.report.runs import Run, evidence_label, label_value, read_jsonl
from canopy_lit.report.tables import split_settings

COLORS = {"kept": "#2e7d32", "split": "#f9a825", "dropped": "#c62828", "f0": "#1f77b4", "fθ": "#d62728"}


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130, bbox_inches="tight")
    return path


def _label(run: Run, axes: Sequence[str]) -> str:
    extra = [f"{a}={label_value(run.setting(a))}" for a in axes]
    return run.method + (f" ({', '.join(extra)})" if extra else "")


def _quality_key(runs: Sequence[Run]) -> tuple[str, str]:
    if any(r.metric("eval/f1") is not None for r in runs):
        return "eval/f1", "F1 (%)"
    return "eval/accuracy", "accuracy (%)"


# --- answer quality vs evidence tokens ------------------------------------------------------------


def plot_quality_vs_tokens(runs: Sequence[Run], path: str | Path) -> Path | None:
    """One panel per benchmark (+ their average): quality vs evidence tokens, one curve per system over k.

    Returns None when no QA run reports evidence tokens.
    """
    qa = [r for r in runs if r.mode == "qa" and r.metric("eval/evidence_tokens") is not None]
    if not qa:
        return None
    axes = [a for a in split_settings(qa)[0] if a != "k"]
    benches = sorted({r.benchmark for r in qa})
    # (benchmark, system) -> k -> (tokens, quality)
    points: dict[tuple[str, str], dict[float, tuple[float, float]]] = defaultdict(dict)
    ylabels = {}
    for b in benches:
        sub = [r for r in qa if r.benchmark == b]
        key, ylabels[b] = _quality_key(sub)
        for r in sub:
            q = r.metric(key)
            if q is not None:
                points[(b, _label(r, axes))][float(r.setting("k") or 0)] = (r.metric("eval/evidence_tokens"), 100 * q)
    panels = list(benches)
    if len(benches) > 1:
        systems = {s for (_, s) in points}
        for s in systems:
            ks = set.intersection(*(set(points.get((b, s), {})) for b in benches))
            for k in ks:
                pts = [points[(b, s)][k] for b in benches]
                points[("average", s)][k] = (float(np.mean([p[0] for p in pts])), float(np.mean([p[1] for p in pts])))
        if any(b == "average" for b, _ in points):
            panels.append("average")
            ylabels["average"] = "mean quality over benchmarks (%)"
    systems = sorted({s for _, s in points})
    cmap = {s: f"C{i % 10}" for i, s in enumerate(systems)}
    ncol = min(3, len(panels))
    nrow = -(-len(panels) // ncol)
    fig = Figure(figsize=(4.6 * ncol, 3.6 * nrow))
    grid = np.atleast_1d(fig.subplots(nrow, ncol, squeeze=False)).ravel()
    for ax, b in zip(grid, panels):
        for s in systems:
            pts = points.get((b, s))
            if not pts:
                continue
            ks = sorted(pts)
            xs, ys = [pts[k][0] for k in ks], [pts[k][1] for k in ks]
            ax.plot(xs, ys, "-o", color=cmap[s], label=s)
            if len(ks) > 1:
                for k, x, y in zip(ks, xs, ys):
                    ax.annotate(f"k={k:g}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        ax.set_title(b)
        ax.set_xlabel("evidence tokens per question (reader)")
        ax.set_ylabel(ylabels.get(b, "quality (%)"))
        ax.grid(alpha=0.3)
    for ax in grid[len(panels) :]:
        ax.set_visible(False)
    handles, labels = grid[0].get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    for ax in grid[1 : len(panels)]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    fig.legend(list(seen.values()), list(seen.keys()), loc="lower center", ncol=min(4, len(seen)), frameon=False,
               bbox_to_anchor=(0.5, -0.02 - 0.03 * ((len(seen) - 1) // 4)))
    fig.suptitle("Answer quality vs evidence tokens")
    fig.tight_layout(rect=(0, 0.06 + 0.03 * ((len(seen) - 1) // 4), 1, 1))
    return _save(fig, Path(path))


# --- evidence runs: answer recall vs evidence tokens -----------------------------------------------


def plot_answer_recall_vs_tokens(runs: Sequence[Run], path: str | Path) -> Path | None:
    """Answer recall of the kept evidence vs its reader tokens (``mode: evidence`` runs).

    One panel per benchmark (rows) and branching factor B (columns); one curve per method
    (refiner + scorer, plus any other varying setting) over k; error bars are the 95% bootstrap
    CIs of both quantities. Returns None when no evidence run reports answer recall.
    """
    ev = [r for r in runs if r.mode == "evidence" and r.metric("evidence/answer_recall") is not None]
    if not ev:
        return None
    axes = [a for a in split_settings(ev)[0] if a not in ("k", "B", "refine", "scorer")]

    def label(r: Run) -> str:
        extra = [f"{a}={label_value(r.setting(a))}" for a in axes]
        return evidence_label(r) + (f" ({', '.join(extra)})" if extra else "")

    benches = sorted({r.benchmark for r in ev})
    bs = sorted({label_value(r.setting("B")) for r in ev}, key=lambda b: (len(b), b))
    systems = sorted({label(r) for r in ev})
    cmap = {s: f"C{i % 10}" for i, s in enumerate(systems)}
    fig = Figure(figsize=(4.8 * len(bs), 3.7 * len(benches)))
    grid = fig.subplots(len(benches), len(bs), squeeze=False)
    for i, b in enumerate(benches):
        for j, bb in enumerate(bs):
            ax = grid[i][j]
            for s in systems:
                pts = sorted(
                    (float(r.setting("k") or 0), r)
                    for r in ev
                    if r.benchmark == b and label_value(r.setting("B")) == bb and label(r) == s
                )
                if not pts:
                    continue
                xs = np.array([r.metric("evidence/tokens") or 0.0 for _, r in pts])
                ys = np.array([100 * (r.metric("evidence/answer_recall") or 0.0) for _, r in pts])

                def err(key: str, centre: np.ndarray, scale: float, rs=pts) -> np.ndarray:
                    lo = np.array([r.metric(f"{key}_ci_low") for _, r in rs], dtype=float) * scale
                    hi = np.array([r.metric(f"{key}_ci_high") for _, r in rs], dtype=float) * scale
                    return np.nan_to_num(np.stack([centre - lo, hi - centre]).clip(min=0))

                ax.errorbar(xs, ys, yerr=err("evidence/answer_recall", ys, 100.0), xerr=err("evidence/tokens", xs, 1.0),
                            fmt="-o", ms=4, capsize=2, color=cmap[s], label=s)  # fmt: skip
                # k beyond a question's pool gives the same point (HotpotQA: 10 items, so k=10 = k=20): one label.
                same: dict[tuple[float, float], list[str]] = {}
                for (k, _), x, y in zip(pts, xs, ys):
                    same.setdefault((round(float(x), 6), round(float(y), 6)), []).append(f"{k:g}")
                for (x, y), ks in same.items():
                    ax.annotate(f"k={','.join(ks)}", (x, y), textcoords="offset points", xytext=(4, -9), fontsize=6)
            ax.set_title(f"{b}" + (f", B={bb}" if bb else ""))
            ax.set_xlabel("evidence tokens per question (reader tokenizer)")
            ax.set_ylabel("answer recall (%)")
            ax.grid(alpha=0.3)
    handles, labels = grid[0][0].get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    for ax in grid.ravel()[1:]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    rows = (len(seen) - 1) // 3
    fig.legend(list(seen.values()), list(seen.keys()), loc="lower center", ncol=min(3, len(seen)), frameon=False,
               bbox_to_anchor=(0.5, -0.02 - 0.03 * rows))  # fmt: skip
    fig.suptitle("Answer recall of the kept evidence vs its tokens (95% bootstrap CIs)")
    fig.tight_layout(rect=(0, 0.06 + 0.03 * rows, 1, 1))
    return _save(fig, Path(path))


# --- probe: decision accuracy per depth -----------------------------------------------------------


def plot_probe_depth_accuracy(runs: Sequence[Run], path: str | Path) -> Path | None:
    """Decision accuracy per tree depth, one panel per benchmark, one line per scorer (f0 / fθ)."""
    probes = [r for r in runs if r.mode == "probe" and any("decision_accuracy/depth_" in k for k in r.metrics)]
    if not probes:
        return None
    axes = [a for a in split_settings(probes)[0] if a != "scorer"]
    benches = sorted({r.benchmark for r in probes})
    fig = Figure(figsize=(4.6 * len(benches), 3.6))
    grid = np.atleast_1d(fig.subplots(1, len(benches), squeeze=False)).ravel()
    for ax, b in zip(grid, benches):
        for r in sorted((r for r in probes if r.benchmark == b), key=lambda r: str(r.setting("scorer"))):
            depth_acc = sorted(
                (int(k.rsplit("_", 1)[1]), v)
                for k, v in r.metrics.items()
                if k.startswith("probe/decision_accuracy/depth_")
            )
            scorer = str(r.setting("scorer") or "?")
            total = r.metric("probe/decision_accuracy")
            extra = ", ".join(f"{a}={label_value(r.setting(a))}" for a in axes)
            name = scorer + (f" ({extra})" if extra else "")
            if total is not None:
                name += f": {100 * total:.1f}% overall"
            ax.plot([d for d, _ in depth_acc], [100 * v for _, v in depth_acc], "-o", label=name,
                    color=COLORS.get(scorer) if not axes else None)
        ax.set_title(b)
        ax.set_xlabel("tree depth of the decision node (root = 0)")
        ax.set_ylabel("decision accuracy (%)")
        ax.set_ylim(0, 100)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Refinement-decision accuracy per depth (every preference in P(v) holds)")
    fig.tight_layout()
    return _save(fig, Path(path))


def plot_decisions_by_modality(runs: Sequence[Run], path: str | Path) -> Path | None:
    """Stacked shares of kept / split / dropped nodes per modality, one panel per compressing system.

    Runs whose refiner keeps whole items (every decision is "keep the root") are left out.
    """
    qa = [r for r in runs if r.mode == "qa" and r.setting("refine") not in (None, "keep_whole")]
    axes = split_settings(qa)[0] if qa else []
    systems: dict[str, dict[str, Counter[str]]] = {}
    for r in qa:
        dec = run_decisions(r)
        if not dec:
            continue
        agg = systems.setdefault(_label(r, axes), defaultdict(Counter))
        for mod, c in dec.items():
            agg[mod].update(c)
    if not systems:
        return None
    fig = Figure(figsize=(max(4.2, 2.2 + 1.1 * len({m for s in systems.values() for m in s})) * len(systems) / 1.3, 3.8))
    grid = np.atleast_1d(fig.subplots(1, len(systems), squeeze=False)).ravel()
    for ax, (name, per_mod) in zip(grid, sorted(systems.items())):
        mods = sorted(per_mod)
        bottom = np.zeros(len(mods))
        totals = np.array([sum(per_mod[m][d] for d in DECISIONS) or 1 for m in mods], dtype=float)
        for d in DECISIONS:
            share = np.array([per_mod[m][d] for m in mods]) / totals
            ax.bar(mods, 100 * share, bottom=100 * bottom, color=COLORS[d], label=d)
            bottom += share
        for i in range(len(mods)):
            ax.text(i, 101, f"n={int(totals[i])}", ha="center", va="bottom", fontsize=7)
        ax.set_ylim(0, 110)
        ax.set_title(name, fontsize=10)
        ax.set_ylabel("share of visited nodes (%)")
    grid[0].legend(fontsize=8, loc="lower left")
    fig.suptitle("Refinement decisions per modality")
    fig.tight_layout()
    return _save(fig, Path(path))


# --- probe: root-relative node scores -------------------------------------------------------------


def probe_node_rows(run: Run) -> list[dict[str, Any]]:
    return read_jsonl(run.path / "probe_nodes.jsonl")


def plot_root_relative_scores(runs: Sequence[Run], path: str | Path) -> Path | None:
    """Box plots of s(v) - s(root) per depth, gold vs non-gold nodes; rows = benchmarks, columns = scorers."""
    data: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in runs:
        if r.mode != "probe":
            continue
        rows = [x for x in probe_node_rows(r) if int(x.get("depth", 0)) > 0]
        if rows:
            data.setdefault((r.benchmark, str(r.setting("scorer") or "?")), []).extend(rows)
    if not data:
        return None
    benches = sorted({b for b, _ in data})
    scorers = sorted({s for _, s in data})
    fig = Figure(figsize=(5.0 * len(scorers), 3.4 * len(benches)))
    grid = fig.subplots(len(benches), len(scorers), squeeze=False, sharey="row")
    for i, b in enumerate(benches):
        for j, s in enumerate(scorers):
            ax = grid[i][j]
            rows = data.get((b, s), [])
            depths = sorted({int(x["depth"]) for x in rows})
            for gold, offset, color in ((True, -0.18, "#2e7d32"), (False, 0.18, "#757575")):
                vals = [[float(x["root_relative"]) for x in rows if int(x["depth"]) == d and bool(x["gold"]) == gold]
                        for d in depths]
                pos = [d + offset for d, v in zip(depths, vals) if v]
                vals = [v for v in vals if v]
                if vals:
                    bp = ax.boxplot(vals, positions=pos, widths=0.3, patch_artist=True, showfliers=False,
                                    manage_ticks=False)
                    for patch in bp["boxes"]:
                        patch.set_facecolor(color)
                        patch.set_alpha(0.6)
                    ax.plot([], [], color=color, lw=6, alpha=0.6, label="gold" if gold else "non-gold")
            ax.axhline(0, color="black", lw=0.8, ls="--")
            ax.set_xticks(depths)
            ax.set_title(f"{b}: {s}")
            ax.set_xlabel("depth")
            ax.set_ylabel("s(v) − s(root)")
            ax.grid(alpha=0.3, axis="y")
            ax.legend(fontsize=8)
    fig.suptitle("Root-relative node scores: gold vs non-gold nodes")
    fig.tight_layout()
    return _save(fig, Path(path))


PLOTS = {
    "quality_vs_tokens": plot_quality_vs_tokens,
    "answer_recall_vs_tokens": plot_answer_recall_vs_tokens,
    "probe_depth_accuracy": plot_probe_depth_accuracy,
    "decisions_by_modality": plot_decisions_by_modality,
    "root_relative_scores": plot_root_relative_scores,
}


def make_all(runs: Sequence[Run], out_dir: str | Path, prefix: str = "") -> dict[str, Path]:
    """Every plot the runs have data for, as ``out_dir/<prefix><name>.png``."""
    out: dict[str, Path] = {}
    for name, fn in PLOTS.items():
        path = fn(runs, Path(out_dir) / f"{prefix}{name}.png")
        if path is not None:
            out[name] = path
    return out
