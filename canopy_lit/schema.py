"""Typed schemas of the train and evaluate configs, checked before any work starts.

Each config group with a fixed set of keys is a dataclass whose fields carry their range
(``knob(default, ge=1)``); groups that ``_target_`` a class accept that class's keyword
arguments. ``validate_eval_config(cfg)`` / ``validate_train_config(cfg)`` raise one
``ConfigError`` listing every problem, one line each, naming the key and the rule::

    tree.branching must be an integer >= 2, got 'two'
    unknown config key loop.max_round (did you mean loop.max_rounds?)

The entry points turn it into exit status 2 (a usage error) without a traceback.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import sys
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

# Methods that never retrieve: for these retrieval.k and loop.max_rounds may be 0.
NON_RETRIEVING_METHODS = frozenset({"no_retrieval"})
USAGE_ERROR = 2  # exit status of a config error (argparse's convention)
_MISSING = object()


class ConfigError(ValueError):
    """One or more invalid config values; ``problems`` holds one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


def knob(default: Any = None, **rule: Any) -> Any:
    """A schema field; ``rule`` keys: ``ge``, ``gt``, ``le``, ``lt``, ``choices``, ``also`` (extra allowed values)."""
    return field(default=default, metadata=rule)


# --------------------------------------------------------------------------- evaluate.py


@dataclass
class EvalSchema:
    """Top-level knobs of ``configs/evaluate.yaml``."""

    task_name: str = "evaluate"
    mode: str = knob("qa", choices=("qa", "probe", "evidence", "retrieval"))
    limit: int | None = knob(None, ge=1)
    seed: int = 0
    concurrency: int = knob(1, ge=1)
    threads: int | None = knob(None, ge=1)
    retry_failed: bool = False
    progress: bool = True
    max_consecutive_failures: int = knob(5, ge=0)


@dataclass
class LoopSchema:
    """``loop.*``: the critic loop (METHOD.md §1.1); the k / R minimum depends on the method."""

    max_rounds: int = knob(3, ge=1)
    reader_max_tokens: int = knob(16000, ge=1)
    aggregation_check: bool = True


@dataclass
class RetrievalSchema:
    """``retrieval.*``: pipeline keys plus the arguments of ``build_retriever`` checked for range."""

    k: int = knob(10, ge=1)
    # how retriever=candidates/benchmark ranks a question's items (bm25.yaml / hybrid.yaml set it)
    candidate_ranking: str = knob("dense", choices=("dense", "bm25", "hybrid"))
    index: str = knob("flat_sq_fp16", choices=("flat_sq_fp16", "flat", "ivfpq"))
    batch_size: int = knob(64, ge=1)
    shard_size: int = knob(4096, ge=1)
    partition_by_modality: bool = True
    routing: bool = False
    exclude_seen: bool = False


@dataclass
class CriticSchema:
    mode: str = knob("logprob", choices=("logprob", "json"))
    threshold: float | None = knob(None, ge=0.0, le=1.0)


@dataclass
class ReaderSchema:
    max_tokens: int = knob(32, ge=1)


@dataclass
class MethodSchema:
    """``method.*``: its name (tables) and, for a method with its own pipeline, its runner: a dotted
    path to ``run(cfg) -> dict[str, float]`` (default: the CANOPY evidence loop). The stages it uses
    are group choices in its defaults list (``refine``, ``controller`` ...)."""

    name: str = "canopy"
    label: str | None = None
    runner: str | None = None


@dataclass
class TreeSchema:
    branching: int = knob(2, ge=2)


@dataclass
class RefineSchema:
    m: int = knob(10, ge=1)
    lazy: bool = True
    descend_margin: float = knob(0.0, ge=-1.0, le=1.0)  # δ on cosine scores: |δ| > 1 is a typo, not a setting


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
    max_model_len: int = knob(16384, ge=1)
    multimodal: bool = False


# --------------------------------------------------------------------------- train.py


