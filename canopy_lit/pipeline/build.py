"""The composition root of evaluation: config -> every stage, each built from its own Hydra group.

One question's path, stage by stage (group -> what this module builds)::

    data        load_questions    the benchmark split (Benchmark, questions)
    retriever   build_retriever   corpus | candidates | benchmark; index knobs in ``retrieval``
    tree        build_hierarchy   Hierarchy (region trees, branching B)
    encoder     build_encoder     NodeEncoder (f0 / fθ), through its ``_target_``
    scorer      build_scorer      NodeScorer: the encoder view nodes are scored through, over the node cache
    refine      build_refiner     Refiner (the scorer is built only when it reads node scores)
    controller  build_controller  critic | ircot | none
    llm         build_llm         reader, critic, router, aggregation classifier
    loop        loop_settings     k, R, exclude_seen, reader cap -> EvidenceLoop

Each mode gets its stages here: ``build_mode_runner`` (the mode's block under ``modes``; qa's is
``method.runner``), ``build_loop`` (qa), ``build_evidence_loop`` (evidence) and ``build_probe`` (probe). Nothing here decides
a method: the method configs pick the groups. This module imports nothing from ``canopy_lit.eval``
(the harness runs what is built here).

The other modes' stages are built here too: ``build_retrieval_eval`` (retrieval) and ``build_judge`` (the
LLM-as-judge). CARVE (``method=carve``) has its own pipeline and composition root, ``canopy_lit.carve.build``.
"""

from __future__ import annotations

import inspect
import json
import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.utils import get_method, instantiate
from omegaconf import DictConfig, OmegaConf

from canopy_lit.control import CRITIC_MAX_TOKENS, Controller
from canopy_lit.data import load_split
from canopy_lit.data.shards import shard_questions
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.io import atomic_write_text
from canopy_lit.llm.context import evidence_room
from canopy_lit.llm.judge import AnswerJudge, judge_fingerprint
from canopy_lit.llm.tokenizers import token_counter
from canopy_lit.pipeline.batched import BatchedQuestionRunner, BatchingLLM
from canopy_lit.pipeline.loop import EvidenceLoop, LoopSettings, QuestionRunner
from canopy_lit.reader import LLMReader, NoReader
from canopy_lit.refine import AggregationClassifier, Refiner
from canopy_lit.retrieval.base import Retriever
from canopy_lit.retrieval.candidates import CandidateRanking, DenseRanking
from canopy_lit.retrieval.evaluate import KS
from canopy_lit.retrieval.retriever import build_retriever as build_corpus_index
from canopy_lit.retrieval.retriever import builder_options
from canopy_lit.retrieval.router import LLMModalityRouter
from canopy_lit.schema import PIPELINE_RETRIEVAL_KEYS
from canopy_lit.scoring.node_cache import NodeEmbeddingCache
from canopy_lit.scoring.scorers import NodeScorer, QuerySideEncoder

__all__ = [
    "ProbeStages",
    "QuestionRunner",
    "build_candidate_ranking",
    "build_controller",
    "build_encoder",
    "build_evidence_loop",
    "build_f0_encoder",
    "build_hierarchy",
    "build_index",
    "build_judge",
    "build_llm",
    "build_loop",
    "build_node_scorer",
    "build_probe",
    "build_refiner",
    "build_retriever",
    "build_retrieval_eval",
    "build_mode_runner",
    "build_scorer",
    "load_questions",
    "loop_settings",
]

