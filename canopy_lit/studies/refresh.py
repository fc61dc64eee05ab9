"""Regenerate every table, plot and generated block of experiments/ and README.md: ``python -m canopy_lit.studies.refresh``.

Every generator reads run folders under ``experiments/runs/`` (a study archive ``<study>.zip`` is unpacked
into ``<study>/`` first, ``canopy_lit.report.archive``) and writes:

- the ablation studies (this file): ``experiments/runs/ablation/<study>/<overrides>/`` (written by
  ``python evaluate.py -m +ablation=<study>``) and your own ``outputs/ablation/``, plus the probe study
  from the committed probe runs (``PROBE_RUNS``) -> ``experiments/tables/<study>.{md,csv}``,
  ``experiments/img/*.png`` and the generated blocks of experiments/README.md and README.md::

      <!-- BEGIN table:main --> ... <!-- END table:main -->
      <!-- BEGIN plot:quality_vs_tokens --> ... <!-- END plot:quality_vs_tokens -->

- the evidence study with fθ (``experiments/runs/evidence_ftheta``) -> ``tables/evidence_ftheta.md`` and
  ``img/evidence_ftheta_answer_recall_vs_tokens.png``;
- ``canopy_lit/studies/recipe.py`` (tables/recipe.md, the recipe, margin and selection plots, experiments/recipe.md),
  ``canopy_lit/studies/paired.py`` (tables/paired.md and paired_tokens.md, the ``table:paired*`` blocks) and ``canopy_lit/studies/frontier.py``
  (the frontier figure, its tables and operating point, the ``table:frontier_*`` blocks).

Nothing in those blocks is typed by hand; a study without runs here keeps its block as it is (generated
elsewhere, from the run folders its footer counts), or gets a placeholder if it has none.

``--check`` regenerates everything into a temporary folder from tracked files only (the archives, the
docs; your outputs/ is not read) and compares: markdown and CSV byte for byte, PNGs pixel for pixel (a
PNG's bytes also carry the matplotlib version). It exits 1 naming each output that differs, a committed
output no generator wrote, a written one that is not committed, and a block kept without runs; the
committed outputs in ``RECORDS`` (their run folders were never committed) are listed, not failed.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from canopy_lit.report import plots
from canopy_lit.report.archive import ensure_unpacked, unpack
from canopy_lit.report.runs import Run, find_runs, group_studies
from canopy_lit.report.tables import render_study, study_rows, write_csv
from canopy_lit.studies import PROJECT_ROOT as ROOT
from canopy_lit.studies import frontier, paired, recipe

log = logging.getLogger("refresh")

RUNS = Path("experiments") / "runs"
DOCS = (Path("experiments") / "README.md", Path("README.md"), Path("experiments") / "recipe.md", Path("experiments") / "frontier.md")
OUTPUTS = (Path("experiments") / "tables", Path("experiments") / "img")
STUDIES = ("main", "components", "branching", "k", "flat", "exclude_seen", "probe")
# Extra rows a study's table borrows from another study: the flat sweep is compared with CANOPY.
BORROW = {"flat": ("main", "canopy")}
# The probe study's grid (configs/ablation/probe.yaml: f0 and the quickstart adapter on HotpotQA, NQ and
# TAT-QA test), run one folder per point under experiments/runs/probe/<benchmark>/<scorer>.
PROBE_RUNS = tuple(f"probe/{b}/{s}" for s in ("f0", "ftheta_base") for b in ("hotpotqa", "nq", "tatqa"))
# plot -> studies to draw it from, first one with data wins.
PLOT_SOURCES = {
    "quality_vs_tokens": ("k", "main"),
    "decisions_by_modality": ("main", "components", "flat"),
    "probe_depth_accuracy": ("probe",),
    "root_relative_scores": ("probe",),
}
# Committed outputs whose run folders were never committed: --check lists them instead of failing.
RECORDS = {
    "experiments/tables/exclude_seen.md": "outputs/ablation/exclude_seen at 0bb9f56 (8 questions, an uncommitted adapter)",
    "experiments/tables/exclude_seen.csv": "outputs/ablation/exclude_seen at 0bb9f56",
    "experiments/tables/exclude_seen_wide.csv": "outputs/ablation/exclude_seen at 0bb9f56",
    "experiments/README.md#table:exclude_seen": "outputs/ablation/exclude_seen at 0bb9f56",
    "experiments/img/evidence_answer_recall_vs_tokens_hotpotqa.png": "the f0 k sweep of experiments/evidence.md",
    "experiments/img/evidence_answer_recall_vs_tokens_k5.png": "outputs/ablation/evidence_k5 (experiments/evidence.md)",
}
BLOCK = re.compile(r"(<!-- BEGIN (table|plot):([\w-]+) -->\n)(.*?)(<!-- END \2:\3 -->)", re.S)


def study_runs(runs: Sequence[Run]) -> dict[str, list[Run]]:
    studies = group_studies(runs)
    for study, (source, method) in BORROW.items():
        if study in studies:
            studies[study] = studies[study] + [r for r in studies.get(source, []) if r.method == method]
    return studies


def placeholder(kind: str, name: str) -> str:
    return f"_No runs yet for `{name}`: run its command above, then `python -m canopy_lit.studies.refresh`._\n"


def update_blocks(doc: Path, tables: dict[str, str], images: dict[str, Path], kept: list[str] | None = None) -> int:
    """Rewrite the generated blocks of one markdown file; returns how many blocks it has.

    ``kept`` collects ``<doc>#<kind>:<name>`` of each block left as it is for want of runs."""
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
            if kept is not None:
                kept.append(f"{doc}#{kind}:{name}")
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
    outputs: Path | Sequence[Path],
    out: Path,
    docs: Sequence[Path],
    wandb_project: str | None = None,
    *,
    extra: dict[str, list[Run]] | None = None,
    kept: list[str] | None = None,
) -> dict[str, Path]:
    """The ablation study tables, plots and blocks from the run folders under ``outputs`` (those that
    exist), plus the studies of ``extra`` (study -> runs); ``kept`` as in ``update_blocks``."""
    folders = [outputs] if isinstance(outputs, Path) else list(outputs)
    present = [p for p in folders if p.exists()]
    runs = find_runs(present) if present else []
    log.info("%d run folder(s) under %s", len(runs), ", ".join(map(str, folders)))
    studies = study_runs(runs)
    for name, sub in (extra or {}).items():
        studies[name] = studies.get(name, []) + list(sub)
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
            suffix = {"qa": "", "qa_wide": "_wide", "probe": "_probe", "evidence": "_evidence"}[kind]
            write_csv(out / "tables" / f"{name}{suffix}.csv", rows)
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
            n = update_blocks(doc, tables, images, kept)
            log.info("%s: %d generated block(s) refreshed", doc, n)
    if wandb_project:
        from canopy_lit.report.wandb import log_report

        log_report(runs, images, project=wandb_project, name="experiments")
    return written


