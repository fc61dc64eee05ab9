"""Config -> a ready ``QuestionRunner``: every stage built from its Hydra group, nothing else decided here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.pipeline.controllers import (
    AggregationAdapter,
    CriticController,
    IRCoTController,
    ReaderAdapter,
)
from canopy_lit.pipeline.loop import EvidenceLoop, LoopSettings
from canopy_lit.pipeline.retrievers import CandidateRetriever, CorpusRetriever
from canopy_lit.pipeline.scoring import NodeScorer
from canopy_lit.pipeline.trace import QuestionRecord
from canopy_lit.types import Question

# Keys of the retrieval group read by the pipeline, not by ``build_retriever``.
_PIPELINE_RETRIEVAL_KEYS = ("scope", "node_cache_dir", "candidate_ranking")


class QuestionRunner:
    """Runs the loop for one question and attributes the LLM calls made meanwhile to it (thread-safe)."""

    def __init__(self, loop: EvidenceLoop, llm: Any) -> None:
        self.loop = loop
        self.llm = llm

    def __call__(self, question: Question) -> QuestionRecord:
        return self.run(question)

    def run(self, question: Question) -> QuestionRecord:
        log = getattr(self.llm, "log", None)
        if log is None:
            return self.loop.run(question)
        with log.scope(question.id):
            rec = self.loop.run(question)
        by_role = log.summary(scope=question.id)["by_role"]
        rec.llm_calls = {r: int(v["calls"]) for r, v in by_role.items()}
        rec.llm_tokens = {r: int(v["prompt_tokens"] + v["completion_tokens"]) for r, v in by_role.items()}
        rec.llm_prefill_tokens = {r: int(v["prompt_tokens"] - v["cached_tokens"]) for r, v in by_role.items()}
        return rec


def build_llm(cfg: DictConfig) -> Any:
    return instantiate(cfg.llm)


def build_retriever(cfg: DictConfig, bench: Any, encoder: Any, hierarchy: Hierarchy, llm: Any) -> Any:
    """The round retriever by ``retrieval.scope``.

    ``corpus``: the unified FAISS index (paper); ``candidates``: the question's own delivered items;
    ``benchmark``: every item of the loaded benchmark file (e.g. the bundled LVBench-format clips).
    """
    rcfg = cfg.retrieval
    scope = rcfg.get("scope", "corpus")
    if cfg.loop.max_rounds == 0 or rcfg.k == 0:
        return None
    from canopy_lit.retrieval.router import LLMModalityRouter

    if scope in ("candidates", "benchmark"):
        pool = bench.candidates
        if scope == "benchmark":  # every item of the loaded file is a candidate of every question (small sets)
            every = list(bench.items)
            pool = {q.id: every for q in bench.questions}
        # Routing among the modalities the pool holds; a single-modality benchmark needs no router call.
        modalities = sorted({it.modality.value for it in bench.items.values()})
        router = LLMModalityRouter(llm, modalities) if rcfg.get("routing") and len(modalities) > 1 else None
        ranking = rcfg.get("candidate_ranking", "dense")  # bm25.yaml / hybrid.yaml set it
        weights = rcfg.get("weights")
        return CandidateRetriever(
            bench.items, pool, encoder, hierarchy, router=router, ranking=ranking,
            rrf_k=int(rcfg.get("rrf_k", 60)), weights=dict(weights) if weights is not None else None,
        )
    if scope != "corpus":
        raise ValueError(f"retrieval.scope must be 'corpus', 'candidates' or 'benchmark', got {scope!r}")
    kwargs = OmegaConf.to_container(rcfg, resolve=True)
    for key in _PIPELINE_RETRIEVAL_KEYS:
        kwargs.pop(key, None)
    # offered only the modalities the index holds (FaissRetriever calls ``restrict``), one call per query text
    router = LLMModalityRouter(llm) if kwargs.get("routing") else None
    partial: Callable[..., Any] = instantiate(kwargs)
    return CorpusRetriever(partial(encoder=encoder, router=router))


def build_loop(cfg: DictConfig, bench: Any) -> QuestionRunner:
    """The configured method as an ``EvidenceLoop`` wrapped for per-question accounting."""
    from canopy_lit.eval.evaluate import load_encoder_from_cfg
    from canopy_lit.llm import AggregationClassifier, IRCoTStepper, LLMCritic, LLMReader

    hierarchy: Hierarchy = instantiate(cfg.tree)
    refiner = instantiate(cfg.refine)
    llm = build_llm(cfg)
    batched = bool(cfg.loop.get("batched", False))
    if batched:  # round-synchronous: the questions in flight (``concurrency``) send their calls as batches
        from canopy_lit.pipeline.batched import BatchingLLM

        max_batch = cfg.loop.get("max_batch")
        llm = BatchingLLM(llm, max_batch=int(max_batch) if max_batch else None)
    retrieving = cfg.loop.max_rounds > 0 and cfg.retrieval.k > 0
    encoder = load_encoder_from_cfg(cfg) if (retrieving or getattr(refiner, "needs_scores", False)) else None
    scorer = None
    if encoder is not None and getattr(refiner, "needs_scores", False):
        from canopy_lit.retrieval import NodeEmbeddingCache

        cache_dir = cfg.retrieval.get("node_cache_dir")
        from canopy_lit.pipeline.extractive import scorer_encoder

        # A refiner with its own scorer (RECOMP: ``refine.scorer=f0``) gets f0 nodes even when an adapter is loaded.
        node_encoder = scorer_encoder(encoder, refiner)
        cache = NodeEmbeddingCache(node_encoder, hierarchy, cache_dir=Path(cache_dir) if cache_dir else None)
        scorer = NodeScorer(node_encoder, hierarchy, cache)
    retriever = build_retriever(cfg, bench, encoder, hierarchy, llm) if retrieving else None
    ccfg = cfg.get("critic") or {}
    kind = cfg.method.get("controller", "none")
    if kind == "critic":
        controller: Any = CriticController(
            LLMCritic(llm, mode=ccfg.get("mode", "logprob"), threshold=ccfg.get("threshold"))
        )
    elif kind == "ircot":
        from canopy_lit.pipeline.ircot import load_demos

        m = cfg.method
        demos = load_demos(OmegaConf.to_container(cfg.data, resolve=True), int(m.get("demos", 0)), hierarchy,
                           int(m.get("demo_max_words", 250)), str(m.get("demo_split", "train")))  # fmt: skip
        controller = IRCoTController(IRCoTStepper(llm, demos=demos))
    elif kind in ("none", None):
        controller = None
    else:
        raise ValueError(f"method.controller must be critic | ircot | none, got {kind!r}")
    settings = LoopSettings(
        k=int(cfg.retrieval.k),
        max_rounds=int(cfg.loop.max_rounds),
        exclude_seen=bool(cfg.retrieval.get("exclude_seen", False)),
        reader_max_tokens=int(cfg.loop.reader_max_tokens),
        aggregation_check=bool(cfg.loop.get("aggregation_check", True)),
    )
    loop = EvidenceLoop(
        retriever,
        hierarchy,
        refiner,
        ReaderAdapter(LLMReader(llm, max_tokens=int(cfg.get("reader", {}).get("max_tokens", 32)))),
        llm.count_tokens,
        scorer=scorer,
        controller=controller,
        aggregation=AggregationAdapter(AggregationClassifier(llm)) if settings.aggregation_check else None,
        settings=settings,
    )
    if batched:
        from canopy_lit.pipeline.batched import BatchedQuestionRunner

        return BatchedQuestionRunner(loop, llm)
    return QuestionRunner(loop, llm)