ModeRunner = Callable[[DictConfig], dict[str, float]]
log = logging.getLogger(__name__)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def load_questions(
    cfg: DictConfig, notify: Callable[[str], None] = _stderr, *, need_answers: bool = False
) -> tuple[Any, list[Any]]:
    """The benchmark and the configured split of its questions (first ``limit`` of them; ``shard=I/N``: its part).

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
    questions = shard_questions(questions, cfg.get("shard"))  # shard=I/N: its part of exactly these questions
    bench.require(questions, f"usable questions in split {cfg.data.get('split')!r}")
    return bench, questions


def build_mode_runner(cfg: DictConfig) -> ModeRunner:
    """The configured mode's ``run(cfg) -> metrics``: its ``_target_`` block under ``modes`` (qa's is the method's
    runner, ``method.runner``: CANOPY's evidence loop, or CARVE's pipeline)."""
    return instantiate(cfg.modes[str(cfg.get("mode", "qa"))])


def build_hierarchy(cfg: DictConfig) -> Hierarchy:
    """The region-tree builders of the ``tree`` group (branching B, modality builders)."""
    return instantiate(cfg.tree)


def build_refiner(cfg: DictConfig) -> Refiner:
    """The refiner of the ``refine`` group (what it needs beyond its knobs, it names in its config)."""
    return instantiate(cfg.refine)


def build_encoder(cfg: DictConfig) -> Any:
    """The node/query encoder of ``cfg.encoder`` (its ``_target_``, e.g. ``load_encoder``)."""
    return instantiate(cfg.encoder)


def build_llm(cfg: DictConfig) -> Any:
    return instantiate(cfg.llm)


def _node_cache_dir(cfg: DictConfig) -> Path | None:
    cache_dir = cfg.retrieval.get("node_cache_dir")
    return Path(cache_dir) if cache_dir else None


def build_node_scorer(cfg: DictConfig, encoder: Any, hierarchy: Hierarchy) -> NodeScorer:
    """The ``scorer`` group's node scorer (fθ, or f0 for RECOMP) over the node-embedding cache
    (``retrieval.node_cache_dir``)."""
    factory: Callable[..., NodeScorer] = instantiate(cfg.scorer)
    return factory(encoder=encoder, hierarchy=hierarchy, cache_dir=_node_cache_dir(cfg))


def build_scorer(cfg: DictConfig, encoder: Any, hierarchy: Hierarchy, refiner: Refiner) -> NodeScorer | None:
    """``build_node_scorer`` for a refiner that reads node scores; None for one that does not (keep-whole)."""
    if encoder is None or not refiner.needs_scores:
        return None
    return build_node_scorer(cfg, encoder, hierarchy)


def build_retriever(
    cfg: DictConfig, bench: Any, encoder: Any, hierarchy: Hierarchy, llm: Any, item_cache: Any = None
) -> Retriever | None:
    """The round retriever of the ``retriever`` group (None when the method never retrieves).

    ``item_cache``: a node-embedding cache the candidate items' vectors go through (the evidence
    mode's, shared by the runs of a study); the corpus index ignores it (it caches by content).
    """
    if cfg.loop.max_rounds == 0 or cfg.retrieval.k == 0:
        return None
    options = OmegaConf.to_container(cfg.retriever, resolve=True)
    assert isinstance(options, dict)
    options.pop("name", None)  # the option's label for tables and run folders, not an argument
    factory: Callable[..., Retriever] = instantiate(options)
    return call_declared(
        factory, retrieval=cfg.retrieval, bench=bench, encoder=encoder, hierarchy=hierarchy, llm=llm,
        item_cache=item_cache, index=build_index(cfg), ranking=build_candidate_ranking(cfg),
    )  # fmt: skip


def build_controller(cfg: DictConfig, llm: Any, hierarchy: Hierarchy) -> Controller | None:
    """The controller of the ``controller`` group (None = ``controller=none``: stop after round 1)."""
    factory: Callable[..., Controller | None] = instantiate(cfg.controller)
    return call_declared(factory, llm=llm, hierarchy=hierarchy, data=cfg.data)


def call_declared(factory: Callable[..., Any], **offered: Any) -> Any:
    """``factory`` called with the offered keywords its signature declares (all of them when it takes
    ``**kwargs``): each option of a group (``retriever``, ``controller``) declares what it needs and nothing else."""
    params = inspect.signature(factory).parameters
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    return factory(**{k: v for k, v in offered.items() if takes_all or k in params})


def loop_settings(cfg: DictConfig) -> LoopSettings:
    """The loop's knobs; the loop is the one owner of ``retrieval.k`` and ``retrieval.exclude_seen``."""
    return LoopSettings(
        k=int(cfg.retrieval.k),
        max_rounds=int(cfg.loop.max_rounds),
        exclude_seen=bool(cfg.retrieval.get("exclude_seen", False)),
        reader_max_tokens=int(cfg.loop.reader_max_tokens),
        aggregation_check=bool(cfg.loop.get("aggregation_check", True)),
    )


