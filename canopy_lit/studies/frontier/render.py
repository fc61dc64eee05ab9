"""The frontier study's tables, figure and README headline, from its rows."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from canopy_lit.longllmlingua import lm_name  # no llmlingua import: the label only
from canopy_lit.markdown import md_table
from canopy_lit.studies.frontier.points import (
    BAND,
    BENCHMARKS,
    K_REF,
    Point,
    canopy_points,
    chosen_on,
    keep_whole,
)
from canopy_lit.studies.frontier.rows import ci_cell, verdict

# --- rendering ------------------------------------------------------------------------------------


def _setting(p: Point) -> str:
    if p.method in ("canopy", "flat_matched"):
        return f"δ = {p.delta:g}" + (f", k = {p.k}" if p.k != K_REF else "")
    if p.method == "keep_whole":
        return f"k = {p.k}"
    if p.method == "longllmlingua":
        return f"ρ = {p.rate:g}"
    if p.method == "item_drop":
        return f"δ = {p.delta:g}, item margin {p.item_margin:g}"
    return f"m = {p.m}"


LABELS = {"canopy": "CANOPY {s}", "flat_matched": "flat at CANOPY {s}'s tokens", "flat_top_m": "flat top-m ({s})",
          "keep_whole": "keep-whole", "extractive": "extractive (f0)", "longllmlingua": "LongLLMLingua ({lm})",
          "item_drop": "CANOPY {s} + item drop"}  # fmt: skip


def method_label(p: Point) -> str:
    """The method's legend and table label; LongLLMLingua's names its compressor LM."""
    return LABELS[p.method].format(s=p.scorer or "", lm=lm_name(p.compressor or ""))


def _pct(p: Point, key: str) -> str:
    v, lo, hi = (p.metric(k) for k in (key, f"{key}_ci_low", f"{key}_ci_high"))
    return f"{100 * v:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def render_points(points: Sequence[Point]) -> str:
    head = ["benchmark", "method", "setting", "n (measurable answer)", "answer recall [95% CI]",
            "w/o titles/headers [95% CI]", "tokens [95% CI]", "% of keep-whole k=5"]  # fmt: skip
    rows = []
    order = list(LABELS)
    for bench in BENCHMARKS:
        kw = keep_whole(points, bench)
        sel = [p for p in points if p.benchmark == bench]
        sel.sort(key=lambda p: (order.index(p.method), p.scorer or "", p.k, p.delta or 0.0, p.m or 0, p.rate or 0.0,
                                p.item_margin or 0.0))  # fmt: skip
        for p in sel:
            share = f"{100 * p.tokens / kw.tokens:.0f}%" if kw else ""
            rows.append([BENCHMARKS[bench], method_label(p), _setting(p), _point_n(p), _pct(p, "answer_recall"),
                         _pct(p, "answer_recall_content"),
                         f"{p.tokens:.0f} [{p.metric('tokens_ci_low'):.0f}, {p.metric('tokens_ci_high'):.0f}]", share])  # fmt: skip
    return md_table(head, rows)


def _point_n(p: Point) -> str:
    """The point's questions, with how many have a measurable answer (answer recall's n) where that is fewer."""
    n, m = int(p.metric("n")), p.metric("answer_recall_n")
    return f"{int(m)} of {n}" if m == m and int(m) != n else f"{n}"


def _ratio(d: dict[str, float] | None) -> str:
    return f"{d['token_ratio']:.2f} [{d['token_ratio_ci_low']:.2f}, {d['token_ratio_ci_high']:.2f}]" if d else "-"


def _fewer(row: dict) -> str:
    vk = row.get("vs_kw_fewer")
    return f"k = {row['kw_fewer'].k}, {ci_cell(vk, 'answer_recall_diff')}" if vk else "- (no k < 5 with fewer tokens)"


def _budgets(row: dict) -> str:
    """'40% / 60%': the validation budgets that chose the row's δ."""
    return " / ".join(f"{100 * b:.0f}%" for b in row["budgets"])


