"""The node-encoder recipe ablation table from training run folders: ``python -m canopy_lit.studies.recipe``.

Each run folder is one ``python train.py experiment=quickstart <overrides>`` (its metrics.json holds the
best validation score and the test metrics of f0 and fθ). Rows are selected on validation only
(``val/best_decision_accuracy``); test is reported once per row. Writes experiments/tables/recipe.md
and rewrites the ``<!-- BEGIN table:recipe -->`` block (and the probe, margin and selection blocks) of
experiments/recipe.md; the study archives under experiments/runs are unpacked first.

    python -m canopy_lit.studies.recipe [--runs experiments/runs]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import yaml

from canopy_lit.markdown import md_table
from canopy_lit.metrics import paired_ratio_bootstrap_ci
from canopy_lit.report.archive import ensure_unpacked
from canopy_lit.studies import PROJECT_ROOT as ROOT
from canopy_lit.studies.paired import replace_block

BENCHES = ("hotpotqa", "nq", "ottqa", "tatqa")


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def run_overrides(run: Path) -> list[str] | None:
    """A run's command-line overrides: ``run.json`` (committed runs), else ``.hydra/overrides.yaml``; None without either."""
    record = run / "run.json"
    if record.is_file() and "overrides" in (recorded := json.loads(record.read_text(encoding="utf-8"))):
        return [str(o) for o in recorded["overrides"]]
    path = run / ".hydra" / "overrides.yaml"
    return [str(o) for o in yaml.safe_load(path.read_text(encoding="utf-8")) or []] if path.is_file() else None


def _overrides(run: Path) -> str:
    overrides = run_overrides(run)
    if overrides is None:
        return ""
    # the protocol's own overrides are left out; another experiment preset (e.g. quickstart_mpnet) is the row's point
    common = ("hydra.", "experiment=quickstart", "trainer.max_time", "datamodule.options.nq.max_questions.test")
    keep = [o for o in overrides if not o.startswith(common) or o.startswith("experiment=quickstart_")]
    return " ".join(f"`{o}`" for o in keep) or "(quickstart default)"


def row(run: Path) -> list[str] | None:
    path = run / "metrics.json"
    if not path.is_file():
        return None
    m = json.loads(path.read_text())
    cells = [run.name, _overrides(run), _pct(m.get("val/best_decision_accuracy"))]
    for key in ("in_domain", "zero_shot"):
        ft, f0 = m.get(f"test/{key}/decision_accuracy"), m.get(f"test/{key}/decision_accuracy_f0")
        cells.append(f"{_pct(f0)} → {_pct(ft)}" if ft is not None else "–")
    for kind in ("stop", "descend"):
        ft, f0 = m.get(f"test/decision_accuracy/{kind}"), m.get(f"test/decision_accuracy/{kind}_f0")
        cells.append(f"{_pct(f0)} → {_pct(ft)}" if ft is not None else "–")
    for b in BENCHES:
        ft, f0 = m.get(f"test/{b}/decision_accuracy"), m.get(f"test/{b}/decision_accuracy_f0")
        cells.append(f"{100 * (ft - f0):+.1f}" if ft is not None and f0 is not None else "–")
    cells.append(str(int(m.get("train/global_step", 0))) or "–")
    return cells


def render(runs: Path) -> str:
    rows = [r for d in sorted(p for p in runs.iterdir() if p.is_dir()) if (r := row(d))] if runs.is_dir() else []
    if not rows:
        return "_No recipe runs yet._\n"
    head = ["run", "overrides", "val acc (select)", "test in-domain f0 → fθ", "test zero-shot (TAT-QA) f0 → fθ",
            "stop f0 → fθ", "descend f0 → fθ", *(f"Δ {b}" for b in BENCHES), "steps"]  # fmt: skip
    return md_table(head, rows)


