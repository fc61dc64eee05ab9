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
scorer costs more than encoding the nodes once). ``--reader`` adds, in the same loop, one reader call per question
(Qwen2.5-Coder-1.5B through llama.cpp, the CPU default, on one thread, no prompt cache) over the question's whole
items, answering in at most 16 tokens: ``ratio_to_reader`` = cross scoring / one reader call says when the cross
scorer's cost matters next to the LLM it saves tokens for.
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


def _reader_call(llm, question: str, trees) -> None:
    from canopy_lit.llm.base import system, user

    evidence = "\n\n".join(t.item.text for t in trees)
    llm.chat([system("Answer the question from the evidence in a few words."),
              user(f"Evidence:\n{evidence}\n\nQuestion: {question}")], max_tokens=16, temperature=0.0)  # fmt: skip


def run(quick: bool = False, reader: bool = False) -> dict:
    """Time the three paths per question; returns the perf/run.py entry (``ratio`` = cross / per-node cold)."""
    from canopy_lit.encoders import load_encoder
    from canopy_lit.scoring.node_cache import NodeEmbeddingCache
    from canopy_lit.scoring.scorers import CrossNodeScorer, NodeScorer

    h, questions = _questions(8 if quick else 24)
    node = load_encoder("minilm", max_batch_tokens=2048)
    cross = load_encoder("minilm", max_batch_tokens=2048, node_pooling="cross")
    llm = None
    if reader:
        from canopy_lit.llm import load_llm

        llm = load_llm("llamacpp", "qwen2.5-1.5b", n_ctx=4096, n_threads=1, cache_prompt=False)
    out: dict = {"unit": "s/question", "target": None, "direction": "min", "per_benchmark": {}}
    totals = {"cross": 0.0, "cold": 0.0, "warm": 0.0, "reader": 0.0}
    n_all = 0
    for name, qs in questions.items():
        NodeScorer(node, h).score(qs[0][0], qs[0][1])  # warm-up: threads, allocator
        t = {"cross": 0.0, "cold": 0.0, "warm": 0.0, "reader": 0.0}
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
            if llm is not None:
                start = time.perf_counter()
                _reader_call(llm, text, trees)
                t["reader"] += time.perf_counter() - start
        out["per_benchmark"][name] = {
            "questions": len(qs),
            "nodes_per_question": nodes / len(qs),
            **{f"{k}_s_per_question": v / len(qs) for k, v in t.items() if llm is not None or k != "reader"},
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
    if llm is not None:
        out.update(reader=totals["reader"] / n_all, ratio_to_reader=totals["cross"] / totals["reader"])
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8 questions per benchmark instead of 24")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--reader", action="store_true", help="also time one Qwen2.5-1.5B reader call per question")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(json.dumps(run(args.quick, args.reader), indent=2))
