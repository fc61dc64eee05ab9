"""The node-encoder recipe ablation table from training run folders: ``python experiments/recipe.py``.

Each run folder is one ``python train.py experiment=quickstart <overrides>`` (its metrics.json holds the
best validation score and the test metrics of f0 and fθ). Rows are selected on validation only
(``val/best_decision_accuracy``); test is reported once per row. Writes experiments/tables/recipe.md
and rewrites the ``<!-- BEGIN table:recipe -->`` block of experiments/recipe.md.

    python experiments/recipe.py --runs experiments/runs/recipe
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from experiments.paired import replace_block  # noqa: E402

BENCHES = ("hotpotqa", "nq", "ottqa", "tatqa")


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def _overrides(run: Path) -> str:
    path = run / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return ""
    keep = [o for o in yaml.safe_load(path.read_text()) or [] if not o.startswith(("hydra.", "experiment=", "trainer.max_time"))]
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
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=ROOT / "experiments" / "runs" / "recipe")
    ap.add_argument("--out", type=Path, default=ROOT / "experiments" / "tables" / "recipe.md")
    ap.add_argument("--doc", type=Path, default=ROOT / "experiments" / "recipe.md")
    args = ap.parse_args(argv)
    body = render(args.runs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(body, encoding="utf-8")
    if args.doc.is_file():
        replace_block(args.doc, "recipe", body)
    print(body)


if __name__ == "__main__":
    main()