def record_reader_cap(cfg: DictConfig, configured: int, effective: int) -> None:
    """Record in the run folder the reader cap that runs when the llm's context lowers the configured one.

    ``run.json``'s ``cap`` becomes the effective cap (``cap_configured`` keeps the setting), and
    ``settings.json`` gains ``effective: {"loop.reader_max_tokens": ...}`` beside its ``settings`` (which the
    resume check compares, so they stay as configured). Files that are not there (no run folder) are skipped.
    """
    # Outside a Hydra run (a loop built from a composed config in a test or a notebook) the run folder's
    # ${hydra:...} interpolation has nothing to resolve: there is no folder to record in.
    out = OmegaConf.select(cfg, "paths.output_dir", default=None, throw_on_resolution_failure=False)
    if not out:
        return
    for name, update in (
        ("run.json", {"cap": effective, "cap_configured": configured}),
        ("settings.json", {"effective": {"loop.reader_max_tokens": effective}}),
    ):
        path = Path(str(out)) / name
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # not written (a loop built outside an evaluation) or not ours to repair here
        if isinstance(record, dict):
            atomic_write_text(path, json.dumps({**record, **update}, indent=2 if name == "run.json" else 1,
                                               ensure_ascii=False) + "\n")


def build_loop(cfg: DictConfig, bench: Any) -> QuestionRunner:
    """The configured method as an ``EvidenceLoop`` wrapped for per-question accounting."""
    hierarchy = build_hierarchy(cfg)
    refiner = build_refiner(cfg)
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
        record_reader_cap(cfg, settings.reader_max_tokens, room)
        settings.reader_max_tokens = room
    retrieving = settings.max_rounds > 0 and settings.k > 0
    encoder = build_encoder(cfg) if (retrieving or refiner.needs_scores) else None
    scorer = build_scorer(cfg, encoder, hierarchy, refiner)
    retriever = build_retriever(cfg, bench, encoder, hierarchy, llm) if retrieving else None
    loop = EvidenceLoop(
        retriever,
        hierarchy,
        refiner,
        LLMReader(llm, max_tokens=reader_tokens),
        llm.count_tokens,
        scorer=scorer,
        controller=build_controller(cfg, llm, hierarchy),
        aggregation=AggregationClassifier(llm) if settings.aggregation_check else None,
        settings=settings,
    )
    return BatchedQuestionRunner(loop, llm) if batched else QuestionRunner(loop, llm)


def build_evidence_loop(cfg: DictConfig, bench: Any) -> EvidenceLoop:
    """``mode: evidence``: the QA pipeline's stages (``retriever``, ``tree``, ``encoder``, ``scorer``,
    ``refine``) for one round, and no LLM at all: no critic, no aggregation classifier, no reader.

    Evidence tokens are counted in the reader's tokenizer (``evidence.tokenizer``); the candidate items'
    f0 vectors go through the node cache, so the runs and jobs of a study embed each item once.

    Raises:
        ValueError: ``retrieval.routing`` on (the router is an LLM) or ``retrieval.k`` < 1.
    """
    if cfg.retrieval.get("routing"):
        raise ValueError("mode=evidence makes no LLM call: set retrieval.routing=false (the router is an LLM)")
    if int(cfg.retrieval.k) < 1:
        raise ValueError(f"mode=evidence needs retrieval.k >= 1, got {cfg.retrieval.k}")
    hierarchy = build_hierarchy(cfg)
    refiner = build_refiner(cfg)
    encoder = build_encoder(cfg)
    scorer = build_scorer(cfg, encoder, hierarchy, refiner)
    item_cache = NodeEmbeddingCache(QuerySideEncoder(encoder), hierarchy, cache_dir=_node_cache_dir(cfg))
    retriever = build_retriever(cfg, bench, encoder, hierarchy, None, item_cache=item_cache)
    settings = LoopSettings(
        k=int(cfg.retrieval.k),
        max_rounds=1,
        exclude_seen=False,
        reader_max_tokens=int(cfg.loop.reader_max_tokens),
        aggregation_check=False,
    )
    count = token_counter(str(cfg.evidence.tokenizer))
    return EvidenceLoop(retriever, hierarchy, refiner, NoReader(), count, scorer=scorer, settings=settings)


@dataclass
class ProbeStages:
    """What the refinement probe runs: trees, the node scorer, and δ of the rule it judges."""

    hierarchy: Hierarchy
    scorer: NodeScorer
    descend_margin: float