@dataclass
class TrainSchema:
    task_name: str = "train"
    seed: int = 0
    ckpt_path: str | None = None
    test: bool = True
    threads: int | None = knob(None, ge=1)


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


@dataclass
class TrainerSchema:
    """The Lightning Trainer knobs the presets set; -1 means "no limit" for epochs and steps."""

    max_epochs: int | None = knob(2, ge=1, also=(-1,))
    min_epochs: int | None = knob(None, ge=0)
    max_steps: int = knob(-1, ge=1, also=(-1,))
    log_every_n_steps: int = knob(10, ge=1)
    accumulate_grad_batches: int = knob(1, ge=1)
    check_val_every_n_epoch: int | None = knob(1, ge=1)
    num_sanity_val_steps: int = knob(0, ge=-1)
    gradient_clip_val: float | None = knob(None, ge=0)
    limit_train_batches: float | None = knob(None, ge=0)
    limit_val_batches: float | None = knob(None, ge=0)
    limit_test_batches: float | None = knob(None, ge=0)


# --------------------------------------------------------------------------- checking

_KIND_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _describe(kind: type, optional: bool, rule: dict[str, Any]) -> str:
    text = _KIND_NAMES.get(kind, kind.__name__)
    bounds = [
        f"{op} {rule[key]}"
        for key, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
        if key in rule
    ]
    if bounds:
        text += " " + " and ".join(bounds)
    if rule.get("choices"):
        text = "one of " + ", ".join(map(str, rule["choices"]))
    extras = [str(a) for a in rule.get("also", ())]
    if optional:
        extras.insert(0, "null")
    return f"{' or '.join(extras)} or {text}" if extras else text


def _type_ok(kind: type, value: Any) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):  # True is an int to Python, never to a config
        return False
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def check_value(key: str, value: Any, kind: type, optional: bool = False, **rule: Any) -> str | None:
    """The problem with ``value`` for config key ``key``, or None when it satisfies the rule."""
    if value is None and optional:
        return None
    if value in rule.get("also", ()) and not isinstance(value, bool):
        return None
    ok = _type_ok(kind, value)
    if ok and kind in (int, float):
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
    if ok and rule.get("choices"):
        ok = value in rule["choices"]
    if ok:
        return None
    return f"{key} must be {_describe(kind, optional, rule)}, got {value!r}"


def _field_kind(schema: type, name: str) -> tuple[type, bool]:
    hint = typing.get_type_hints(schema)[name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    optional = bool(typing.get_args(hint)) and type(None) in typing.get_args(hint)
    return (args[0] if args else hint), optional


def _value(node: DictConfig, key: str) -> Any:
    """``node[key]`` resolved; ``_MISSING`` when absent or not resolvable here (e.g. ``${hydra:...}``)."""
    if key not in node:
        return _MISSING
    try:
        value = node[key]
    except Exception:  # an interpolation only Hydra's runtime can resolve: not ours to judge
        return _MISSING
    return (
        OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) else value
    )


def _check_fields(
    node: Any, prefix: str, schema: type, problems: list[str], **overrides: dict[str, Any]
) -> None:
    """Check the keys of ``node`` that ``schema`` declares; ``overrides`` replace a field's rule."""
    if not isinstance(node, DictConfig):
        return
    for f in fields(schema):
        value = _value(node, f.name)
        if value is _MISSING:
            continue
        kind, optional = _field_kind(schema, f.name)
        rule = overrides.get(f.name, dict(f.metadata))
        problem = check_value(f"{prefix}{f.name}", value, kind, optional, **rule)
        if problem:
            problems.append(problem)


def _unknown(key: str, known: set[str], prefix: str, owner: str = "") -> str:
    guess = difflib.get_close_matches(key, sorted(known), n=1)
    hint = f" (did you mean {prefix}{guess[0]}?)" if guess else ""
    where = f" ({owner} takes no such argument)" if owner and not guess else ""
    return f"unknown config key {prefix}{key}{hint}{where}"


