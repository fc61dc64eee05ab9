"""Retrieval metrics of the bundled benchmarks over their union corpus, for any retriever option.

The retriever is whatever ``cfg.retrieval`` targets: dense FAISS (``retrieval=default``), BM25
(``retrieval=bm25``) or their RRF fusion (``retrieval=hybrid``); every one exposes ``corpus``,
``stats`` and ``retrieve_batch``.

``retrieval/<benchmark>/recall@k`` = share of questions with at least one *target* item in the top k:
NQ the gold paragraph, HotpotQA any supporting paragraph, OTT-QA the gold table, TAT-QA any gold
item (the document's table or a supporting paragraph). HotpotQA also reports ``recall_all@k``
(both supporting paragraphs in the top k), the multi-hop view that motivates the critic loop.

Over the union corpus a target the corpus lacks is dropped (a question left without one is skipped). Over your
own corpus (``retrieval.corpus=PATH``) every gold item is a target: one the file lacks is a miss, and
``.../gold_absent`` counts the questions none of whose targets the corpus holds.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from canopy_lit.data import load_benchmark, split_questions
from canopy_lit.encoders import load_encoder
from canopy_lit.retrieval.retriever import BatchRetriever, build_retriever
from canopy_lit.types import Modality, Question

log = logging.getLogger(__name__)

KS = (1, 5, 10, 20)


def targets(question: Question, retriever: BatchRetriever, absent_is_miss: bool = False) -> set[str]:
    """Item ids a hit must match: the gold table for OTT-QA (``meta["doc"]``), else the gold items; only those
    in the corpus unless ``absent_is_miss`` (a user corpus: a gold item it lacks is a target never hit)."""
    corpus = retriever.corpus
    if question.benchmark == "ottqa":
        doc = question.meta.get("doc")
        gold = {doc} if doc else {g for g in question.gold if g in corpus and corpus.modality(g) == Modality.TABLE.value}
    else:
        gold = set(question.gold)
    return gold if absent_is_miss else {g for g in gold if g in corpus}


def recall_at(
    retriever: BatchRetriever,
    questions: Sequence[Question],
    ks: Sequence[int] = KS,
    batch: int = 256,
    absent_is_miss: bool = False,
) -> dict[str, float]:
    """``recall@k`` (any target in top k) and ``recall_all@k`` (every target) for one benchmark's questions.

    ``absent_is_miss``: gold items outside the corpus stay targets (``targets``); ``gold_absent`` then counts
    the questions whose targets are all outside it (recall 0 for them at every k).
    """
    kmax = max(ks)
    scored = [(q, targets(q, retriever, absent_is_miss)) for q in questions]
    scored = [(q, t) for q, t in scored if t]
    hit_any = dict.fromkeys(ks, 0)
    hit_all = dict.fromkeys(ks, 0)
    for lo in range(0, len(scored), batch):
        chunk = scored[lo : lo + batch]
        results = retriever.retrieve_batch([q.text for q, _ in chunk], kmax)
        for (_, gold), res in zip(chunk, results, strict=True):
            ids = res.ids
            for k in ks:
                top = set(ids[:k])
                hit_any[k] += bool(gold & top)
                hit_all[k] += gold <= top
    n = len(scored)
    out = {f"recall@{k}": hit_any[k] / n if n else float("nan") for k in ks}
    out.update({f"recall_all@{k}": hit_all[k] / n if n else float("nan") for k in ks})
    out["questions"] = float(n)
    out["skipped_no_gold"] = float(len(questions) - n)
    if absent_is_miss:
        out["gold_absent"] = float(sum(not any(g in retriever.corpus for g in t) for _, t in scored))
    return out


def evaluate_retrieval(
    *,
    encoder: Any = None,
    benchmarks: Sequence[str] | None = None,
    corpus_benchmarks: Sequence[str] | None = None,
    split: str = "all",
    limit: int | None = None,
    ks: Sequence[int] = KS,
    cache_dir: str | Path | None = None,  # None: build_retriever's default, under $CANOPY_LIT_HOME
    out_dir: str | Path | None = None,
    retriever: BatchRetriever | None = None,
    builder: Any = build_retriever,
    **retriever_options: Any,
) -> dict[str, float]:
    """Recall@k per benchmark over the union corpus; returns (and optionally writes) flat metrics.

    ``mode: retrieval`` gets these arguments from its config (``pipeline.build.build_retrieval_eval``).
    Keys: ``retrieval/<benchmark>/recall@k``, ``.../recall_all@k``, ``.../questions``, plus
    ``retrieval/corpus_size``, ``retrieval/build_seconds``, ``retrieval/query_ms``.

    Args:
        encoder: the f0 encoder of a dense index (default: MiniLM); BM25 reads none.
        benchmarks: whose questions are asked (default: ``corpus_benchmarks``).
        corpus_benchmarks: whose items form the corpus (default: the four bundled benchmarks).
        split: the questions (split, then the first ``limit``) and the cut-offs.
        limit: see ``split``.
        ks: see ``split``.
        cache_dir: the index cache (``builder``'s).
        out_dir: merges the metrics into ``out_dir/metrics.json`` (None: writes nothing).
        retriever: an index already built (``builder`` is then not called).
        builder: ``builder(encoder, corpus_benchmarks, cache_dir=..., **retriever_options)`` builds the index
            (``build_retriever``, ``build_bm25_retriever``, ``build_hybrid_retriever``).
        **retriever_options: the builder's knobs; ``benchmark_options`` also reads the questions; with
            ``corpus`` (your own corpus file) a gold item the corpus lacks counts as a miss.
    """
    corpus_benchmarks = list(corpus_benchmarks or ("nq", "hotpotqa", "ottqa", "tatqa"))
    benchmarks = list(benchmarks or corpus_benchmarks)
    needs_encoder = getattr(builder, "needs_encoder", True)  # BM25 reads no embeddings
    if encoder is None and retriever is None and needs_encoder:
        encoder = load_encoder("minilm")
    t0 = time.perf_counter()
    if retriever is None:
        retriever = builder(encoder, corpus_benchmarks, cache_dir=cache_dir, **retriever_options)
    build_s = time.perf_counter() - t0
    metrics: dict[str, float] = {"retrieval/corpus_size": float(len(retriever.corpus)), "retrieval/build_seconds": build_s}
    q0, s0 = retriever.stats["queries"], retriever.stats["seconds"]
    bench_opts = retriever_options.get("benchmark_options") or {}
    for name in benchmarks:
        bench = load_benchmark(name, **bench_opts.get(name, {}))
        questions = split_questions(bench, split)
        if limit:
            questions = questions[: int(limit)]
        user_corpus = bool(retriever_options.get("corpus"))
        for key, v in recall_at(retriever, questions, ks, absent_is_miss=user_corpus).items():
            metrics[f"retrieval/{name}/{key}"] = v
        if metrics.get(f"retrieval/{name}/gold_absent"):
            log.warning("%s: %d of %d questions have no gold item in corpus %s: counted as misses", name,
                        metrics[f"retrieval/{name}/gold_absent"], metrics[f"retrieval/{name}/questions"],
                        retriever_options.get("corpus"))  # fmt: skip
        log.info("%s: %s", name, {k: round(v, 3) for k, v in metrics.items() if k.startswith(f"retrieval/{name}/")})
    nq = retriever.stats["queries"] - q0
    metrics["retrieval/query_ms"] = 1000 * (retriever.stats["seconds"] - s0) / max(1, nq)
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        path = out / "metrics.json"
        old = json.loads(path.read_text()) if path.exists() else {}
        path.write_text(json.dumps({**old, **metrics}, indent=1, sort_keys=True) + "\n")
    return metrics