def evidence_ftheta(runs_dir: Path, out: Path) -> dict[str, Path]:
    """The evidence study with fθ (experiments/evidence.md): its table and answer-recall plot."""
    folder = runs_dir / "evidence_ftheta"
    if not folder.exists():
        return {}
    runs = find_runs([folder])
    path = out / "tables" / "evidence_ftheta.md"
    path.write_text(render_study("evidence", runs), encoding="utf-8")
    written = {"table:evidence_ftheta": path}
    img = plots.plot_answer_recall_vs_tokens(runs, out / "img" / "evidence_ftheta_answer_recall_vs_tokens.png")
    if img is not None:
        written["plot:evidence_ftheta"] = img
    return written


def regenerate(
    root: Path, user_outputs: Sequence[Path] = (), kept: list[str] | None = None, wandb_project: str | None = None
) -> dict[str, Path]:
    """Every generator's outputs under ``root`` (a checkout, or a folder laid out like one) from
    ``root/experiments/runs`` and the study folders of ``user_outputs``.

    Runs from ``root`` as the working directory: tables name run folders relative to it, so the
    same runs give the same bytes wherever the command is started (or the check's copy lies)."""
    root = root.resolve()
    user_outputs = [Path(p).resolve() for p in user_outputs]
    runs_dir = root / RUNS
    with contextlib.chdir(root):
        ensure_unpacked([runs_dir])
        probe = find_runs([runs_dir / p for p in PROBE_RUNS], study="probe") if (runs_dir / "probe").exists() else []
        written = refresh(
            [runs_dir / "ablation", *user_outputs], root / "experiments", [root / d for d in DOCS[:2]], wandb_project,
            extra={"probe": probe} if probe else None, kept=kept,
        )  # fmt: skip
        written.update(evidence_ftheta(runs_dir, root / "experiments"))
        written.update(recipe.generate(root))
        written.update(paired.generate(root))
        written.update(frontier.generate(root))
    return written