def _share(row: dict) -> str:
    """The row's CANOPY test tokens as a share of keep-whole's (k = 5) on the same test questions."""
    return f"{100 * row['canopy'].tokens / row['keep_whole'].tokens:.0f}%"


def render_budgets(rows: Sequence[dict]) -> str:
    head = ["benchmark", "budget (chosen on) -> test token share", "CANOPY fθ (δ): recall, tokens",
            "vs flat at its tokens: Δ recall", "Δ w/o titles", "vs keep-whole at fewer k: k, Δ recall",
            "token ratio to that keep-whole", "verdict (flat / keep-whole)"]  # fmt: skip
    body = []
    for r in rows:
        c = r["canopy"]
        vf, vk = r.get("vs_flat"), r.get("vs_kw_fewer")
        body.append([
            BENCHMARKS[r["benchmark"]], f"{_budgets(r)} ({r['chosen_on']}) -> {_share(r)}",
            f"{100 * c.metric('answer_recall'):.1f} (δ = {c.delta:g}), {c.tokens:.0f}",
            ci_cell(vf, "answer_recall_diff") if vf else "-",
            ci_cell(vf, "answer_recall_content_diff") if vf and "answer_recall_content_diff" in vf else "-",
            _fewer(r), _ratio(vk), f"{verdict(vf) if vf else '-'} / {verdict(vk) if vk else '-'}",
        ])  # fmt: skip
    return md_table(head, body)


def render_item_drop(rows: Sequence[dict]) -> str:
    head = ["benchmark", "item margin (δ)", "items dropped of delivered", "answer recall", "tokens (% of keep-whole k=5)",
            "vs CANOPY without drop: Δ recall, token ratio", "CANOPY at the δ nearest in tokens: δ, tokens, Δ recall",
            "flat top-m nearest in tokens: m, tokens, Δ recall", "verdict (CANOPY / flat)"]  # fmt: skip
    body = []
    for r in rows:
        p, kw, vb, vc, vf = r["point"], r["keep_whole"], r.get("vs_base"), r.get("vs_canopy"), r.get("vs_flat")
        share = f" ({100 * p.tokens / kw.tokens:.0f}%)" if kw else ""
        body.append([
            BENCHMARKS[p.benchmark], f"{p.item_margin:g} (δ = {p.delta:g})",
            f"{r['items'][1]:.2f} of {r['items'][0]:.2f}", _pct(p, "answer_recall"),
            f"{p.tokens:.0f}{share}", f"{ci_cell(vb, 'answer_recall_diff')}, {_ratio(vb)}" if vb else "-",
            f"δ = {r['canopy'].delta:g}, {r['canopy'].tokens:.0f}, {ci_cell(vc, 'answer_recall_diff')}" if vc else "-",
            f"m = {r['flat'].m}, {r['flat'].tokens:.0f}, {ci_cell(vf, 'answer_recall_diff')}" if vf else "-",
            f"{verdict(vc) if vc else '-'} / {verdict(vf) if vf else '-'}",
        ])  # fmt: skip
    return md_table(head, body)


def _n(d: dict[str, float]) -> str:
    """Test questions paired, with how many have a measurable answer where that is fewer."""
    n, m = int(d["n"]), int(d["n_answer"])
    return f"{m} of {n}" if m != n else f"{n}"


