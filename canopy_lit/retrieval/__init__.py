"""Retrieval: corpus store (the bundled union or your own corpus file), FAISS index, BM25, hybrid RRF, corpus
encoding, routing (the node-embedding cache is the scoring stage's, canopy_lit.scoring).

Usable without Hydra::

    from canopy_lit.encoders import load_encoder
    from canopy_lit.retrieval import build_retriever
    retriever = build_retriever(load_encoder("minilm"), ["nq", "hotpotqa"])
    hits = retriever.retrieve("who wrote hamlet", k=10)       # hits.items, hits.scores

Names are imported lazily: ``canopy_lit.retrieval.index`` alone must not pull in Lightning.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "BM25Retriever": "bm25",
    "build_bm25_retriever": "bm25",
    "HybridRetriever": "hybrid",
    "build_hybrid_retriever": "hybrid",
    "reciprocal_rank_fusion": "hybrid",
    "CorpusStore": "corpus",
    "render_item": "corpus",
    "CorpusEncoderModule": "encode",
    "EmbeddingShardWriter": "encode",
    "EncodeReport": "encode",
    "done_ids": "encode",
    "encode_corpus": "encode",
    "f0_fingerprint": "encode",
    "load_shards": "encode",
    "evaluate_retrieval": "evaluate",
    "recall_at": "evaluate",
    "KINDS": "faiss_codes",
    "FaissIndex": "index",
    "SearchResult": "index",
    "FaissRetriever": "retriever",
    "Retrieval": "retriever",
    "Retriever": "retriever",
    "build_retriever": "retriever",
    "LLMModalityRouter": "router",
    "open_corpus": "user_corpus",
    "read_corpus": "user_corpus",
    "user_corpus_store": "user_corpus",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'canopy_lit.retrieval' has no attribute {name!r}")
    return getattr(importlib.import_module(f"canopy_lit.retrieval.{_EXPORTS[name]}"), name)


__all__ = sorted(_EXPORTS)
