"""Regenerate every table and plot in experiments/ from run folders: ``python experiments/refresh.py``.

Reads the study run folders (the committed ``experiments/runs/ablation/<study>/<overrides>/`` and your
own ``outputs/ablation/<study>/<overrides>/``, written by ``python evaluate.py -m +ablation=<study>``), writes ``experiments/tables/<study>.{md,csv}``
and ``experiments/img/*.png``, and rewrites the generated blocks of experiments/README.md
(and of any other markdown file given with ``--docs``)::

    <!-- BEGIN table:main --> ... <!-- END table:main -->
    <!-- BEGIN plot:quality_vs_tokens --> ... <!-- END plot:quality_vs_tokens -->

Nothing in those blocks is typed by hand; a study without runs here keeps its block as it is (generated
elsewhere, from the run folders its footer counts), or gets a placeholder if it has none.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # runnable from a source checkout without installing
    sys.path.insert(0, str(ROOT))

from canopy_lit.report import plots  # noqa: E402
from canopy_lit.report.runs import Run, find_runs, group_studies  # noqa: E402
from canopy_lit.report.tables import render_study, study_rows, write_csv  # noqa: E402

log = logging.getLogger("refresh")

STUDIES = ("main", "components", "branching", "k", "flat", "exclude_seen", "probe")
# Extra rows a study's table borrows from another study: the flat sweep is compared with CANOPY.
BORROW = {"flat": ("main", "canopy")}
# plot -> studies to draw it from, first one with data wins.
PLOT_SOURCES = {
    "quality_vs_tokens": ("k", "main"),
    "decisions_by_modality": ("main", "components", "flat"),
    "probe_depth_accuracy": ("probe",),
    "root_relative_scores": ("probe",),
}
BLOCK = re.compile(r"(<!-- BEGIN (table|plot):([\w-]+) -->\n)(.*?)(<!-- END \2:\3 -->)", re.S)


def study_runs(runs: Sequence[Run]) -> dict[str, list[Run]]:
    studies = group_studies(runs)
    for study, (source, method) in BORROW.items():
        if study in studies:
            studies[study] = studies[study] + [r for r in studies.get(source, []) if r.method == method]
    return studies


def placeholder(kind: str, name: str) -> str:
    return f"_No runs yet for `{name}`: run its command above, then `python experiments/refresh.py`._\n"


def update_blocks(doc: Path, tables: dict[str, str], images: dict[str, Path]) -> int:
    """Rewrite the generated blocks of one markdown file; returns how many blocks it has."""
    text = doc.read_text(encoding="utf-8")
    count = 0

    def repl(m: re.Match[str]) -> str:
        nonlocal count
        count += 1
        kind, name = m.group(2), m.group(3)
        if (kind == "table" and name not in STUDIES) or (kind == "plot" and name not in PLOT_SOURCES):
            return m.group(0)  # another generator's block (paired.py, recipe.py): not ours to rewrite
        old = m.group(4)
        if (tables.get(name) if kind == "table" else images.get(name)) is None and old.strip() and "No runs yet" not in old:
            # No run folders here for it: a table generated elsewhere stays (its footer names its runs).
            log.info("%s:%s: no runs here; block kept as is", kind, name)
            return m.group(0)
        if kind == "table":
            body = tables.get(name) or placeholder(kind, name)
            body = re.sub(r"^### .*\n\n?", "", body)  # the doc has its own heading
        else:
            img = images.get(name)
            body = (
                f"![{name}]({Path(os.path.relpath(img, doc.parent)).as_posix()})\n" if img else placeholder(kind, name)
            )
        return m.group(1) + body + m.group(5)

    new = BLOCK.sub(repl, text)
    if new != text:
        doc.write_text(new, encoding="utf-8")
    return count


def refresh(
    outputs: Path | Sequence[Path], out: Path, docs: Sequence[Path], wandb_project: str | None = None
) -> dict[str, Path]:
    folders = [outputs] if isinstance(outputs, Path) else list(outputs)
    present = [p for p in folders if p.exists()]
    runs = find_runs(present) if present else []
    log.info("%d run folder(s) under %s", len(runs), ", ".join(map(str, folders)))
    studies = study_runs(runs)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    tables: dict[str, str] = {}
    written: dict[str, Path] = {}
    for name, sub in studies.items():
        md = render_study(name, sub)
        tables[name] = md
        path = out / "tables" / f"{name}.md"
        path.write_text(md, encoding="utf-8")
        written[f"table:{name}"] = path
        for kind, rows in study_rows(sub).items():
            write_csv(out / "tables" / f"{name}{ {'qa': '', 'qa_wide': '_wide', 'probe': '_probe'}[kind] }.csv", rows)
    images: dict[str, Path] = {}
    for plot, sources in PLOT_SOURCES.items():
        for src in sources:
            if src not in studies:
                continue
            path = plots.PLOTS[plot](studies[src], out / "img" / f"{plot}.png")
            if path is not None:
                images[plot] = path
                written[f"plot:{plot}"] = path
                break
    for doc in docs:
        if doc.is_file():
            n = update_blocks(doc, tables, images)
            log.info("%s: %d generated block(s) refreshed", doc, n)
    if wandb_project:
        from canopy_lit.report.wandb import log_report

        log_report(runs, images, project=wandb_project, name="experiments")
    return written


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--outputs", nargs="+",
        default=[str(ROOT / "experiments" / "runs" / "ablation"), str(ROOT / "outputs" / "ablation")],
        help="folders holding the study run folders (default: the committed ones, then your own outputs/)",
    )  # fmt: skip
    ap.add_argument("--out", default=str(ROOT / "experiments"), help="where tables/ and img/ go")
    ap.add_argument(
        "--docs", nargs="*", default=[str(ROOT / "experiments" / "README.md"), str(ROOT / "README.md")],
        help="markdown files whose generated blocks are rewritten",
    )
    ap.add_argument("--wandb-project", default=None, help="also log the tables and plots to W&B")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        written = refresh([Path(o) for o in args.outputs], Path(args.out), [Path(d) for d in args.docs], args.wandb_project)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for key, path in written.items():
        print(f"{key}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