def render_scorers(rows: Sequence[dict]) -> str:
    head = ["benchmark", "scorer", "δ (chosen on validation)", "test n", "answer recall", "tokens (% of keep-whole k=5)",
            "Δ recall vs keep-whole k=5", "Δ recall vs flat at its tokens (same scores)",
            "Δ recall vs per-node fθ at the δ nearest in tokens (δ, tokens)"]  # fmt: skip
    body = []
    for r in rows:
        c, kw, d = r["canopy"], r["keep_whole"], r["vs_kw"]
        vf, vp = r.get("vs_flat"), r.get("vs_per_node")
        body.append([
            BENCHMARKS[r["benchmark"]], r["scorer"], f"{c.delta:g} ({r['label']})", _n(d), _pct(c, "answer_recall"),
            f"{c.tokens:.0f} ({100 * c.tokens / kw.tokens:.0f}%)", ci_cell(d, "answer_recall_diff"),
            ci_cell(vf, "answer_recall_diff") if vf else "-",
            f"{ci_cell(vp, 'answer_recall_diff')} ({r['per_node'].delta:g}, {r['per_node'].tokens:.0f})" if vp else "-",
        ])  # fmt: skip
    return md_table(head, body)


def render_operating(rows: Sequence[dict]) -> str:
    head = ["benchmark", "scorer", "δ", "chosen on", "validation tokens / keep-whole", "test n (measurable answer)",
            "answer recall (keep-whole)", "Δ recall vs keep-whole k=5", "Δ w/o titles", "test tokens / keep-whole"]  # fmt: skip
    body = []
    for r in rows:
        c, kw, d, op = r["canopy"], r["keep_whole"], r["vs_kw"], r["op"]
        val = (op.get("candidates") or {}).get(f"{c.delta:g}")
        at_op = r["label"] == "operating point"
        flag = " (no δ in band)" if at_op and op.get("in_band") is False else ""
        outside = "" if not at_op or BAND[0] <= d["token_ratio"] <= BAND[1] else " (outside 72-86%)"
        body.append([
            BENCHMARKS[r["benchmark"]], r["scorer"], f"{c.delta:g} ({r['label']})", chosen_on(op) if at_op else "-",
            f"{'-' if val is None else f'{100 * val:.0f}%'}{flag}", _n(d),
            f"{100 * c.metric('answer_recall'):.1f} ({100 * kw.metric('answer_recall'):.1f})",
            ci_cell(d, "answer_recall_diff"),
            ci_cell(d, "answer_recall_content_diff") if "answer_recall_content_diff" in d else "-",
            f"{100 * d['token_ratio']:.0f}% [{100 * d['token_ratio_ci_low']:.0f}, {100 * d['token_ratio_ci_high']:.0f}]{outside}",
        ])  # fmt: skip
    return md_table(head, body)


STYLE = {  # method, scorer -> colour, line style, marker
    ("canopy", "fθ"): ("#d62728", "-", "o"), ("canopy", "f0"): ("#1f77b4", "-", "o"),
    ("flat_matched", "fθ"): ("#d62728", "--", "x"), ("flat_matched", "f0"): ("#1f77b4", "--", "x"),
    ("flat_top_m", "fθ"): ("#2ca02c", ":", "^"), ("keep_whole", None): ("#000000", "-", "s"),
    ("extractive", None): ("#7f7f7f", "-.", "v"), ("longllmlingua", None): ("#9467bd", "-.", "P"),
    ("item_drop", "fθ"): ("#ff7f0e", "-", "d"),
    ("canopy", "fθ late"): ("#8c564b", "-", "D"), ("flat_matched", "fθ late"): ("#8c564b", "--", "+"),
    ("canopy", "fθ cross"): ("#e377c2", "-", "*"), ("flat_matched", "fθ cross"): ("#e377c2", "--", "1"),
}  # fmt: skip


