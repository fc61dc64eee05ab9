"""CARVE from the command line: ``evaluate.py method=carve`` on a triple file, plus a multi-method compare.

::

    python -m canopy_lit.carve run --triples FILE --video-root DIR --out DIR [--method carve|rrf|single:<config>] [override ...]
    python -m canopy_lit.carve compare --triples FILE --video-root DIR --out DIR [--methods all] [override ...]

Settings are the evaluate config composed with ``method=carve`` (configs/carve/ and the top-level
``encoder`` and ``llm`` groups); overrides are Hydra overrides, e.g. ``carve/reranker=embedding
carve.generate=false llm=llamacpp_smollm2 carve.clips.clip_seconds=10``. ``compare`` builds the
corpus once and runs every method into ``DIR/<method>/`` plus a joint ``DIR/table.md`` and
``DIR/metrics.json``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig

from canopy_lit.carve.pipeline import load_triples, metrics_table, parse_method, run_methods
from canopy_lit.carve.representations import CONFIGS

ROOT = Path(__file__).resolve().parents[2]
ALL_METHODS = ["carve", "rrf", *[f"single:{c}" for c in CONFIGS]]


def compose_cfg(triples: str, video_root: str, out: str, overrides: list[str], limit: int | None = None) -> DictConfig:
    """The evaluate config with ``method=carve`` on ``triples``, every question of the file (``data.split=all``)."""
    with initialize_config_dir(str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("evaluate", overrides=["method=carve", "data.split=all", *overrides])
    # Set after composing, so paths need no override quoting; root_dir replaces the ${hydra:...} default.
    cfg.paths.root_dir = str(ROOT)
    cfg.paths.output_dir = str(Path(out).resolve())
    cfg.data.path = str(Path(triples).resolve())
    cfg.data.options.video_root = str(Path(video_root).resolve())
    cfg.limit = limit
    return cfg


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m canopy_lit.carve", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("run", "compare"):
        p = sub.add_parser(name)
        p.add_argument("--triples", required=True, help="V-RAGBench-style JSONL (canopy_lit/data/readers/vragbench.py)")
        p.add_argument("--video-root", required=True, help="folder the triples' evidence.video paths resolve under")
        p.add_argument("--out", required=True, help="run folder (predictions.jsonl, metrics.json, table.md)")
        p.add_argument("--limit", type=int, default=None, help="only the first N triples")
        p.add_argument("overrides", nargs="*", help="Hydra overrides of the evaluate config")
        if name == "run":
            p.add_argument("--method", default=None, help="carve | rrf | single:<config> (default: carve.method)")
        else:
            p.add_argument("--methods", default="all", help=f"comma list or 'all' ({', '.join(ALL_METHODS)})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per token-count request otherwise

    try:
        cfg = compose_cfg(args.triples, args.video_root, args.out, args.overrides, args.limit)
        if getattr(args, "method", None):
            cfg.carve.method = args.method
        methods = [str(cfg.carve.method)] if args.cmd == "run" else (
            ALL_METHODS if args.methods == "all" else [m.strip() for m in args.methods.split(",") if m.strip()]
        )  # fmt: skip
        for m in methods:
            parse_method(m)
        questions, items = load_triples(cfg)
    except (HydraException, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    results = run_methods(cfg, questions, items, args.out, methods)
    print(metrics_table(list(results.items()), list(cfg.carve.recall_ks)))
    print(f"run folder: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
