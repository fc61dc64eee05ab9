"""CARVE from the command line.

::

    python -m canopy_lit.carve run --triples FILE --video-root DIR --out DIR [--method carve|rrf|single:<config>] [key=value ...]
    python -m canopy_lit.carve compare --triples FILE --video-root DIR --out DIR [--methods all] [key=value ...]

Settings come from ``configs/carve/default.yaml`` (or ``--config FILE``); ``key=value`` overrides
use OmegaConf dot notation, e.g. ``reranker.kind=embedding llm.model=smollm2-135m clips.clip_seconds=10``.
``compare`` builds the corpus once and runs every method into ``DIR/<method>/`` plus a joint
``DIR/table.md`` and ``DIR/metrics.json``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from canopy_lit.carve.representations import CONFIGS

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "carve" / "default.yaml"
ALL_METHODS = ["carve", "rrf", *[f"single:{c}" for c in CONFIGS]]


def _load_cfg(path: str | None, overrides: list[str], method: str | None):
    from omegaconf import OmegaConf

    file = Path(path) if path else DEFAULT_CONFIG
    if not file.is_file():
        raise SystemExit(f"config file not found: {file}")
    cfg = OmegaConf.load(file)
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise SystemExit(f"overrides must be key=value, got {bad}")
    cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(overrides))
    if method:
        cfg.method = method
    return cfg


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m canopy_lit.carve", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("run", "compare"):
        p = sub.add_parser(name)
        p.add_argument("--triples", required=True, help="V-RAGBench-style JSONL (canopy_lit/data/readers/vragbench.py)")
        p.add_argument("--video-root", required=True, help="folder the triples' evidence.video paths resolve under")
        p.add_argument("--out", required=True, help="run folder (predictions.jsonl, metrics.json, table.md)")
        p.add_argument("--config", default=None, help=f"settings YAML (default {DEFAULT_CONFIG})")
        p.add_argument("--limit", type=int, default=None, help="only the first N triples")
        p.add_argument("overrides", nargs="*", help="key=value settings overrides")
        if name == "run":
            p.add_argument("--method", default=None, help="carve | rrf | single:<config> (default: the config's)")
        else:
            p.add_argument("--methods", default="all", help=f"comma list or 'all' ({', '.join(ALL_METHODS)})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per token-count request otherwise

    from canopy_lit.carve.pipeline import metrics_table, parse_method, run_methods
    from canopy_lit.data import load_benchmark

    cfg = _load_cfg(args.config, args.overrides, getattr(args, "method", None))
    methods = [str(cfg.method)] if args.cmd == "run" else (
        ALL_METHODS if args.methods == "all" else [m.strip() for m in args.methods.split(",") if m.strip()]
    )  # fmt: skip
    try:
        for m in methods:
            parse_method(m)
        bench = load_benchmark("vragbench", args.triples, video_root=args.video_root)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if bench.skipped:
        logging.warning("triples skipped or incomplete: %s", dict(bench.skipped))
    questions = bench.questions[: args.limit] if args.limit else bench.questions
    results = run_methods(cfg, questions, list(bench.items.values()), args.out, methods)
    print(metrics_table(list(results.items()), list(cfg.recall_ks)))
    print(f"run folder: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
