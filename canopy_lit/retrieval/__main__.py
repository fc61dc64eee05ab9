"""Offline retrieval jobs.

    python -m canopy_lit.retrieval index [--benchmarks nq hotpotqa ottqa tatqa] [--index flat_sq_fp16]
    python -m canopy_lit.retrieval precompute-nodes [--benchmarks ...] [--adapter DIR] [--branching 2 3 4]

``index`` builds (or resumes) the corpus JSONL, the f0 embedding shards and the FAISS index under
``--cache-dir``; ``precompute-nodes`` fills the node-embedding cache with fθ of every node of every
corpus item, so that online compression is lookup + compare.
"""

from __future__ import annotations

import argparse
import logging
import time

from canopy_lit.assets import default_cache_dir

DEFAULT_BENCHMARKS = ["nq", "hotpotqa", "ottqa", "tatqa"]


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
    sub.choices["index"].add_argument("--index", default="flat_sq_fp16")
    sub.choices["index"].add_argument("--shard-size", type=int, default=4096)
    pn = sub.choices["precompute-nodes"]
    pn.add_argument("--adapter", default=None, help="trained adapter folder (fθ); default f0")
    pn.add_argument("--node-cache-dir", default=str(default_cache_dir("nodes")))
    pn.add_argument("--branching", type=int, nargs="+", default=[2])
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from canopy_lit.encoders import load_encoder
    from canopy_lit.hierarchy import Hierarchy
    from canopy_lit.retrieval.corpus import CorpusStore
    from canopy_lit.retrieval.node_cache import NodeEmbeddingCache
    from canopy_lit.retrieval.retriever import _slug, build_retriever

    t0 = time.perf_counter()
    if args.cmd == "index":
        r = build_retriever(load_encoder(args.backbone), args.benchmarks, cache_dir=args.cache_dir, index=args.index,
                            batch_size=args.batch_size, shard_size=args.shard_size)  # fmt: skip
        print(f"{r.index!r}; corpus {r.corpus!r}; {time.perf_counter() - t0:.1f} s")
        return 0
    encoder = load_encoder(args.backbone, adapter=args.adapter)
    names = [b.lower() for b in args.benchmarks]
    corpus = CorpusStore.from_benchmarks(names, f"{args.cache_dir}/corpus-{_slug(names, None)}.jsonl")
    for b in args.branching:
        cache = NodeEmbeddingCache(encoder, Hierarchy(b), cache_dir=args.node_cache_dir, batch_size=args.batch_size)
        n = cache.precompute(iter(corpus))
        print(f"B={b}: encoded {n} new nodes ({cache.stats()}); {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