def probe_table(probes: Path) -> str:
    """Probe metrics per benchmark and scorer: ``probes/<benchmark>/<scorer>/metrics.json``."""
    rows = []
    for path in sorted(probes.glob("*/*/metrics.json")) if probes.is_dir() else []:
        m = json.loads(path.read_text())
        bench, scorer = path.parent.parent.name, path.parent.name
        rows.append([
            bench, scorer, f"{m.get('probe/n_questions', 0):.0f}", _pct(m.get("probe/decision_accuracy")),
            _pct(m.get("probe/decision_accuracy/stop")), _pct(m.get("probe/gold_recall")),
            f"{m.get('probe/kept_token_ratio', float('nan')):.3f}",
            f"{m.get('probe/distractor_kept_token_ratio', float('nan')):.3f}",
        ])  # fmt: skip
    if not rows:
        return "_No probe runs yet._\n"
    head = ["benchmark", "scorer", "questions", "decision acc", "stop acc", "gold recall",
            "kept-token ratio (gold)", "kept-token ratio (distractors)"]  # fmt: skip
    return md_table(head, rows)


def probe_plot(probes: Path, out: Path) -> Path | None:
    """Decision accuracy vs gold recall, one panel per benchmark, one point per scorer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs: dict[str, dict[str, dict]] = {}
    for path in sorted(probes.glob("*/*/metrics.json")) if probes.is_dir() else []:
        runs.setdefault(path.parent.parent.name, {})[path.parent.name] = json.loads(path.read_text())
    if not runs:
        return None
    fig, axes = plt.subplots(1, len(runs), figsize=(3.2 * len(runs), 3.0), squeeze=False)
    for ax, (bench, scorers) in zip(axes[0], sorted(runs.items()), strict=True):
        for name, m in scorers.items():
            x, y = 100 * m.get("probe/gold_recall", float("nan")), 100 * m.get("probe/decision_accuracy", float("nan"))
            ax.scatter([x], [y], label=name)
            ax.annotate(name, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        _label(ax, bench, "gold recall (%)", "decision accuracy (%)")
    return _save(fig, out)


def _label(ax, title: str, xlabel: str, ylabel: str) -> None:
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)


def _save(fig, out: Path) -> Path:
    import matplotlib.pyplot as plt

    if not fig.legends:  # a figure legend is placed after the layout, outside it
        fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out


def margin_runs(root: Path, scorer_part: int = 1) -> list[dict]:
    """δ-sweep probe runs under ``root`` (metrics.json + .hydra/config.yaml per run).

    The scorer is the ``scorer_part``-th folder below ``root`` (``margin/<split>/<scorer>/``: 1,
    ``valprobe/<scorer>/``: 0); the split comes from the run's config. Below the scorer folder Hydra's
    override_dirname subdirs nest where an override holds a path (the adapter).
    """
    out = []
    for path in sorted(root.rglob("metrics.json")) if root.is_dir() else []:
        cfg = yaml.safe_load((path.parent / ".hydra" / "config.yaml").read_text())
        out.append({
            "split": cfg["data"]["split"], "scorer": path.relative_to(root).parts[scorer_part],
            "benchmark": cfg["data"]["name"], "delta": float(cfg["refine"].get("descend_margin", 0.0)),
            "m": json.loads(path.read_text()), "dir": path.parent,
        })  # fmt: skip
    return out


# The recall-aware rows next to f0 and base: the full grid's 21 curves hide them.
SIBLING_ROWS = ("f0", "base", "gold_sibling10", "gold_sibling30", "gold_sibling10_steps300_last", "sibling10_qv",
                "sibling10_qv_textonly", "sibling10_r16")  # fmt: skip
# Weight-space interpolation toward f0 (encoder.adapter_scale): each adapter next to its scaled versions.
INTERPOLATION_ROWS = ("f0", *(f"{r}{s}" for r in ("base", "lora_r16", "gold_sibling30") for s in ("", "_s0.5", "_s0.75")))
SELECT_BENCHES = ("nq", "ottqa")  # validation splits large enough to select on (HotpotQA val: 8 questions)


def pooled(ms: Sequence[dict], kind: str = "") -> tuple[float | None, int]:
    """Decision accuracy pooled over benchmarks, weighted by their decision counts: (accuracy, n)."""
    acc, n = f"probe/decision_accuracy{'/' + kind if kind else ''}", f"probe/n_nodes{'/' + kind if kind else ''}"
    hits = [(m[acc], m[n]) for m in ms if acc in m and m.get(n)]
    total = sum(w for _, w in hits)
    return (sum(a * w for a, w in hits) / total if total else None), int(total)


# Pooled ratios of the probe as (numerator, denominator) columns of probe_questions.jsonl.
RATIOS = {
    "recall": ("gold_leaves_kept", "gold_leaves"),
    "ratio": ("kept_tokens", "whole_tokens"),
    "acc": ("decisions_correct", "decisions"),
}
MARGIN_ALPHA = 0.10  # rule (c): the lower end of a 90% interval, a one-sided 95% bound


def question_rows(run_dir: Path | None) -> dict[str, dict] | None:
    """question id -> per-question counts of a probe run (``probe_questions.jsonl``), None if it has none."""
    path = run_dir / "probe_questions.jsonl" if run_dir is not None else None
    if path is None or not path.is_file():
        return None
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {r["question"]: r for r in rows}


def paired_diff(a: dict[str, dict] | None, b: dict[str, dict] | None, ratio: str = "recall", alpha: float = 0.05) -> tuple[float, float, float] | None:
    """Pooled ``ratio`` of run a minus run b over the same questions, with a paired bootstrap (1 - alpha) CI.

    None when either run lacks per-question rows. Raises ValueError when the runs probed different
    questions: a paired comparison over a silent intersection would hide a changed split.
    """
    if a is None or b is None:
        return None
    if set(a) != set(b):
        raise ValueError(f"paired comparison over different questions: {len(set(a) ^ set(b))} differ")
    num, den = RATIOS[ratio]
    ids = sorted(a)
    cols = [[r[i][k] for i in ids] for r, k in ((a, num), (a, den), (b, num), (b, den))]
    return paired_ratio_bootstrap_ci(*cols, alpha=alpha)


def selection_grid(runs: Sequence[dict], split: str = "val", benches: Sequence[str] = SELECT_BENCHES) -> list[dict]:
    """One row per (scorer, δ) with every benchmark of ``benches`` on ``split``: pooled accuracy, and per
    benchmark recall and kept-token ratio next to f0's (δ = 0) to check the recall and token goals; where
    runs have per-question rows, the paired recall difference to f0 with a 90% interval (rule (c))."""
    by_key = {(r["scorer"], r["delta"], r["benchmark"]): r for r in runs if r["split"] == split}
    f0 = {b: by_key.get(("f0", 0.0, b)) for b in benches}
    f0_rows = {b: question_rows(f0[b].get("dir")) if f0[b] else None for b in benches}
    grid = []
    for scorer, delta in sorted({(s, d) for s, d, _ in by_key}):
        rs = [by_key.get((scorer, delta, b)) for b in benches]
        if any(r is None for r in rs):
            continue
        ms = [r["m"] for r in rs]
        recall = {b: m.get("probe/gold_recall", float("nan")) for b, m in zip(benches, ms, strict=True)}
        ratio = {b: m.get("probe/kept_token_ratio", float("nan")) for b, m in zip(benches, ms, strict=True)}
        keeps = all(f0[b] is not None and recall[b] >= f0[b]["m"].get("probe/gold_recall", float("inf")) for b in benches)
        tokens = all(r <= 0.55 for r in ratio.values())
        ci = {b: paired_diff(question_rows(r.get("dir")), f0_rows[b], "recall", MARGIN_ALPHA) for b, r in zip(benches, rs, strict=True)}
        margin = all(c is not None and c[1] >= 0 for c in ci.values())
        grid.append({
            "scorer": scorer, "delta": delta, "acc": pooled(ms), "stop": pooled(ms, "stop"), "recall": recall,
            "ratio": ratio, "keeps_recall": keeps, "meets_tokens": keeps and tokens, "recall_ci": ci,
            "margin_ok": margin and tokens,
        })  # fmt: skip
    return grid


RULES = {
    "paper": "accuracy at δ = 0",
    "recall": "accuracy with recall ≥ f0 (any δ)",
    "margin": "accuracy with recall ≥ f0 by a one-sided 95% paired bound and ratio ≤ 0.55 (rule (c))",
}


def select(grid: Sequence[dict], rule: str) -> dict | None:
    """The validation choice: the highest pooled decision accuracy over (a) ``paper``: adapters at δ = 0;
    (b) ``recall``: every (adapter, δ) keeping at least f0's gold recall on each selection benchmark;
    (c) ``margin``: every (adapter, δ) whose paired 90% interval of recall - f0 lies at or above 0 on each
    selection benchmark, with a kept-token ratio <= 0.55 on each."""
    if rule not in RULES:
        raise ValueError(f"unknown selection rule {rule!r}; one of {sorted(RULES)}")
    pool = [g for g in grid if g["scorer"] != "f0" and g["acc"][0] is not None]
    keep = {"paper": lambda g: g["delta"] == 0.0, "recall": lambda g: g["keeps_recall"], "margin": lambda g: g["margin_ok"]}
    return max((g for g in pool if keep[rule](g)), key=lambda g: g["acc"][0], default=None)


def _ci_cell(c: tuple[float, float, float] | None) -> str:
    return "–" if c is None else f"{100 * c[0]:+.1f} [{100 * c[1]:+.1f}, {100 * c[2]:+.1f}]"


def selection_table(grid: Sequence[dict], benches: Sequence[str] = SELECT_BENCHES, rules: bool = True) -> str:
    """The validation grid as a table, followed (``rules``) by each rule's choice."""
    if not grid:
        return "_No validation probe runs yet._\n"
    head = ["scorer", "δ", "decision acc (n)", "stop acc (n)",
            *(f"{b} gold recall / kept-token ratio" for b in benches), "recall ≥ f0", "and ratio ≤ 0.55",
            *(f"{b} recall − f0 [90% CI]" for b in benches), "rule (c)"]  # fmt: skip
    rows = []
    for g in grid:
        (acc, n), (stop, ns) = g["acc"], g["stop"]
        rows.append([
            g["scorer"], f"{g['delta']:g}", f"{_pct(acc)} ({n})", f"{_pct(stop)} ({ns})",
            *(f"{_pct(g['recall'][b])} / {g['ratio'][b]:.3f}" for b in benches),
            "yes" if g["keeps_recall"] else "no", "yes" if g["meets_tokens"] else "no",
            *(_ci_cell(g["recall_ci"].get(b)) for b in benches), "yes" if g["margin_ok"] else "no",
        ])  # fmt: skip
    lines = [md_table(head, rows).rstrip("\n")]
    for rule, label in RULES.items() if rules else ():
        g = select(grid, rule)
        lines.append(f"\nSelected on validation by {label}: "
                     + (f"`{g['scorer']}` at δ = {g['delta']:g} ({_pct(g['acc'][0])})." if g else "none of the grid."))
    return "\n".join(lines) + "\n"