def plot(points: Sequence[Point], chosen: dict[str, dict[str, dict]], path: Path) -> Path | None:
    """Answer recall (top row) and the same without titles/headers (bottom) against evidence tokens."""
    benches = [b for b in BENCHMARKS if any(p.benchmark == b for p in points)]
    if not benches:
        return None
    fig = Figure(figsize=(4.6 * len(benches), 7.6))
    grid = fig.subplots(2, len(benches), squeeze=False)
    for j, bench in enumerate(benches):
        for i, key in enumerate(("answer_recall", "answer_recall_content")):
            ax = grid[i][j]
            for (method, scorer), (colour, ls, marker) in STYLE.items():
                sel = [p for p in points if p.benchmark == bench and p.method == method and p.scorer == scorer]
                if method in ("canopy", "flat_matched"):
                    sel = [p for p in sel if p.k == K_REF]
                if not sel:
                    continue
                sel.sort(key=lambda p: p.tokens)
                xs = np.array([p.tokens for p in sel])
                ys = np.array([100 * p.metric(key) for p in sel])
                lo = np.array([100 * p.metric(f"{key}_ci_low") for p in sel])
                hi = np.array([100 * p.metric(f"{key}_ci_high") for p in sel])
                ax.plot(xs, ys, ls=ls, marker=marker, color=colour, ms=4, lw=1.3, label=method_label(sel[0]))
                ax.fill_between(xs, lo, hi, color=colour, alpha=0.08, lw=0)
            for scorer, by in (chosen.get(bench) or {}).items():
                op = [p for p in canopy_points(points, bench, scorer) if p.delta == by["delta"]]
                ks = sorted((p for p in points if p.benchmark == bench and p.method == "canopy"
                             and p.scorer == scorer and p.delta == by["delta"]), key=lambda p: p.k)  # fmt: skip
                colour = STYLE[("canopy", scorer)][0]
                if len(ks) > 1:
                    ax.plot([p.tokens for p in ks], [100 * p.metric(key) for p in ks], ls="", marker="D",
                            mfc="none", color=colour, ms=6, label=f"CANOPY {scorer} at its δ, k = 3/5/10")  # fmt: skip
                if op:
                    ax.plot([op[0].tokens], [100 * op[0].metric(key)], marker="*", ms=14, color=colour,
                            ls="", label=f"operating point {scorer} (δ = {by['delta']:g}, chosen on val)")  # fmt: skip
            ax.set_xscale("log")
            plain = FuncFormatter(lambda x, _: f"{x:g}")
            ax.xaxis.set_major_formatter(plain)
            ax.xaxis.set_minor_formatter(plain)
            ax.tick_params(axis="x", which="minor", labelsize=7)
            ax.grid(alpha=0.3, which="both")
            if i == 0:
                ax.set_title(BENCHMARKS[bench])
            if i == 1:
                ax.set_xlabel("evidence tokens per question (reader tokenizer, log)")
            if j == 0:
                ax.set_ylabel("answer recall (%)" if i == 0 else "answer recall w/o titles/headers (%)")
    handles, labels = grid[0][0].get_legend_handles_labels()
    for ax in grid.flat:  # every label once (a benchmark may lack a curve)
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False, bbox_to_anchor=(0.5, -0.07))
    fig.suptitle("Answer recall vs evidence tokens: k = 5 unless marked; 95% bootstrap CIs shaded")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def headline(budgets: Sequence[dict], operating: Sequence[dict], n_runs: int) -> str:
    """The README's short table: per benchmark, CANOPY fθ at the operating point and at each budget's δ."""
    head = ["benchmark (test questions with a measurable answer)", "keep-whole k=5: recall, tokens",
            "CANOPY fθ at the operating point: Δ recall vs keep-whole (δ, chosen on), test token share",
            "CANOPY fθ vs flat at its tokens: Δ recall at each budget's δ (test token share)"]  # fmt: skip
    rows = []
    for bench in BENCHMARKS:
        op = next((r for r in operating if r["benchmark"] == bench and r["scorer"] == "fθ"
                   and r["label"] == "operating point"), None)  # fmt: skip
        bs = [r for r in budgets if r["benchmark"] == bench and "vs_flat" in r]
        if op is None and not bs:
            continue
        kw = (op or bs[0])["keep_whole"]
        op_cell = "-"
        if op:
            op_cell = (f"{ci_cell(op['vs_kw'], 'answer_recall_diff')} (δ = {op['canopy'].delta:g}, "
                       f"{chosen_on(op['op'])}), {100 * op['vs_kw']['token_ratio']:.0f}%")  # fmt: skip
        flat_cell = " / ".join(f"{ci_cell(r['vs_flat'], 'answer_recall_diff')} ({_share(r)})" for r in bs) or "-"
        n = _n((op or bs[0]).get("vs_kw") or bs[0]["vs_flat"])
        rows.append([f"{BENCHMARKS[bench]} ({n})", f"{100 * kw.metric('answer_recall'):.1f}, {kw.tokens:.0f}",
                     op_cell, flat_cell])  # fmt: skip
    lines = [md_table(head, rows)]
    for bench in BENCHMARKS:
        bs = [r for r in budgets if r["benchmark"] == bench]
        if not bs:
            continue
        flat = ", ".join(f"{verdict(r['vs_flat'])} at {_share(r)}" for r in bs if "vs_flat" in r)
        fewer = ", ".join(f"{verdict(r['vs_kw_fewer'])} against k = {r['kw_fewer'].k} at {_share(r)}"
                          for r in bs if "vs_kw_fewer" in r)  # fmt: skip
        if not fewer:
            fewer = ": no comparison, keep-whole at k < 5 delivers no fewer tokens than at k = 5"
        else:
            fewer = " " + fewer
        lines.append(f"- **{BENCHMARKS[bench]}**: the tree against flat leaves at its tokens {flat or '-'}; "
                     f"against fewer whole items{fewer}.")  # fmt: skip
    lines += ["", f"<sub>Answer recall in %, Δ in points, paired over the same test questions with 95% BCa bootstrap "
              f"CIs (`*`: excludes 0); n: test questions with a measurable answer (of all, where fewer). δ of the "
              f"operating point and of the budgets (40 / 60 / 80% of keep-whole's validation tokens; budgets that "
              f"choose the same δ are shown once) chosen on validation, the zero-shot benchmark's from the in-domain "
              f"choices (`experiments/tables/frontier_operating_point.json`); the shares are the test tokens / keep-whole's. "
              f"Generated by `python -m canopy_lit.studies.frontier` from {n_runs} run folders "
              f"(`experiments/runs/frontier.zip`); details in experiments/frontier.md.</sub>"]  # fmt: skip
    return "\n".join(lines) + "\n"


