"""Retrieval-side speed, measured side by side in one process (throughputs; ratio = ours / reference).

- ``faiss_vs_raw``: ``FaissIndex.search`` (modality partitions, exclusion bookkeeping, id mapping)
  vs one raw ``faiss.IndexScalarQuantizer`` (fp16, inner product) on the same vectors and queries.
  Target >= 0.9. Vectors: the cached union-corpus MiniLM embeddings when present, else random unit
  vectors of the same dimension (the output says which).
- ``cache_speedup``: scoring every node of one HotpotQA question's 10 items (B = 2) with a warm
  ``NodeEmbeddingCache`` vs encoding the nodes with fθ. Target >= 100.
- ``encode_vs_raw``: our node-encoding path (cold cache -> ``encode_nodes``) vs a bare
  transformers forward + mean pooling on the same texts and batch size. Target >= 0.9.

Run one: ``python perf/retrieval.py [--quick] [name ...]``; all: ``perf/run.py``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "retrieval"


def best_time(fn: Callable[[], Any], repeat: int = 5) -> float:
    """Min wall time over ``repeat`` calls (seconds): robust to other processes on a shared machine."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def interleaved(fa: Callable[[], Any], fb: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """Best times of two functions measured alternately, so machine-load drift hits both equally."""
    ta = tb = float("inf")
    for _ in range(repeat):
        ta = min(ta, best_time(fa, 1))
        tb = min(tb, best_time(fb, 1))
    return ta, tb


def _entry(ours: float, ref: float, target: float, unit: str) -> dict[str, Any]:
    return {"ours": ours, "reference": ref, "ratio": ours / ref, "target": target, "unit": unit}


def _corpus_vectors(n_max: int) -> tuple[list[str], np.ndarray, list[str], str]:
    """(ids, (N, D) vectors, modality per row, source) from the cached union corpus, else random."""
    from canopy_lit.retrieval.corpus import CorpusStore
    from canopy_lit.retrieval.encode import load_shards

    for meta in sorted(CACHE.glob("emb-*/meta.json")):
        corpus = next(iter(sorted(CACHE.glob("corpus-*.jsonl"))), None)
        if corpus is None:
            break
        store = CorpusStore(corpus)
        try:
            ids, x = load_shards(meta.parent, order=store.ids)
        except (KeyError, ValueError):
            continue  # a half-finished encode
        rows = np.arange(min(n_max, len(ids)))
        return [ids[i] for i in rows], x[rows], store.modalities[rows].tolist(), f"MiniLM union corpus ({meta.parent.name})"
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n_max, 384)).astype(np.float32)
    return [f"r{i}" for i in range(n_max)], x, ["text" if i % 20 else "table" for i in range(n_max)], "random unit vectors"


def faiss_vs_raw(quick: bool = False) -> dict[str, Any]:
    """Queries/s of ``FaissIndex.search`` vs raw FAISS, same fp16 SQ vectors, k = 10."""
    import faiss

    from canopy_lit.retrieval.index import FaissIndex, normalize

    n = 10_000 if quick else 50_000
    ids, x, groups, source = _corpus_vectors(n)
    rng = np.random.default_rng(1)
    nq = 200 if quick else 1000
    q = normalize(x[rng.integers(0, len(x), nq)] + 0.05 * rng.standard_normal((nq, x.shape[1])).astype(np.float32))
    ours = FaissIndex.build(ids, x, groups=groups, kind="flat_sq_fp16")
    raw = faiss.IndexScalarQuantizer(x.shape[1], faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
    raw.train(normalize(x))
    raw.add(normalize(x))
    # Same answers first: a fast wrong wrapper would be worthless.
    got = ours.search(q[:50], 10).ids
    _, lab = raw.search(q[:50], 10)
    agree = np.mean([len(set(g) & {ids[j] for j in row}) / 10 for g, row in zip(got, lab, strict=True)])
    # One OpenMP thread on both sides: on a shared 2-core machine OpenMP spin-waits make 2-thread
    # timings swing by 2x between runs, which would measure the neighbours, not the wrapper.
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        t_ours, t_raw = interleaved(lambda: ours.search(q, 10), lambda: raw.search(q, 10), 9)
    finally:
        faiss.omp_set_num_threads(threads)
    out = _entry(nq / t_ours, nq / t_raw, 0.9, "queries/s")
    print(f"  faiss_vs_raw: {len(x)} vectors ({source}), {nq} queries, top-10 agreement {agree:.3f}", file=sys.stderr)
    return out


def _question_trees(n_questions: int = 1):
    from canopy_lit.data import load_benchmark
    from canopy_lit.hierarchy import Hierarchy

    bench = load_benchmark("hotpotqa", str(ROOT / "data/hotpotqa/hotpot_dev_distractor_100.json"))
    h = Hierarchy(2)
    qs = bench.questions[:n_questions]
    trees = [h.build(bench.items[i]) for q in qs for i in bench.candidates[q.id][:10]]
    return qs, trees, h


def cache_speedup(quick: bool = False) -> dict[str, Any]:
    """Nodes scored/s for one question: warm cache lookup + dot vs fθ encoding + dot."""
    from canopy_lit.encoders import load_encoder
    from canopy_lit.scoring.node_cache import NodeEmbeddingCache

    qs, trees, h = _question_trees(1)
    encoder = load_encoder("minilm")
    qv = encoder.encode_queries([qs[0].text]).numpy()[0]
    inputs = [h.node_input(t, i) for t in trees for i in range(len(t))]
    cache = NodeEmbeddingCache(encoder, h)
    cache.embed_trees(trees)  # warm

    def warm() -> None:
        for e in cache.embed_trees(trees):
            _ = e @ qv

    def cold() -> None:
        _ = encoder.encode_nodes(inputs).numpy() @ qv

    t_warm = best_time(warm, 5 if quick else 20)
    t_cold = best_time(cold, 1 if quick else 3)
    n = len(inputs)
    print(f"  cache_speedup: {len(trees)} items, {n} nodes; warm {t_warm * 1e3:.2f} ms, encode {t_cold * 1e3:.0f} ms", file=sys.stderr)
    return _entry(n / t_warm, n / t_cold, 100.0, "nodes/s")


def encode_vs_raw(quick: bool = False, batch_size: int = 32) -> dict[str, Any]:
    """Texts/s of our node-encoding path (cold cache) vs a bare backbone forward, same texts and batch size."""
    import torch
    import torch.nn.functional as F

    from canopy_lit.encoders import load_encoder
    from canopy_lit.scoring.node_cache import NodeEmbeddingCache

    _, trees, h = _question_trees(1 if quick else 3)
    texts = [h.node_text(t, i) for t in trees for i in range(len(t))]
    encoder = load_encoder("minilm", batch_size=batch_size)
    tok, model = encoder.tokenizer, encoder.model
    max_len = encoder.max_seq_length

    @torch.inference_mode()
    def raw() -> np.ndarray:
        out = []
        for b in range(0, len(texts), batch_size):
            enc = tok(texts[b : b + batch_size], padding=True, truncation=True, max_length=max_len, return_tensors="pt")
            hidden = model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            out.append(F.normalize((hidden * m).sum(1) / m.sum(1), dim=-1))
        return torch.cat(out).numpy()

    def ours() -> list[np.ndarray]:
        return NodeEmbeddingCache(encoder, h, batch_size=batch_size).embed_trees(trees)  # fresh = all misses

    ref = raw()
    mine = np.concatenate(ours())
    err = float(np.abs(ref - mine).max())
    t_ours, t_raw = interleaved(ours, raw, 2 if quick else 3)
    print(f"  encode_vs_raw: {len(texts)} node texts, batch {batch_size}, max |diff| {err:.1e}", file=sys.stderr)
    return _entry(len(texts) / t_ours, len(texts) / t_raw, 0.9, "texts/s")


def encoder_cost(quick: bool = False, batch_size: int = 32) -> dict[str, Any]:
    """Node texts/s of all-mpnet-base-v2 (``encoder=mpnet``) vs MiniLM (the default), same texts, node cache
    off, measured alternately. Descriptive (no target): what the larger encoder costs per probe or epoch.
    Fetches the mpnet asset (386 MB) when it is not cached."""
    from canopy_lit.encoders import load_encoder

    _, trees, h = _question_trees(1 if quick else 3)
    inputs = [h.node_input(t, i) for t in trees for i in range(len(t))]
    small, large = (load_encoder(name, batch_size=batch_size, max_seq_length=512) for name in ("minilm", "mpnet"))
    t_large, t_small = interleaved(lambda: large.encode_nodes(inputs), lambda: small.encode_nodes(inputs), 1 if quick else 2)
    print(f"  encoder_cost: {len(inputs)} node texts; mpnet {t_large:.1f} s, MiniLM {t_small:.1f} s", file=sys.stderr)
    return {**_entry(len(inputs) / t_large, len(inputs) / t_small, 0.0, "texts/s"), "target": None}


def batch_tokens(quick: bool = False, budgets: tuple[int, ...] = (1024, 2048, 4096)) -> dict[str, Any]:
    """Texts/s of node encoding with token-budget batches vs fixed 64-input batches, same texts.

    ``ours`` uses the MiniLM config default (``configs/encoder/minilm.yaml`` max_batch_tokens); the
    other budgets are reported alongside so the default can be re-chosen on other hardware.
    """
    import torch

    from canopy_lit.encoders import load_encoder

    _, trees, h = _question_trees(4 if quick else 8)
    texts = [h.node_text(t, i) for t in trees for i in range(len(t))]
    encoder = load_encoder("minilm", batch_size=64)
    default = _config_default("max_batch_tokens")

    def run(budget: int | None) -> Callable[[], Any]:
        def fn() -> Any:
            encoder.max_batch_tokens = budget
            with torch.inference_mode():
                return encoder.encode_nodes(texts)

        return fn

    ref = run(None)().numpy()
    err = float(np.abs(run(default)().numpy() - ref).max())
    times: dict[str, float] = {}
    for _ in range(2 if quick else 3):  # alternate every setting so load drift hits all alike
        for budget in (None, *budgets):
            times[str(budget)] = min(times.get(str(budget), float("inf")), best_time(run(budget), 1))
    print(f"  batch_tokens: {len(texts)} node texts, max |diff| {err:.1e}, s by budget {times}", file=sys.stderr)
    entry = _entry(len(texts) / times[str(default)], len(texts) / times["None"], 1.0, "texts/s")
    entry["texts_per_s_by_budget"] = {k: len(texts) / v for k, v in times.items()}
    entry["note"] = f"default max_batch_tokens={default} vs batch_size=64 without a budget, {len(texts)} node texts"
    return entry


def _config_default(key: str) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.load(ROOT / "configs/encoder/minilm.yaml")[key]


def index_costs(
    quick: bool = False,
    dims: tuple[int, ...] = (384, 2048),
    kinds: tuple[str, ...] = ("flat", "flat_sq_fp16", "ivfpq"),
    threads: int = 1,
) -> dict[str, Any]:
    """Descriptive (no target): build time, bytes/vector and search latency per index kind and size.

    Random unit vectors (timing only; IVF-PQ recall on real embeddings is measured separately).
    Single-threaded FAISS by default, so numbers scale per core. Feeds docs/scaling.md.
    """
    import faiss

    from canopy_lit.retrieval.index import FaissIndex, normalize

    sizes = (20_000,) if quick else (50_000, 200_000)
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(threads)
    rows: dict[str, Any] = {}
    rng = np.random.default_rng(0)
    try:
        for d in dims:
            q = normalize(rng.standard_normal((64, d)).astype(np.float32))
            for n in sizes if d <= 512 else sizes[:1]:
                x = rng.standard_normal((n, d)).astype(np.float32)
                ids = [str(i) for i in range(n)]
                for kind in kinds:
                    opts = {"nlist": 1024, "pq_m": 64 if d % 64 == 0 else 48, "nprobe": 32} if kind == "ivfpq" else {}
                    t0 = time.perf_counter()
                    index = FaissIndex.build(ids, x, kind=kind, **opts)
                    build = time.perf_counter() - t0
                    nbytes = len(faiss.serialize_index(index.parts["all"]))
                    search = best_time(lambda index=index, q=q: index.search(q, 10), 3) / len(q)
                    rows[f"{kind}/d{d}/n{n}"] = {
                        "build_s": round(build, 3),
                        "bytes_per_vector": round(nbytes / n, 1),
                        "search_ms_per_query": round(search * 1e3, 3),
                    }
                    print(f"  {kind:13s} d={d:5d} n={n:7d} {rows[f'{kind}/d{d}/n{n}']}", file=sys.stderr)
    finally:
        faiss.omp_set_num_threads(before)
    return {"rows": rows, "threads": threads, "unit": "see rows"}


BENCHMARKS = {
    "faiss_vs_raw": faiss_vs_raw,
    "cache_speedup": cache_speedup,
    "encode_vs_raw": encode_vs_raw,
    "index_costs": index_costs,
}

if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    quick = "--quick" in sys.argv
    for name in args or list(BENCHMARKS):
        print(name, json.dumps(BENCHMARKS[name](quick)))
