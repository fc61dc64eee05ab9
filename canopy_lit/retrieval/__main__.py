"""Offline retrieval jobs.

    python -m canopy_lit.retrieval index [--benchmarks nq hotpotqa ottqa tatqa] [--index flat_sq_fp16]
    python -m canopy_lit.retrieval index --corpus my_corpus.jsonl [--index flat_sq_fp16 flat ivfpq] [--bm25]
    python -m canopy_lit.retrieval precompute-nodes [--benchmarks ... | --corpus PATH] [--adapter DIR] [--branching 2 3 4]

``index`` builds (or resumes) the corpus JSONL, the f0 embedding shards and the FAISS index of each
``--index`` kind (``none``: no dense index) under ``--cache-dir``, and with ``--bm25`` the BM25 index: of
the union of ``--benchmarks``, or of your own corpus (``--corpus``: a JSONL file or a saved Hugging Face
dataset, docs/how-to/own-corpus.md), which a run then reads with ``retriever=corpus retrieval.corpus=PATH``.
Each index kind's options are its ``configs/retrieval`` preset's (``--index-option KEY=VALUE`` overrides them),
so that the run finds what the command built. ``precompute-nodes`` fills the node-embedding cache with fθ of
every node of every corpus item, so that online compression is lookup + compare.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from canopy_lit.assets import default_cache_dir
from canopy_lit.retrieval.faiss_codes import KINDS  # no FAISS import: it loads lazily

DEFAULT_BENCHMARKS = ["nq", "hotpotqa", "ottqa", "tatqa"]
# The preset of each index kind: its index_options are what `retrieval=<preset>` runs look the index up by.
PRESETS = {"flat_sq_fp16": "default", "flat": "flat", "ivfpq": "ivfpq"}
CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "retrieval"


def preset_options(kind: str) -> dict[str, Any]:
    """``index_options`` of the ``configs/retrieval`` preset of ``kind`` ({} when it sets none)."""
    from omegaconf import OmegaConf

    path = CONFIGS / f"{PRESETS.get(kind, kind)}.yaml"
    if not path.is_file():
        return {}
    node = OmegaConf.load(path).get("index_options")
    return dict(OmegaConf.to_container(node)) if node else {}  # type: ignore[arg-type]


def _option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def _device_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("corpus encoding devices (lightning.Trainer; default: one process, auto device)")
    g.add_argument("--accelerator", default=None, help="cpu | gpu | auto")
    g.add_argument("--devices", default=None, help="devices per machine: N, a list such as 0,1, or auto")
    g.add_argument("--strategy", default=None,
                   help="ddp: one process per device (relaunches this command); ddp_spawn; auto")  # fmt: skip
    g.add_argument("--num-nodes", type=int, default=None, help="machines, each running this command (e.g. srun)")


def trainer_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The ``encode_corpus(trainer_kwargs=...)`` of ``--accelerator/--devices/--strategy/--num-nodes`` (given ones)."""
    out: dict[str, Any] = {}
    for key in ("accelerator", "devices", "strategy", "num_nodes"):
        value = getattr(args, key, None)
        if value is not None:
            out[key] = int(value) if key == "devices" and str(value).isdigit() else value
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m canopy_lit.retrieval", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("index", "precompute-nodes"):
        p = sub.add_parser(name)
        p.add_argument("--benchmarks", nargs="+", default=DEFAULT_BENCHMARKS)
        p.add_argument("--backbone", default="minilm")
        p.add_argument("--cache-dir", default=str(default_cache_dir("retrieval")))
        p.add_argument("--batch-size", type=int, default=64)
        p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
        p.add_argument("--corpus", default=None,
                       help="your own corpus (JSONL or save_to_disk folder) in place of --benchmarks")
        p.add_argument("--media-root", default=None, help="folder of the corpus's relative media paths")
        p.add_argument("--allow-outside-media-root", action="store_true",
                       help="read the corpus's media paths outside --media-root too")  # fmt: skip
    ix = sub.choices["index"]
    ix.add_argument("--index", nargs="+", default=["flat_sq_fp16"], choices=[*KINDS, "none"],
                    help="FAISS index kind(s) to build; none: no dense index (e.g. with --bm25)")  # fmt: skip
    ix.add_argument("--index-option", type=_option, action="append", default=[], metavar="KEY=VALUE",
                    help="FaissIndex option (nlist, pq_m, nprobe ...) in place of the kind's preset")  # fmt: skip
    ix.add_argument("--bm25", action="store_true", help="also build the BM25 index (configs/retrieval/bm25.yaml)")
    ix.add_argument("--shard-size", type=int, default=4096)
    _device_arguments(ix)
    pn = sub.choices["precompute-nodes"]
    pn.add_argument("--adapter", default=None, help="trained adapter folder (fθ); default f0")
    pn.add_argument("--node-cache-dir", default=str(default_cache_dir("nodes")))
    pn.add_argument("--branching", type=int, nargs="+", default=[2])
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    from canopy_lit.data import DataFormatError
    from canopy_lit.retrieval.user_corpus import open_corpus

    names = [b.lower() for b in args.benchmarks]
    options = {"media_root": args.media_root, "allow_outside_media_root": args.allow_outside_media_root}
    try:  # read and check the corpus before any model loads: a bad record costs seconds, not an encoder
        corpus = open_corpus(names, args.cache_dir, args.corpus, options)
    except (DataFormatError, FileNotFoundError) as err:
        print(f"python -m canopy_lit.retrieval {args.cmd}: error: {err}", file=sys.stderr)
        return 2
    if args.cmd == "index":
        return _index(args, names, options, corpus)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from canopy_lit.encoders import load_encoder
    from canopy_lit.hierarchy import Hierarchy
    from canopy_lit.scoring.node_cache import NodeEmbeddingCache

    t0 = time.perf_counter()
    encoder = load_encoder(args.backbone, adapter=args.adapter)
    for b in args.branching:
        cache = NodeEmbeddingCache(encoder, Hierarchy(b), cache_dir=args.node_cache_dir, batch_size=args.batch_size)
        n = cache.precompute(iter(corpus))
        print(f"B={b}: encoded {n} new nodes ({cache.stats()}); {time.perf_counter() - t0:.1f} s")
    return 0