def build_probe(cfg: DictConfig) -> ProbeStages:
    """``mode: probe``: the ``tree`` and ``scorer`` stages, and δ of the refinement rule
    (``refine.descend_margin``; only CANOPY's refiner has one, the probe judges parent-relative decisions).

    The scorer's node cache is the loop's: a probe rerun (another δ, B-independent leaves) encodes nothing again.
    """
    hierarchy = build_hierarchy(cfg)
    scorer = build_node_scorer(cfg, build_encoder(cfg), hierarchy)
    return ProbeStages(hierarchy, scorer, float(cfg.refine.get("descend_margin", 0.0)))


# --------------------------------------------------------------------------- retrieval (index, ranking, mode)


def build_index(cfg: DictConfig) -> Callable[..., Retriever]:
    """The ``retrieval`` group's index builder (dense FAISS, BM25 or hybrid) with its knobs bound; it takes
    ``encoder`` and ``router``. The group's pipeline keys (``PIPELINE_RETRIEVAL_KEYS``: the loop's ``k``,
    the candidate ranking ...) are no argument of it."""
    options = OmegaConf.to_container(cfg.retrieval, resolve=True)
    assert isinstance(options, dict)
    return instantiate({k: v for k, v in options.items() if k not in PIPELINE_RETRIEVAL_KEYS})


def build_candidate_ranking(cfg: DictConfig) -> CandidateRanking:
    """How ``retriever=candidates|benchmark`` orders a question's items: ``retrieval.candidate_ranking``,
    set by the ``retrieval`` option (f0 cosine where it names none)."""
    node = cfg.retrieval.get("candidate_ranking")
    return instantiate(node) if node is not None else DenseRanking()


def build_f0_encoder(cfg: DictConfig) -> Any:
    """The ``encoder`` group's encoder without its adapter: retrieval embeds both sides with f0."""
    return instantiate(cfg.encoder, adapter=None)


def build_retrieval_eval(cfg: DictConfig) -> dict[str, Any]:
    """``mode: retrieval``: the keyword arguments of ``retrieval.evaluate.evaluate_retrieval``.

    The index builder is the ``retrieval`` group's target (its knobs the builder takes), over the group's
    ``benchmarks``; ``retrieval_eval`` {benchmarks, ks, split} and ``limit`` pick the questions. The
    encoder is the ``encoder`` group's f0 (none for BM25); ``retrieval.routing`` routes with ``cfg.llm``.
    """
    options = OmegaConf.to_container(cfg.retrieval, resolve=True)
    assert isinstance(options, dict)
    builder = get_method(options["_target_"]) if options.get("_target_") else build_corpus_index
    options = builder_options(builder, options)
    ev = cfg.get("retrieval_eval") or {}
    spec: dict[str, Any] = {
        "builder": builder,
        "corpus_benchmarks": options.pop("benchmarks", None),
        "cache_dir": options.pop("cache_dir", None),
        "benchmarks": ev.get("benchmarks"),
        "ks": tuple(ev.get("ks") or KS),
        "split": ev.get("split") or cfg.get("split") or "all",
        "limit": cfg.get("limit"),
        **options,
    }
    if options.get("routing") and options.get("router") is None and cfg.get("llm") is not None:
        spec["router"] = LLMModalityRouter(build_llm(cfg))
    if cfg.get("encoder") is not None and getattr(builder, "needs_encoder", True):
        spec["encoder"] = build_f0_encoder(cfg)
    return spec


# --------------------------------------------------------------------------- the LLM-as-judge


def build_judge(cfg: Mapping[str, Any], llm: Any = None) -> AnswerJudge:
    """The LLM-as-judge (``eval/judge``): the ``llm`` group's model with the ``judge`` block's options.

    Args:
        cfg: an evaluate config (``llm``, ``judge.max_tokens`` / ``judge.logprobs``).
        llm: an already built backend for ``cfg.llm`` (evaluation reuses the run's); None builds one.
    """
    judge = cfg.get("judge") or {}
    max_tokens, logprobs = int(judge.get("max_tokens", 16)), int(judge.get("logprobs", 5))
    llm_cfg = OmegaConf.to_container(cfg["llm"], resolve=True) if OmegaConf.is_config(cfg["llm"]) else dict(cfg["llm"])
    fingerprint = judge_fingerprint(llm_cfg, max_tokens=max_tokens, logprobs=logprobs)
    backend = llm if llm is not None else instantiate(cfg["llm"])
    return AnswerJudge(backend, fingerprint, max_tokens=max_tokens, logprobs=logprobs)
