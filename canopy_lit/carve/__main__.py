"""CARVE from the command line: ``evaluate.py method=carve`` on a triple file, plus a multi-method compare.

::

    python -m canopy_lit.carve run --triples FILE --video-root DIR --out DIR [--method carve|rrf|single:<config>] [override ...]
    python -m canopy_lit.carve compare --triples FILE --video-root DIR --out DIR [--methods all] [override ...]

Settings are the evaluate config composed with ``method=carve`` (configs/carve/ and the top-level
``encoder`` and ``llm`` groups); overrides are Hydra overrides, e.g. ``carve/reranker=embedding
carve.generate=false llm=llamacpp_smollm2 carve.clips.clip_seconds=10``. A method name stands for an
option of the ``carve/method`` group: ``carve``, ``rrf``, ``single:<config>`` (``carve/method=single``
with ``carve.method.config=<config>``). ``compare`` builds the corpus once and runs every method into
``DIR/<method>/`` plus a joint ``DIR/table.md`` and ``DIR/metrics.json``.

Exit status: 0 done; 1 the LLM backend kept failing (the records written stay, for a resume); 2 a
usage or config error.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from canopy_lit.carve.representations import CONFIGS, check_config
from canopy_lit.eval.carve import load_triples, metrics_table, run_methods
from canopy_lit.eval.harness import RunFailed
from canopy_lit.schema import ConfigError

ROOT = Path(__file__).resolve().parents[2]
METHOD_GROUP = ROOT / "configs" / "carve" / "method"
ALL_METHODS = ["carve", "rrf", *[f"single:{c}" for c in CONFIGS]]


def method_option(name: str) -> DictConfig:
    """The ``carve/method`` option a method name stands for: ``carve`` | ``rrf`` | ``single:<config>``."""
    kind, _, config = name.strip().lower().partition(":")
    path = METHOD_GROUP / f"{kind}.yaml"
    if not path.is_file() or (kind == "single") != bool(config):
        raise ValueError(f"unknown CARVE method {name!r}; use carve, rrf or single:<{'|'.join(CONFIGS)}>")
    node = OmegaConf.load(path)
    assert isinstance(node, DictConfig)
    if config:
        node.config = check_config(config)
    return node


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
            p.add_argument("--method", default=None, help="carve | rrf | single:<config> (default: the carve/method choice)")
        else:
            p.add_argument("--methods", default="all", help=f"comma list or 'all' ({', '.join(ALL_METHODS)})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per token-count request otherwise

    try:
        cfg = compose_cfg(args.triples, args.video_root, args.out, args.overrides, args.limit)
        if args.cmd == "run":
            methods = [method_option(args.method) if args.method else cfg.carve.method]
        else:
            names = ALL_METHODS if args.methods == "all" else [m.strip() for m in args.methods.split(",") if m.strip()]
            methods = [method_option(m) for m in names]
        questions, items = load_triples(cfg)
    except (HydraException, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        results = run_methods(cfg, questions, items, args.out, methods)
    except ConfigError as err:
        print("\n".join(f"error: {line}" for line in err.problems), file=sys.stderr)
        return 2
    except RunFailed as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(metrics_table(list(results.items()), list(cfg.carve.recall_ks)))
    print(f"run folder: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