def _check_keys(node: Any, prefix: str, known: set[str], problems: list[str], owner: str = "") -> None:
    if not isinstance(node, DictConfig):
        return
    for key in node:
        if key not in known:
            problems.append(_unknown(str(key), known, prefix, owner))


def _target_params(target: str) -> set[str] | None:
    """Keyword names ``target`` accepts (None: it takes ``**kwargs``, or cannot be imported here)."""
    module, _, name = target.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module), name)
        params = inspect.signature(obj).parameters.values()
    except (ImportError, AttributeError, ValueError, TypeError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.kind is not inspect.Parameter.VAR_POSITIONAL}


_HYDRA_KEYS = {"_target_", "_partial_", "_convert_", "_recursive_", "_args_"}


def _check_target_keys(node: Any, prefix: str, problems: list[str], extra: set[str] = frozenset()) -> None:
    """Keys of a ``_target_`` group must be arguments of its class (or ``extra`` keys read elsewhere)."""
    if not isinstance(node, DictConfig) or "_target_" not in node:
        return
    target = str(node._target_)
    params = _target_params(target)
    if params is not None:
        _check_keys(node, prefix, params | _HYDRA_KEYS | set(extra), problems, owner=target)


def _names(schema: type) -> set[str]:
    return {f.name for f in fields(schema)}


def _raise(problems: list[str]) -> None:
    if problems:
        raise ConfigError(list(dict.fromkeys(problems)))


CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
# Top-level keys of evaluate configs besides EvalSchema's (presets add more: see ``declared_keys``).
_EVAL_GROUPS = {"paths", "data", "encoder", "tree", "refine", "retrieval", "retriever", "controller", "llm",
                "method", "loop", "critic", "reader", "carve", "retrieval_eval", "evidence", "study", "adapter",
                "hydra"}  # fmt: skip


@functools.lru_cache(maxsize=1)
def declared_keys(config_dir: Path = CONFIG_DIR) -> dict[str, frozenset[str]]:
    """Keys the shipped YAML files declare: ``""`` -> top-level keys, ``group`` -> that group's keys.

    A key a preset declares (``study``, ``controller.demos`` ...) is known without a schema entry; a key
    no file declares and no schema knows can only come from a ``+key=value`` override: a typo.
    """
    out: dict[str, set[str]] = {"": set()}
    for path in sorted(config_dir.rglob("*.yaml")) if config_dir.is_dir() else []:
        try:
            text = path.read_text(encoding="utf-8")
            doc = yaml.safe_load(text)
        except (OSError, yaml.YAMLError):
            continue
        if not isinstance(doc, dict):
            continue
        group = path.parent.relative_to(config_dir).as_posix()
        if "@package _global_" in text or group == ".":
            for key, value in doc.items():
                out[""].add(str(key))
                if isinstance(value, dict):
                    out.setdefault(str(key), set()).update(map(str, value))
        else:
            out.setdefault(group, set()).update(map(str, doc))
    return {k: frozenset(v - {"defaults"}) for k, v in out.items()}


# Keys of the retrieval group that are no index builder's arguments: the loop owns k and exclude_seen,
# the node cache and the candidate ranking are read by the pipeline, scope is the removed key (below).
PIPELINE_RETRIEVAL_KEYS = frozenset({"k", "exclude_seen", "node_cache_dir", "candidate_ranking", "scope"})
# retrieval.scope=X became the retriever group (retriever=X): evaluate.yaml declares it null so that an
# old command line reaches this check instead of a Hydra struct error.
_SCOPE_MOVED = (
    "retrieval.scope was replaced by the retriever group: use retriever={value} instead of "
    "retrieval.scope={value} (options: corpus, candidates, benchmark)"
)


