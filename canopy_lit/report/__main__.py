"""One CLI for reports from run folders.

    python -m canopy_lit.report tables RUN... --out DIR [--study S] [--plots] [--wandb-project P]
    python -m canopy_lit.report plots RUN... --out DIR [--study S]
    python -m canopy_lit.report view RUN_DIR [--out DIR] [--limit N] [--screenshot PNG]
    python -m canopy_lit.report wandb RUN... --project P [--study S] [--plots-dir DIR]
    python -m canopy_lit.report answers NAME=RUN_DIR... [--markdown]
    python -m canopy_lit.report pack STUDY_DIR...              # experiments/runs/<study> -> <study>.zip
    python -m canopy_lit.report unpack STUDY_ZIP... [--force] [--if-stale]  # <study>.zip -> experiments/runs/<study>
    python -m canopy_lit.report merge-shards OUT SHARD_DIR...  # shard=I/N run folders -> the unsharded run folder

``RUN`` is a run folder (``metrics.json``) or any folder above run folders (a multirun, outputs/).
Exit status 2 with one line on stderr for a missing or unreadable run folder.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from canopy_lit.report.answers import answers_table, answers_text
from canopy_lit.report.archive import ensure_unpacked, folder_path, is_current, pack, unpack
from canopy_lit.report.browser import screenshot
from canopy_lit.report.plots import make_all
from canopy_lit.report.runs import Run, find_runs, group_studies
from canopy_lit.report.tables import write_tables
from canopy_lit.report.viewer import build_viewer
from canopy_lit.report.wandb import log_report


def _runs(paths: Sequence[str], study: str | None) -> list[Run]:
    runs = find_runs(paths, study)
    if not runs:
        raise FileNotFoundError("no run folders (with metrics.json) found")
    return runs


def _plots(runs: Sequence[Run], out: str | Path) -> dict[str, Path]:
    """Every plot per study; names are prefixed with the study when there is more than one."""
    images: dict[str, Path] = {}
    studies = group_studies(runs)
    for name, sub in studies.items():
        made = make_all(sub, out, prefix=f"{name}_" if len(studies) > 1 else "")
        images.update({(f"{name}/{k}" if len(studies) > 1 else k): v for k, v in made.items()})
    return images


def cmd_tables(args: argparse.Namespace) -> int:
    runs = _runs(args.runs, args.study)
    written = write_tables(runs, args.out)
    images = _plots(runs, args.out) if args.plots else {}
    if args.wandb_project:
        log_report(runs, images, project=args.wandb_project)
    for name, path in written.items():
        print(f"{name}: {path}")
    for name, path in images.items():
        print(f"plot {name}: {path}")
    return 0


def cmd_plots(args: argparse.Namespace) -> int:
    for name, path in _plots(_runs(args.runs, args.study), args.out).items():
        print(f"plot {name}: {path}")
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    ensure_unpacked([args.run_dir])  # a committed run: experiments/runs/<study>.zip unpacked on first use
    index = build_viewer(args.run_dir, args.out, benchmark=args.benchmark, data_path=args.data_path,
                         branching=args.branching, limit=args.limit)
    if args.screenshot:
        print(screenshot(index, args.screenshot))
    print(index)
    return 0


def cmd_wandb(args: argparse.Namespace) -> int:
    runs = _runs(args.runs, args.study)
    images = _plots(runs, args.plots_dir) if args.plots_dir else {}
    print(log_report(runs, images, project=args.project, name=args.name))
    return 0


def cmd_answers(args: argparse.Namespace) -> int:
    runs = {}
    for spec in args.runs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"{spec!r}: expected NAME=RUN_DIR (e.g. canopy=outputs/eval/canopy)")
        runs[name] = path
    ensure_unpacked(runs.values())
    print((answers_table if args.markdown else answers_text)(runs), end="")
    return 0


def cmd_pack(args: argparse.Namespace) -> int:
    for folder in args.folders:
        done = pack(folder)
        left = ", ".join(f"{n} {name}" for name, n in sorted(done.left_out.items(), key=lambda kv: (-kv[1], kv[0])))
        print(f"{done.archive}: {done.runs} runs, {done.entries} files" + (f"; left out: {left}" if left else ""))
    return 0


def cmd_unpack(args: argparse.Namespace) -> int:
    for archive in args.archives:
        if args.if_stale and is_current(folder_path(archive)):
            continue
        print(unpack(archive, force=args.force))
    return 0


def cmd_merge_shards(args: argparse.Namespace) -> int:
    # The merged metrics are the evaluation's own (canopy_lit.evaluate): imported here, on use, so that the
    # report commands never load the pipeline.
    from canopy_lit.eval.harness import RunFailed
    from canopy_lit.evaluate import merge_shards

    try:
        metrics = merge_shards(args.out, args.shards)
    except RunFailed as err:  # every question failed: metrics written, exit 1 as the unsharded run's
        print(f"error: {err}", file=sys.stderr)
        return 1
    n = metrics.get("eval/n", metrics.get("evidence/n"))
    print(f"{args.out}: {len(args.shards)} shards merged" + (f", {n:.0f} questions" if n is not None else ""))
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m canopy_lit.report", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)

    def runs_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("runs", nargs="+", help="run folders, or folders above them (multirun dirs, outputs/)")
        p.add_argument("--study", default=None, help="put every run into this one study")

    t = sub.add_parser("tables", help="markdown + CSV study tables")
    runs_args(t)
    t.add_argument("--out", required=True, help="folder for <study>.md / .csv")
    t.add_argument("--plots", action="store_true", help="also write the PNG plots the runs support")
    t.add_argument("--wandb-project", default=None, help="also log tables and plots to this W&B project")
    t.set_defaults(fn=cmd_tables)

    p = sub.add_parser("plots", help="the PNG plots the runs support")
    runs_args(p)
    p.add_argument("--out", required=True, help="folder for <study>_<plot>.png")
    p.set_defaults(fn=cmd_plots)

    v = sub.add_parser("view", help="static HTML evidence viewer of one run")
    v.add_argument("run_dir", help="evaluation run folder (predictions.jsonl)")
    v.add_argument("--out", default=None, help="output folder (default RUN_DIR/viewer)")
    v.add_argument("--benchmark", default=None, help="benchmark name (default: the run's)")
    v.add_argument("--data-path", default=None, help="benchmark file (default: the run's data.path or the bundled one)")
    v.add_argument("--branching", type=int, default=None, help="B of the run's trees (default: the run's)")
    v.add_argument("--limit", type=int, default=None, help="render only the first N questions")
    v.add_argument("--screenshot", default=None, help="also save a PNG of the page rendered by headless Chromium")
    v.set_defaults(fn=cmd_view)

    w = sub.add_parser("wandb", help="log study tables (and plots) to Weights & Biases")
    runs_args(w)
    w.add_argument("--project", required=True, help="W&B project")
    w.add_argument("--name", default=None, help="W&B run name")
    w.add_argument("--plots-dir", default=None, help="also draw the plots into this folder and log them")
    w.set_defaults(fn=cmd_wandb)
    a = sub.add_parser("answers", help="each question's answer per run beside the gold answer and evidence tokens")
    a.add_argument("runs", nargs="+", help="NAME=RUN_DIR of QA run folders (predictions.jsonl)")
    a.add_argument("--markdown", action="store_true", help="a markdown table instead of terminal blocks")
    a.set_defaults(fn=cmd_answers)

    k = sub.add_parser("pack", help="study folder(s) -> one deterministic <study>.zip beside each")
    k.add_argument("folders", nargs="+", help="study folders holding run folders (experiments/runs/<study>)")
    k.set_defaults(fn=cmd_pack)
    u = sub.add_parser("unpack", help="<study>.zip -> the study folder beside it")
    u.add_argument("archives", nargs="+", help="study archives (experiments/runs/<study>.zip)")
    u.add_argument("--force", action="store_true", help="overwrite unpacked files edited since they were unpacked")
    u.add_argument("--if-stale", action="store_true",
                   help="only where the folder does not hold this archive's files yet (what reports do on first read)")
    u.set_defaults(fn=cmd_unpack)

    m = sub.add_parser("merge-shards", help="the run folders of shard=0/N ... N-1/N -> one unsharded run folder")
    m.add_argument("out", help="the merged run folder (new, or empty)")
    m.add_argument("shards", nargs="+", help="the shards' run folders, all N of them, in any order")
    m.set_defaults(fn=cmd_merge_shards)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        return args.fn(args)
    except (FileNotFoundError, ValueError, RuntimeError) as err:  # ArchiveError is a RuntimeError
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
