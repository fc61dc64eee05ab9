"""The frontier study: answer recall against evidence tokens, from the run folders of ``scripts/frontier.sh``.

    python -m canopy_lit.studies.frontier                    # figure, tables, the README headline block
    python -m canopy_lit.studies.frontier choose             # the operating point from the validation runs
    python -m canopy_lit.studies.frontier operating-points   # "benchmark scorer δ" lines (scripts/frontier.sh)

Reads ``experiments/runs/frontier_val`` (validation, first 100 questions per benchmark) and
``experiments/runs/frontier`` (full test splits), each unpacked from its archive first. Methods:

- CANOPY fθ / f0 (``refine=parent_relative``) over δ (``refine.descend_margin``) at k = 5, and over k at
  the operating point;
- flat leaves at CANOPY's per-question tokens (``refine=flat_matched``), one point per CANOPY point;
- flat top-m (fθ scores) and RECOMP-style extractive (f0) over m at k = 5; keep-whole over k;
- LongLLMLingua (``refine=longllmlingua``, its small LM named in the label) over its target rate ρ at k = 5;
- CANOPY fθ with item drop (``refine.item_margin``) at each benchmark's operating-point δ, over the margin,
  against the same runs without it and against flat top-m at the nearest tokens (``frontier_item_drop``).

The operating point (``choose``): per in-domain benchmark and scorer, the δ whose validation evidence tokens
are 72-86% of keep-whole's at k = 5 (the paper's reader tokens -14 to -28%), the one nearest 79%; for the
zero-shot benchmark (TAT-QA) the median of the in-domain choices, so none of its data enters its choice.
The budgets' δs are chosen the same way at 40 / 60 / 80% of keep-whole's validation tokens (CANOPY fθ).
Written to ``experiments/tables/frontier_operating_point.json`` (rewritten from the validation runs by
every generate, so the check of ``canopy_lit/studies/refresh.py`` covers it); the test runs never enter it. The
budget table pairs, on the same test questions, CANOPY fθ at each budget's δ (a δ two budgets share: one
row) with flat at its tokens (same δ, same scores) and with keep-whole at the k < 5 whose tokens are nearest
CANOPY's (only a k that delivers fewer tokens than k = 5), each with its test token share. Every
interval is a 95% BCa bootstrap over questions (``canopy_lit.eval.evidence_stats.compare_runs``).
Nothing in the outputs is typed by hand.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from canopy_lit.studies import PROJECT_ROOT as ROOT
from canopy_lit.studies.frontier.points import (
    BENCHMARKS,
    DOCS,
    FIGURE,
    OPERATING_POINT,
    SCORERS,
    TABLES,
    TEST,
    VAL,
    Point,
    choose,
    chosen_on,
    load_points,
    read_operating_point,
    write_operating_point,
)
from canopy_lit.studies.frontier.render import (
    headline,
    method_label,
    plot,
    render_budgets,
    render_item_drop,
    render_lingua,
    render_operating,
    render_points,
    render_scorers,
)
from canopy_lit.studies.frontier.rows import (
    budget_rows,
    item_drop_rows,
    lingua_rows,
    operating_rows,
    scorer_rows,
    verdict,
)
from canopy_lit.studies.paired import replace_block


def generate(root: Path = ROOT, echo: bool = False) -> dict[str, Path]:
    """Figure, tables and blocks under ``root`` from its test run folders (nothing if there are none)."""
    test_dir = root / TEST
    if not test_dir.exists() and not test_dir.with_suffix(".zip").exists():
        return {}
    val_points = load_points(root / VAL) if (root / VAL).exists() or (root / VAL).with_suffix(".zip").exists() else []
    if val_points:  # the choice is remade from validation alone, so the check covers it too
        write_operating_point(root, choose(val_points))
    points, chosen = load_points(test_dir), read_operating_point(root)
    if not points:
        return {}
    budgets, operating = budget_rows(points, chosen), operating_rows(points, chosen)
    (root / TABLES).mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {"table:frontier_operating_point.json": root / OPERATING_POINT} if chosen else {}
    bodies = {
        "frontier_points": render_points(points),
        "frontier_budgets": render_budgets(budgets),
        "frontier_operating_point": render_operating(operating),
        "frontier_headline": headline(budgets, operating, len(points)),
        "frontier_item_drop": render_item_drop(item_drop_rows(points)),
        "frontier_lingua": render_lingua(lingua_rows(points)),
        "frontier_scorers": render_scorers(scorer_rows(points, chosen)),
    }
    for name, body in bodies.items():
        path = root / TABLES / f"{name}.md"
        path.write_text(body, encoding="utf-8")
        written[f"table:{name}"] = path
    img = plot(points, chosen, root / FIGURE)
    if img is not None:
        written["plot:frontier"] = img
    for doc in DOCS:
        for name, body in bodies.items():
            if (root / doc).is_file() and replace_block(root / doc, name, body):
                written[f"block:{name}:{doc}"] = root / doc
    if echo:
        print(bodies["frontier_headline"])
    return written


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", nargs="?", default="generate", choices=("generate", "choose", "operating-points"))
    args = ap.parse_args(argv)
    if args.command == "choose":
        chosen = choose(load_points(ROOT / VAL))
        if not chosen:
            print(f"error: no validation runs under {VAL} (run scripts/frontier.sh)", file=sys.stderr)
            return 2
        write_operating_point(ROOT, chosen)
        for bench, by in chosen.items():
            for scorer, op in by.items():
                if "pooled_from" in op:
                    print(f"{bench} {scorer}: δ = {op['delta']:g}, {chosen_on(op)}")
                    continue
                band = "" if op["in_band"] else " (no δ in the 72-86% band: nearest)"
                print(f"{bench} {scorer}: δ = {op['delta']:g}, validation tokens {100 * op['token_ratio']:.0f}% "
                      f"of keep-whole on {op['n']} questions{band}")  # fmt: skip
        print(f"wrote {OPERATING_POINT}")
        return 0
    if args.command == "operating-points":
        for bench, by in read_operating_point(ROOT).items():
            for scorer, op in by.items():
                if scorer in SCORERS:  # the scorer study's fθs run their own k and item-drop sweeps, if any
                    print(bench, SCORERS[scorer], f"{op['delta']:g}")
        return 0
    written = generate(ROOT, echo=True)
    for key, path in written.items():
        print(f"{key}: {path.relative_to(ROOT)}", file=sys.stderr)
    return 0


__all__ = [
    "BENCHMARKS",
    "DOCS",
    "FIGURE",
    "OPERATING_POINT",
    "Point",
    "ROOT",
    "SCORERS",
    "TABLES",
    "TEST",
    "VAL",
    "budget_rows",
    "choose",
    "chosen_on",
    "generate",
    "headline",
    "item_drop_rows",
    "lingua_rows",
    "load_points",
    "main",
    "method_label",
    "operating_rows",
    "plot",
    "read_operating_point",
    "render_budgets",
    "render_item_drop",
    "render_lingua",
    "render_operating",
    "render_points",
    "render_scorers",
    "scorer_rows",
    "verdict",
    "write_operating_point",
]