def validate_eval_config(cfg: DictConfig) -> None:
    """Check an evaluate config (types, ranges, unknown keys) before any work.

    Raises:
        ConfigError: one line per problem, naming the key and the rule.
    """
    problems: list[str] = []
    known = declared_keys()
    _check_keys(cfg, "", _names(EvalSchema) | _EVAL_GROUPS | known[""], problems)
    _check_fields(cfg, "", EvalSchema, problems)

    method = str(_value(cfg.get("method") or OmegaConf.create({}), "name"))
    retrieves = method not in NON_RETRIEVING_METHODS
    why = f" (method={method} retrieves; only {', '.join(sorted(NON_RETRIEVING_METHODS))} may use 0)"
    least = 1 if retrieves else 0
    mode = cfg.get("mode", "qa")

    loop = cfg.get("loop")
    _check_keys(loop, "loop.", _names(LoopSchema) | known.get("loop", set()), problems)
    _check_fields(loop, "loop.", LoopSchema, problems, max_rounds={"ge": least})
    retrieval = cfg.get("retrieval")
    _check_fields(retrieval, "retrieval.", RetrievalSchema, problems, k={"ge": least})
    _check_target_keys(retrieval, "retrieval.", problems, set(PIPELINE_RETRIEVAL_KEYS))
    scope = _value(retrieval, "scope") if isinstance(retrieval, DictConfig) else _MISSING
    if scope is not _MISSING and scope is not None:
        problems.append(_SCOPE_MOVED.format(value=scope))
    _check_target_keys(cfg.get("retriever"), "retriever.", problems, {"name"})
    _check_target_keys(cfg.get("controller"), "controller.", problems)
    if retrieves and mode == "qa":
        # Append the reason to the k / R messages: "0 is fine elsewhere" is the surprising part.
        problems = [p + why if p.startswith(("retrieval.k ", "loop.max_rounds ")) else p for p in problems]
    for name, schema in (("critic", CriticSchema), ("reader", ReaderSchema), ("method", MethodSchema)):
        _check_keys(cfg.get(name), f"{name}.", _names(schema) | known.get(name, set()), problems)
        _check_fields(cfg.get(name), f"{name}.", schema, problems)
    for name, schema in (("tree", TreeSchema), ("refine", RefineSchema), ("llm", LLMSchema)):
        _check_fields(cfg.get(name), f"{name}.", schema, problems)
        _check_target_keys(cfg.get(name), f"{name}.", problems)
    _check_data_keys(cfg.get("data"), problems)
    _raise(problems)


def _check_data_keys(data: Any, problems: list[str]) -> None:
    from canopy_lit.data.splits import load_split

    _check_keys(data, "data.", set(inspect.signature(load_split).parameters), problems)


def validate_train_config(cfg: DictConfig) -> None:
    """Check a train config (types, ranges, unknown keys of model / datamodule / trainer) before any work.

    Raises:
        ConfigError: one line per problem, naming the key and the rule.
    """
    problems: list[str] = []
    _check_fields(cfg, "", TrainSchema, problems)
    for name, schema in (("tree", TreeSchema), ("datamodule", DataModuleSchema), ("model", ModelSchema),
                         ("trainer", TrainerSchema)):  # fmt: skip
        _check_fields(cfg.get(name), f"{name}.", schema, problems)
        _check_target_keys(cfg.get(name), f"{name}.", problems)
    _raise(problems)


def exit_if_invalid(cfg: DictConfig, validate: Any) -> None:
    """For entry points: ``validate(cfg)``; on a ``ConfigError`` print its lines to stderr and exit 2."""
    try:
        validate(cfg)
    except ConfigError as err:
        for line in err.problems:
            print(f"error: {line}", file=sys.stderr)
        raise SystemExit(USAGE_ERROR) from None


__all__ = [
    "exit_if_invalid",
    "NON_RETRIEVING_METHODS",
    "PIPELINE_RETRIEVAL_KEYS",
    "USAGE_ERROR",
    "ConfigError",
    "check_value",
    "validate_eval_config",
    "validate_train_config",
]