def mpnet_label(scorer: str) -> str:
    """An mpnet validation scorer's name beside MiniLM's: its test probes' name (``mpnet_f0``, ``ftheta_<run>``)."""
    return "mpnet_f0" if scorer == "f0" else f"ftheta_{scorer}"


def mpnet_selection(minilm: Sequence[dict], mpnet: Sequence[dict]) -> str:
    """The encoder-capacity grid twice: against mpnet's own f0 (with the rules' choices), then every mpnet
    scorer against MiniLM's f0, the baseline a user of the default encoder has; there mpnet's f0 reads
    ``mpnet_f0`` and an adapter ``ftheta_<run>``, the names of their test probes."""
    if not mpnet:
        return "_No mpnet validation probe runs yet._\n"
    renamed = [{**r, "scorer": mpnet_label(r["scorer"])} for r in mpnet]
    vs_minilm = [g for g in selection_grid([*(r for r in minilm if r["scorer"] == "f0"), *renamed]) if g["scorer"] != "f0"]
    return (
        "Against mpnet's own f0:\n\n" + selection_table(selection_grid(mpnet))
        + "\nThe same mpnet scorers against MiniLM's f0 (the default encoder's baseline):\n\n"
        + selection_table(vs_minilm, rules=False)
    )


def paired_test_table(runs: Sequence[dict], f0_runs: Sequence[dict], alpha: float = 0.05) -> str:
    """Test probes against f0 (δ = 0) on the same questions: paired differences with (1 - alpha) CIs of
    decision accuracy, gold recall and kept-token ratio, per benchmark."""
    f0 = {(r["benchmark"], r["split"]): r for r in f0_runs if r["scorer"] == "f0" and r["delta"] == 0.0}
    head = ["benchmark", "scorer", "δ", "questions", "decision acc − f0", "gold recall − f0", "kept-token ratio − f0 (×100)"]
    rows = []
    for r in sorted(runs, key=lambda r: (r["benchmark"], r["scorer"], r["delta"])):
        base = f0.get((r["benchmark"], r["split"]))
        if r["scorer"] == "f0" or base is None:
            continue
        a, b = question_rows(r.get("dir")), question_rows(base.get("dir"))
        if a is None or b is None:
            continue
        cells = [_ci_cell(paired_diff(a, b, k, alpha)) for k in ("acc", "recall", "ratio")]
        rows.append([r["benchmark"], r["scorer"], f"{r['delta']:g}", str(len(a)), *cells])
    return md_table(head, rows)


