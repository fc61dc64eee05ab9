"""Compression cost: parent-relative refinement vs one reader call, and how refinement time grows.

- ``refine_vs_reader``: scoring (f0 query + cached fθ node embeddings) and refinement of one
  HotpotQA question's 10 items (B = 2) vs one reader call of the CPU default LLM on the evidence
  it produced. Target: ratio <= 0.001 (compression costs no LLM call and ~nothing next to one).
- ``lazy_vs_eager``: cold scoring + refinement (no node cache) of HotpotQA questions' 10 items,
  encoding only the nodes the refinement reads (level by level) vs encoding every node first;
  same kept forests (checked). Target: ratio <= 0.8.
- ``scaling``: refinement time per item vs leaves per item (8 ... 1024), per question vs k, and
  FAISS search time vs corpus size; reports the fitted log-log slope (1.0 = linear).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.refine import parent_relative, parent_relative_lazily
from canopy_lit.types import Item

ROOT = Path(__file__).resolve().parents[1]


def best_time(fn: Callable[[], Any], repeat: int = 5, number: int = 1) -> float:
    """Min over ``repeat`` runs of the mean time of ``number`` calls (seconds): robust to a noisy machine."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best


def loglog_slope(x: list[float], y: list[float]) -> float:
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def refine_vs_reader(quick: bool = False, llm_model: str = "qwen2.5-1.5b") -> dict[str, Any]:
    from canopy_lit.data import load_benchmark
    from canopy_lit.encoders import load_encoder
    from canopy_lit.llm import load_llm
    from canopy_lit.reader import LLMReader
    from canopy_lit.scoring import NodeEmbeddingCache
    from canopy_lit.scoring.scorers import NodeScorer

    bench = load_benchmark("hotpotqa", str(ROOT / "data/hotpotqa/hotpot_dev_distractor_100.json"))
    q = bench.questions[0]
    h = Hierarchy(2)
    trees = [h.build(bench.items[i]) for i in bench.candidates[q.id][:10]]
    encoder = load_encoder("minilm")
    cache = NodeEmbeddingCache(encoder, h)
    scorer = NodeScorer(encoder, h, cache)
    for t in trees:  # warm the cache: node embeddings are query-independent
        cache.embed_tree(t)

    kept: list[list[int]] = []

    def ours() -> None:
        kept.clear()
        for t, s in zip(trees, scorer.score(q.text, trees), strict=True):
            kept.append(parent_relative(t, s))

    t_ours = best_time(ours, repeat=5 if quick else 20)
    evidence = [h.evidence_text(t, k) for t, k in zip(trees, kept, strict=True)]
    llm = load_llm("llamacpp", model=llm_model)
    reader = LLMReader(llm)
    reader.read(q.text, evidence[:1])  # load + warm the model once, outside the timing
    t0 = time.perf_counter()
    reader.read(q.text, evidence)
    t_ref = time.perf_counter() - t0
    tokens = sum(llm.count_tokens(e) for e in evidence)
    llm.close()
    return {
        "ours": t_ours,
        "reference": t_ref,
        "ratio": t_ours / t_ref,
        "target": 0.001,
        "direction": "max",
        "unit": "s",
        "note": f"k=10 items, B=2, {sum(len(t) for t in trees)} nodes; reader {llm_model} on {tokens} evidence tokens",
    }