def _index(args: argparse.Namespace, names: list[str], options: dict[str, Any], corpus: Any) -> int:
    """``index``: the dense index of each ``--index`` kind (embeddings encoded once) and, with ``--bm25``, BM25."""
    t0 = time.perf_counter()
    where = {"cache_dir": args.cache_dir, "corpus": args.corpus, "corpus_options": options}
    kinds = [k for k in dict.fromkeys(args.index) if k != "none"]
    print(f"corpus {corpus!r}")
    if kinds:
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        from canopy_lit.encoders import load_encoder
        from canopy_lit.retrieval.retriever import build_retriever

        encoder = load_encoder(args.backbone)
        for kind in kinds:
            opts = {**preset_options(kind), **dict(args.index_option)}
            r = build_retriever(encoder, names, index=kind, index_options=opts, batch_size=args.batch_size,
                                shard_size=args.shard_size, trainer_kwargs=trainer_kwargs(args), **where)  # fmt: skip
            print(f"{r.index!r} (index={kind}, index_options={opts}); {time.perf_counter() - t0:.1f} s")
    if args.bm25:
        from canopy_lit.retrieval.bm25 import build_bm25_retriever

        bm = build_bm25_retriever(benchmarks=names, **where)
        print(f"BM25 over {bm.index.scores['num_docs']} items; {time.perf_counter() - t0:.1f} s")
    if args.corpus:
        cache = "" if args.cache_dir == str(default_cache_dir("retrieval")) else f" retrieval.cache_dir={args.cache_dir}"
        print(f"use it: python evaluate.py retriever=corpus retrieval.corpus={args.corpus}{cache} [retrieval=bm25]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