def choose_margin(runs: Sequence[dict], scorer: str, split: str = "val", benches: Sequence[str] = SELECT_BENCHES) -> float | None:
    """The smallest δ at which ``scorer`` keeps at least f0's (δ = 0) gold recall on every benchmark of ``split``.

    The selection reads validation runs only; None when no δ of the grid does (or runs are missing).
    """
    keeping = [g["delta"] for g in selection_grid(runs, split, benches) if g["scorer"] == scorer and g["keeps_recall"]]
    return min(keeping, default=None)


def margin_table(runs: Sequence[dict]) -> str:
    if not runs:
        return "_No δ-sweep runs yet._\n"
    head = ["benchmark", "split", "scorer", "δ", "questions", "decision acc", "stop acc", "descend acc", "gold recall",
            "kept-token ratio (gold)", "kept-token ratio (distractors)"]  # fmt: skip
    rows = []
    for r in sorted(runs, key=lambda r: (r["benchmark"], r["split"] != "val", r["scorer"], r["delta"])):
        m = r["m"]
        rows.append([
            r["benchmark"], r["split"], r["scorer"], f"{r['delta']:g}", f"{m.get('probe/n_questions', 0):.0f}",
            _pct(m.get("probe/decision_accuracy")), _pct(m.get("probe/decision_accuracy/stop")),
            _pct(m.get("probe/decision_accuracy/descend")), _pct(m.get("probe/gold_recall")),
            f"{m.get('probe/kept_token_ratio', float('nan')):.3f}", f"{m.get('probe/distractor_kept_token_ratio', float('nan')):.3f}",
        ])  # fmt: skip
    return md_table(head, rows)