def lazy_vs_eager(quick: bool = False) -> dict[str, Any]:
    import torch

    from canopy_lit.data import load_benchmark
    from canopy_lit.encoders import load_encoder
    from canopy_lit.scoring.scorers import NodeScorer

    bench = load_benchmark("hotpotqa", str(ROOT / "data/hotpotqa/hotpot_dev_distractor_100.json"))
    h = Hierarchy(2)
    scorer = NodeScorer(load_encoder("minilm"), h)  # no cache: every call encodes
    questions = bench.questions[: 4 if quick else 16]
    t_lazy = t_eager = 0.0
    n_lazy = n_all = 0
    with torch.inference_mode():
        scorer.score("warm-up", [h.build(bench.items[bench.candidates[questions[0].id][0]])])
        for q in questions:  # alternate the two per question so machine noise hits both alike
            trees = [h.build(bench.items[i]) for i in bench.candidates[q.id][:10]]
            qv = scorer.embed_query(q.text)
            t0 = time.perf_counter()
            eager = [parent_relative(t, s) for t, s in zip(trees, scorer.score(qv, trees), strict=True)]
            t1 = time.perf_counter()
            asked: list[int] = []

            def score_nodes(req, trees=trees, qv=qv, asked=asked):
                asked.append(sum(len(r) for r in req))
                return scorer.score(qv, trees, req)

            lazy = parent_relative_lazily(trees, score_nodes)[0]
            t2 = time.perf_counter()
            if lazy != eager:
                raise AssertionError(f"lazy and eager refinement disagree on question {q.id}")
            t_eager += t1 - t0
            t_lazy += t2 - t1
            n_lazy += sum(asked)
            n_all += sum(len(t) for t in trees)
    return {
        "ours": t_lazy / len(questions),
        "reference": t_eager / len(questions),
        "ratio": t_lazy / t_eager,
        "target": 0.8,
        "direction": "max",
        "unit": "s/question",
        "note": f"{len(questions)} HotpotQA questions x 10 items, B=2, MiniLM f0, no cache; "
        f"nodes encoded {n_lazy} of {n_all} ({n_lazy / n_all:.0%})",
    }


def _synthetic_tree(n_leaves: int, b: int = 2):
    return Hierarchy(b).build(Item(f"syn{n_leaves}", "text", sentences=[f"s{i}." for i in range(n_leaves)]))


def scaling(quick: bool = False) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    leaves = [8, 32, 128, 512] if quick else [8, 32, 128, 512, 1024]
    per_item, per_item_random, nodes = [], [], []
    for n in leaves:
        tree = _synthetic_tree(n)
        # Equal scores make refinement visit every node (the worst case); random scores are typical.
        worst, typical = np.zeros(len(tree)), rng.random(len(tree))
        per_item.append(best_time(lambda t=tree, s=worst: parent_relative(t, s), repeat=5, number=50))
        per_item_random.append(best_time(lambda t=tree, s=typical: parent_relative(t, s), repeat=5, number=50))
        nodes.append(len(tree))
    ks = [5, 10, 20]
    per_q = []
    tree = _synthetic_tree(12)  # a typical passage: ~12 sentences
    for k in ks:
        trees = [tree] * k
        scores = [rng.random(len(tree)) for _ in range(k)]
        per_q.append(
            best_time(lambda tr=trees, sc=scores: [parent_relative(t, s) for t, s in zip(tr, sc, strict=True)], number=50)
        )
    from canopy_lit.retrieval import FaissIndex

    sizes = [1_000, 10_000, 100_000] if quick else [1_000, 10_000, 100_000, 1_000_000]
    search = []
    dim = 384
    queries = rng.standard_normal((16, dim)).astype(np.float32)
    for n in sizes:
        vecs = rng.standard_normal((n, dim)).astype(np.float32)
        idx = FaissIndex.build([str(i) for i in range(n)], vecs, kind="flat_sq_fp16")
        search.append(best_time(lambda ix=idx: ix.search(queries, 10), repeat=3) / len(queries))
        del vecs, idx
    return {
        "refine_s_per_item_worst": dict(zip(map(str, leaves), per_item, strict=True)),
        "refine_s_per_item_random_scores": dict(zip(map(str, leaves), per_item_random, strict=True)),
        "nodes_per_item": dict(zip(map(str, leaves), nodes, strict=True)),
        "refine_growth_slope_vs_nodes": loglog_slope(nodes, per_item),
        "refine_s_per_question_vs_k": dict(zip(map(str, ks), per_q, strict=True)),
        "refine_growth_slope_vs_k": loglog_slope(ks, per_q),
        "search_s_per_query_vs_corpus": dict(zip(map(str, sizes), search, strict=True)),
        "search_growth_slope_vs_corpus": loglog_slope(sizes, search),
        "unit": "s",
    }