def tracked(root: Path, folder: Path) -> list[Path]:
    """Committed files under ``root/folder`` (``git ls-files``; every file there outside a git checkout)."""
    if (root / ".git").exists() and shutil.which("git"):
        names = subprocess.run(["git", "ls-files", "--", str(folder)], cwd=root, capture_output=True, text=True,
                               check=True).stdout.split()  # fmt: skip
        return sorted(Path(n) for n in names)
    return sorted(p.relative_to(root) for p in (root / folder).rglob("*") if p.is_file())


def same_output(a: Path, b: Path) -> bool:
    """Byte-identical, or for PNGs the same pixels (matplotlib writes its version into the file)."""
    if a.read_bytes() == b.read_bytes():
        return True
    if a.suffix != ".png":
        return False
    import numpy as np
    from matplotlib.image import imread

    pa, pb = imread(a), imread(b)
    return pa.shape == pb.shape and bool(np.array_equal(pa, pb))


def check(root: Path = ROOT) -> tuple[list[str], list[str]]:
    """(problems, records) of regenerating every output from tracked files and comparing it with ``root``'s."""
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="canopy-refresh-") as tmp:
        copy = Path(tmp)
        docs = [doc for doc in DOCS if (root / doc).is_file()]
        for doc in docs:
            (copy / doc).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / doc, copy / doc)
        for archive in sorted((root / RUNS).glob("*.zip")):
            unpack(archive, copy / RUNS / archive.stem)
        kept: list[str] = []
        regenerate(copy, kept=kept)
        kept = [k.replace(f"{copy}{os.sep}", "") for k in kept]
        for doc in docs:
            if not same_output(copy / doc, root / doc):
                problems.append(f"{doc}: its generated blocks differ from what the run folders give")
        for folder in OUTPUTS:
            committed = set(tracked(root, folder))
            made = {p.relative_to(copy) for p in (copy / folder).rglob("*") if p.is_file()}
            for rel in sorted(committed | made):
                key = rel.as_posix()
                if rel not in made:
                    if key not in RECORDS:
                        problems.append(f"{key}: committed, but no generator writes it")
                elif rel not in committed:
                    problems.append(f"{key}: generated, but not committed")
                elif not same_output(copy / rel, root / rel):
                    problems.append(f"{key}: differs from what the run folders give")
        problems += [f"{k}: block kept without runs" for k in kept if k not in RECORDS]
    records = [f"{key}: not regenerated (a record: {why})" for key, why in RECORDS.items()]
    return problems, records


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--outputs", nargs="*", default=[str(ROOT / "outputs" / "ablation")],
                    help="your own folders of study run folders, read beside the committed ones")  # fmt: skip
    ap.add_argument("--check", action="store_true", help="regenerate from tracked files into a temporary "
                    "folder and exit 1 if any committed output differs")  # fmt: skip
    ap.add_argument("--wandb-project", default=None, help="also log the ablation tables and plots to W&B")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.check else logging.INFO, format="%(message)s")
    try:
        if args.check:
            problems, records = check(ROOT)
            for line in records:
                print(line)
            for line in problems:
                print(f"error: {line}", file=sys.stderr)
            print(f"{len(problems)} difference(s); regenerate with `python -m canopy_lit.studies.refresh`" if problems
                  else "every generated table, plot and block matches its run folders")  # fmt: skip
            return 1 if problems else 0
        written = regenerate(ROOT, [Path(o) for o in args.outputs], wandb_project=args.wandb_project)
    except (FileNotFoundError, ValueError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for key, path in written.items():
        print(f"{key}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