def margin_plot(runs: Sequence[dict], out: Path, split: str = "val", only: Sequence[str] | None = None) -> Path | None:
    """Over δ, one column per benchmark, one curve per scorer: decision accuracy vs gold recall (top) and
    gold recall vs kept-token ratio on gold items (bottom: which scorer keeps more gold per kept token).
    ``only``: plot just these scorers (a readable subset of a large grid)."""
    sel = [r for r in runs if r["split"] == split and (only is None or r["scorer"] in only)]
    if not sel:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    benches = sorted({r["benchmark"] for r in sel})
    fig, axes = plt.subplots(2, len(benches), figsize=(3.4 * len(benches), 6.0), squeeze=False)
    panels = (
        ("probe/gold_recall", "probe/decision_accuracy", "gold recall (%)", "decision accuracy (%)", 100, 100),
        ("probe/kept_token_ratio", "probe/gold_recall", "kept-token ratio (gold items)", "gold recall (%)", 1, 100),
    )
    scorers = sorted({r["scorer"] for r in sel})  # one colour and marker per scorer in every panel
    handles: dict[str, object] = {}
    for row, (kx, ky, lx, ly, sx, sy) in enumerate(panels):
        for ax, bench in zip(axes[row], benches, strict=True):
            for scorer in sorted({r["scorer"] for r in sel if r["benchmark"] == bench}):
                i = scorers.index(scorer)
                pts = sorted(
                    ((r["delta"], r["m"]) for r in sel if (r["benchmark"], r["scorer"]) == (bench, scorer)),
                    key=lambda t: t[0],
                )
                xs = [sx * m.get(kx, float("nan")) for _, m in pts]
                ys = [sy * m.get(ky, float("nan")) for _, m in pts]
                # the default cycle has 10 colours: past 10 curves, the marker tells them apart
                (line,) = ax.plot(xs, ys, marker="os^"[i // 10 % 3], color=f"C{i % 10}", label=scorer)
                handles.setdefault(scorer, line)
                for (d, _), x, y in zip(pts, xs, ys, strict=True):
                    ax.annotate(f"{d:g}", (x, y), textcoords="offset points", xytext=(3, 3), fontsize=6)
            _label(ax, f"{bench} ({split}); labels: δ", lx, ly)
    # One legend beside the grid: with 15+ scorers a legend per panel hides the curves.
    fig.tight_layout()
    fig.legend([handles[s] for s in scorers], scorers, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7)
    return _save(fig, out)


STUDIES = ("recipe", "probe", "margin", "valprobe", "valprobe_mpnet", "selection_test", "zeroshot_val", "zeroshot_all")


def generate(
    root: Path = ROOT, runs: Path | None = None, out: Path | None = None, doc: Path | None = None, echo: bool = False
) -> dict[str, Path]:
    """Every recipe-study output under ``root``: the tables (``out``, default tables/recipe.md), the plots
    (experiments/img) and the blocks of ``doc`` (default experiments/recipe.md), from the study folders
    under ``runs`` (default experiments/runs; archives unpacked first). ``echo``: print every table."""
    runs = runs if runs is not None else root / "experiments" / "runs"
    out = out if out is not None else root / "experiments" / "tables" / "recipe.md"
    doc = doc if doc is not None else root / "experiments" / "recipe.md"
    img = root / "experiments" / "img"
    ensure_unpacked([runs / s for s in STUDIES])
    written: dict[str, Path] = {}

    def plot(name: str, made: Path | None) -> None:
        if made is not None:
            written[f"plot:{name}"] = made

    body = render(runs / "recipe")
    probes = probe_table(runs / "probe")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(body + "\n" + probes, encoding="utf-8")
    written["table:recipe"] = out
    plot("recipe_accuracy_vs_recall", probe_plot(runs / "probe", img / "recipe_accuracy_vs_recall.png"))
    margins = margin_runs(runs / "margin")
    margin_body = margin_table(margins)
    for scorer in sorted({r["scorer"] for r in margins} - {"f0"}):
        chosen = choose_margin(margins, scorer)
        margin_body += (
            f"\nSelected on validation for `{scorer}`: "
            + (f"δ = {chosen:g}" if chosen is not None else "no δ of the grid")
            + " (the smallest δ keeping at least f0's gold recall on NQ and OTT-QA val).\n"
        )
    plot("margin_accuracy_vs_recall", margin_plot(margins, img / "margin_accuracy_vs_recall.png"))
    valprobes = margin_runs(runs / "valprobe", scorer_part=0)
    selection = selection_table(selection_grid(valprobes))
    plot("selection_accuracy_vs_recall", margin_plot(valprobes, img / "selection_accuracy_vs_recall.png"))
    plot("selection_sibling_accuracy_vs_recall",
         margin_plot(valprobes, img / "selection_sibling_accuracy_vs_recall.png", only=SIBLING_ROWS))
    plot("selection_interpolation_accuracy_vs_recall",
         margin_plot(valprobes, img / "selection_interpolation_accuracy_vs_recall.png", only=INTERPOLATION_ROWS))
    if chosen_tests := margin_runs(runs / "selection_test", scorer_part=0):
        selection += (
            "\nThe choices of the recall rule (each when it was made: the grid grew), probed once on the test splits:\n\n"
            + margin_table(chosen_tests)
        )
    mpnet_runs = margin_runs(runs / "valprobe_mpnet", scorer_part=0)
    selection_mpnet = mpnet_selection(valprobes, mpnet_runs)
    plot("selection_mpnet_accuracy_vs_recall", margin_plot(
        [*(r for r in valprobes if r["scorer"] in ("f0", "base")), *({**r, "scorer": mpnet_label(r["scorer"])} for r in mpnet_runs)],
        img / "selection_mpnet_accuracy_vs_recall.png",
    ))  # fmt: skip
    # Every test probe against f0 on the same questions, with paired 95% intervals.
    test_probes = margin_runs(runs / "probe", scorer_part=1)
    paired_tests = paired_test_table([*test_probes, *chosen_tests], test_probes)
    if mpnet_tests := [r for r in test_probes if r["scorer"].startswith("ftheta_mpnet")]:
        own_f0 = [{**r, "scorer": "f0"} for r in test_probes if r["scorer"] == "mpnet_f0"]
        selection_mpnet += "\nmpnet's fθ on the test splits against mpnet's own f0 (paired 95% intervals):\n\n"
        selection_mpnet += paired_test_table(mpnet_tests, own_f0)
    # TAT-QA is never trained or selected on: its validation questions, and its whole file, are zero-shot too
    zeroshot = {name: margin_runs(runs / name, scorer_part=0) for name in ("zeroshot_val", "zeroshot_all")}
    paired_zeroshot = {name: paired_test_table(rs, rs) for name, rs in zeroshot.items()}
    blocks = {"selection": selection, "recipe": body, "recipe_probe": probes, "margin": margin_body,
              "paired_test": paired_tests, "selection_mpnet": selection_mpnet, **paired_zeroshot}  # fmt: skip
    if doc.is_file():
        for name, table in blocks.items():
            if replace_block(doc, name, table):
                written[f"block:{name}"] = doc
    if echo:
        print("\n".join(blocks[name] for name in ("recipe", "recipe_probe", "margin", "selection", "selection_mpnet",
                                                 "paired_test", "zeroshot_val", "zeroshot_all")))  # fmt: skip
    return written


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=ROOT / "experiments" / "runs",
                    help="folder of the study folders (recipe, probe, margin, valprobe, ...)")  # fmt: skip
    ap.add_argument("--out", type=Path, default=ROOT / "experiments" / "tables" / "recipe.md")
    ap.add_argument("--doc", type=Path, default=ROOT / "experiments" / "recipe.md")
    args = ap.parse_args(argv)
    generate(ROOT, args.runs, args.out, args.doc, echo=True)


if __name__ == "__main__":
    main()
