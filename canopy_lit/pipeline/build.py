"""The composition root of evaluation: config -> every stage, each built from its own Hydra group.

One question's path, stage by stage (group -> what this module builds)::

    data        load_questions    the benchmark split (Benchmark, questions)
    retriever   build_retriever   corpus | candidates | benchmark; index knobs in ``retrieval``
    tree        instantiate       Hierarchy (region trees, branching B)
    encoder     build_encoder     NodeEncoder (f0 / fθ), through its ``_target_``
    refine      instantiate       Refiner; with ``build_scorer`` when it reads node scores
    controller  build_controller  critic | ircot | none
    llm         build_llm         reader, critic, router, aggregation classifier
    loop        loop_settings     k, R, exclude_seen, reader cap -> EvidenceLoop

Nothing here decides a method: the method configs pick the groups. This module imports nothing
from ``canopy_lit.eval`` (the harness runs what is built here).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from canopy_lit.data import load_split
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.llm import AggregationClassifier, LLMReader
from canopy_lit.llm.roles import CRITIC_MAX_TOKENS, evidence_room
from canopy_lit.pipeline.batched import BatchedQuestionRunner, BatchingLLM
from canopy_lit.pipeline.controllers import AggregationAdapter, ReaderAdapter
from canopy_lit.pipeline.extractive import scorer_encoder
from canopy_lit.pipeline.loop import Controller, EvidenceLoop, LoopSettings, QuestionRunner
from canopy_lit.pipeline.scoring import NodeScorer
from canopy_lit.refine import Refiner
from canopy_lit.retrieval.base import Retriever
from canopy_lit.retrieval.node_cache import NodeEmbeddingCache

__all__ = [
    "QuestionRunner",
    "build_controller",
    "build_encoder",
    "build_llm",
    "build_loop",
    "build_retriever",
    "build_scorer",
    "load_questions",
    "loop_settings",
]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def load_questions(
    cfg: DictConfig, notify: Callable[[str], None] = _stderr, *, need_answers: bool = False
) -> tuple[Any, list[Any]]:
    """The benchmark and the configured split of its questions (first ``limit`` of them).

    Skipped records are never silent: one ``notify`` line per reason (the harness's writes to stderr
    and the run log; metrics.json gets ``data/skipped/*`` from ``bench.skip_metrics()``).
    ``need_answers`` (QA, which scores answers): questions without a gold answer are skipped as
    ``no_answer`` before ``limit`` is applied.
    """
    bench, questions = load_split(**OmegaConf.to_container(cfg.data, resolve=True))
    if need_answers:
        questions = bench.answered(questions)
    for line in bench.skip_messages():
        notify(line)
    if cfg.get("limit"):
        questions = questions[: int(cfg.limit)]
    bench.require(questions, f"usable questions in split {cfg.data.get('split')!r}")
    return bench, questions


def adapter_scale_label(cfg: DictConfig) -> str:
    """`` adapter_scale=s`` when fθ is interpolated toward f0 (s != 1): a table's setting line must not pass it off as fθ."""
    s = float(cfg.encoder.get("adapter_scale", 1.0))
    return "" if s == 1.0 else f" adapter_scale={s:g}"


def build_encoder(cfg: DictConfig) -> Any:
    """The node/query encoder of ``cfg.encoder`` (its ``_target_``, e.g. ``load_encoder``)."""
    return instantiate(cfg.encoder)


def build_llm(cfg: DictConfig) -> Any:
    return instantiate(cfg.llm)


def build_scorer(cfg: DictConfig, encoder: Any, hierarchy: Hierarchy, refiner: Refiner) -> NodeScorer | None:
    """Node scores for a refiner that reads them, over a node-embedding cache (``retrieval.node_cache_dir``).

    A refiner with its own scorer (RECOMP: ``refine.scorer=f0``) gets f0 nodes even when an adapter is loaded.
    """
    if encoder is None or not refiner.needs_scores:
        return None
    cache_dir = cfg.retrieval.get("node_cache_dir")
    node_encoder = scorer_encoder(encoder, refiner)
    cache = NodeEmbeddingCache(node_encoder, hierarchy, cache_dir=Path(cache_dir) if cache_dir else None)
    return NodeScorer(node_encoder, hierarchy, cache)


def build_retriever(cfg: DictConfig, bench: Any, encoder: Any, hierarchy: Hierarchy, llm: Any) -> Retriever | None:
    """The round retriever of the ``retriever`` group (None when the method never retrieves)."""
    if cfg.loop.max_rounds == 0 or cfg.retrieval.k == 0:
        return None
    options = OmegaConf.to_container(cfg.retriever, resolve=True)
    assert isinstance(options, dict)
    options.pop("name", None)  # the option's label for tables and run folders, not an argument
    factory: Callable[..., Retriever] = instantiate(options)
    return factory(retrieval=cfg.retrieval, bench=bench, encoder=encoder, hierarchy=hierarchy, llm=llm)


def build_controller(cfg: DictConfig, llm: Any, hierarchy: Hierarchy) -> Controller | None:
    """The controller of the ``controller`` group (None = ``controller=none``: stop after round 1)."""
    factory: Callable[..., Controller | None] = instantiate(cfg.controller)
    return factory(llm=llm, hierarchy=hierarchy, data=cfg.data)


def loop_settings(cfg: DictConfig) -> LoopSettings:
    """The loop's knobs; the loop is the one owner of ``retrieval.k`` and ``retrieval.exclude_seen``."""
    return LoopSettings(
        k=int(cfg.retrieval.k),
        max_rounds=int(cfg.loop.max_rounds),
        exclude_seen=bool(cfg.retrieval.get("exclude_seen", False)),
        reader_max_tokens=int(cfg.loop.reader_max_tokens),
        aggregation_check=bool(cfg.loop.get("aggregation_check", True)),
    )


def build_loop(cfg: DictConfig, bench: Any) -> QuestionRunner:
    """The configured method as an ``EvidenceLoop`` wrapped for per-question accounting."""
    hierarchy: Hierarchy = instantiate(cfg.tree)
    refiner: Refiner = instantiate(cfg.refine)
    llm = build_llm(cfg)
    batched = bool(cfg.loop.get("batched", False))
    if batched:  # round-synchronous: the questions in flight (``concurrency``) send their calls as batches
        max_batch = cfg.loop.get("max_batch")
        llm = BatchingLLM(llm, max_batch=int(max_batch) if max_batch else None)
    settings = loop_settings(cfg)
    reader_tokens = int(cfg.get("reader", {}).get("max_tokens", 32))
    room = evidence_room(llm, max(reader_tokens, CRITIC_MAX_TOKENS))
    if room is not None and room < settings.reader_max_tokens:  # a prompt the backend refuses answers nothing
        _stderr(
            f"loop.reader_max_tokens={settings.reader_max_tokens} does not fit the llm's context of "
            f"{llm.context_length} tokens: the critic and the reader get at most {room} evidence tokens"
        )
        settings.reader_max_tokens = room
    retrieving = settings.max_rounds > 0 and settings.k > 0
    encoder = build_encoder(cfg) if (retrieving or refiner.needs_scores) else None
    scorer = build_scorer(cfg, encoder, hierarchy, refiner)
    retriever = build_retriever(cfg, bench, encoder, hierarchy, llm) if retrieving else None
    loop = EvidenceLoop(
        retriever,
        hierarchy,
        refiner,
        ReaderAdapter(LLMReader(llm, max_tokens=reader_tokens)),
        llm.count_tokens,
        scorer=scorer,
        controller=build_controller(cfg, llm, hierarchy),
        aggregation=AggregationAdapter(AggregationClassifier(llm)) if settings.aggregation_check else None,
        settings=settings,
    )
    return BatchedQuestionRunner(loop, llm) if batched else QuestionRunner(loop, llm)