def render_lingua(rows: Sequence[dict]) -> str:
    head = ["benchmark", "ρ (target rate)", "answer recall", "tokens (% of keep-whole k=5)", "refine s / question",
            "vs keep-whole k=5: Δ recall", "CANOPY fθ at the δ nearest in tokens: δ, tokens, Δ recall",
            "flat top-m (fθ) nearest in tokens: m, tokens, Δ recall"]  # fmt: skip
    body = []
    for r in rows:
        p, kw = r["point"], r["keep_whole"]
        share = f" ({100 * p.tokens / kw.tokens:.0f}%)" if kw else ""
        per_q = p.metrics.get("time/refine_s", float("nan")) / max(p.metric("n"), 1.0)
        vk, vc, vf = r.get("vs_kw"), r.get("vs_canopy"), r.get("vs_flat")
        body.append([
            BENCHMARKS[p.benchmark], f"{p.rate:g}", _pct(p, "answer_recall"), f"{p.tokens:.0f}{share}", f"{per_q:.2f}",
            ci_cell(vk, "answer_recall_diff") if vk else "-",
            f"δ = {r['canopy'].delta:g}, {r['canopy'].tokens:.0f}, {ci_cell(vc, 'answer_recall_diff')}" if vc else "-",
            f"m = {r['flat'].m}, {r['flat'].tokens:.0f}, {ci_cell(vf, 'answer_recall_diff')}" if vf else "-",
        ])  # fmt: skip
    return md_table(head, body)
