"""Node-scoring cost per question: the query-aware cross scorer vs per-node fθ (cold and warm node cache).

    python perf/cross_scoring.py [--quick] [--threads N]

Real bundled HotpotQA and NQ validation questions, each with its k = 5 candidate items as B = 2 trees, MiniLM
at the configs' ``max_seq_length`` (512) and ``max_batch_tokens`` (2048). Every node of every tree is scored
(an upper bound: lazy refinement asks only for the nodes it visits). "ours" = ``CrossNodeScorer`` (one forward
per (question, node): ``encoder.node_pooling=cross``, nothing reusable across questions); "reference" =
``NodeScorer`` over a memory node cache that is cold for each question's items (what a first question over new
items costs: one forward per node); "warm" = the same scorer again on those items (the node cache serves every
vector: the cost of a question over items seen before, the common case in a corpus). Interleaved question by
question in one process, so all three see the same machine load. Ratio = ours / reference (above 1: the cross
scorer costs more than encoding the nodes once).
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def _questions(per_benchmark: int):
    from canopy_lit.data import load_benchmark, split_questions
    from canopy_lit.hierarchy import Hierarchy

    h = Hierarchy(2)
    out = {}
    for name in ("hotpotqa", "nq"):
        bench = load_benchmark(name)
        qs = [q for q in split_questions(bench, "val") if bench.candidates.get(q.id)][:per_benchmark]
        out[name] = [(q.text, [h.build(bench.items[i]) for i in bench.candidates[q.id][:5]]) for q in qs]
    return h, out


def run(quick: bool = False) -> dict:
    """Time the three paths per question; returns the perf/run.py entry (``ratio`` = cross / per-node cold)."""
    from canopy_lit.encoders import load_encoder
    from canopy_lit.pipeline.scoring import CrossNodeScorer, NodeScorer
    from canopy_lit.retrieval.node_cache import NodeEmbeddingCache

    h, questions = _questions(8 if quick else 24)
    node = load_encoder("minilm", max_batch_tokens=2048)
    cross = load_encoder("minilm", max_batch_tokens=2048, node_pooling="cross")
    out: dict = {"unit": "s/question", "target": None, "direction": "min", "per_benchmark": {}}
    totals = {"cross": 0.0, "cold": 0.0, "warm": 0.0}
    n_all = 0
    for name, qs in questions.items():
        NodeScorer(node, h).score(qs[0][0], qs[0][1])  # warm-up: threads, allocator
        t = {"cross": 0.0, "cold": 0.0, "warm": 0.0}
        nodes = 0
        for text, trees in qs:
            nodes += sum(len(tr) for tr in trees)
            start = time.perf_counter()
            CrossNodeScorer(cross, h).score(text, trees)
            t["cross"] += time.perf_counter() - start
            scorer = NodeScorer(node, h, NodeEmbeddingCache(node, h))
            start = time.perf_counter()
            scorer.score(text, trees)
            t["cold"] += time.perf_counter() - start
            start = time.perf_counter()
            scorer.score(text, trees)
            t["warm"] += time.perf_counter() - start
        out["per_benchmark"][name] = {
            "questions": len(qs),
            "nodes_per_question": nodes / len(qs),
            **{f"{k}_s_per_question": v / len(qs) for k, v in t.items()},
            "ratio": t["cross"] / t["cold"],
        }
        totals = {k: totals[k] + t[k] for k in totals}
        n_all += len(qs)
    out.update(
        ours=totals["cross"] / n_all,
        reference=totals["cold"] / n_all,
        warm=totals["warm"] / n_all,
        ratio=totals["cross"] / totals["cold"],
        ratio_to_warm=totals["cross"] / max(totals["warm"], 1e-9),
        threads=torch.get_num_threads(),
    )
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8 questions per benchmark instead of 24")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(json.dumps(run(args.quick), indent=2))
