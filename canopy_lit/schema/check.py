"""Checking a config: every node against its group, unknown keys with did-you-mean, the cross-key rules;
``validate_eval_config`` / ``validate_train_config`` raise one ``ConfigError`` listing every problem."""

from __future__ import annotations

import difflib
import json
import typing
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from canopy_lit.errors import ConfigError
from canopy_lit.schema.groups import EVAL_GROUPS, TRAIN_GROUPS, Group
from canopy_lit.schema.schemas import (
    MISSING,
    BenchmarkOptionsSchema,
    EvalSchema,
    OptimizerSchema,
    TrainSchema,
)
from canopy_lit.schema.signatures import Key, reader_keys, target_keys
from canopy_lit.schema.values import check_value, rule_of

# --------------------------------------------------------------------------- checking


def node_value(node: Any, key: str) -> Any:
    """``node[key]`` resolved; ``MISSING`` when absent or not resolvable here (e.g. ``${hydra:...}``)."""
    if not isinstance(node, DictConfig) or key not in node:
        return MISSING
    try:
        value = node[key]
        if isinstance(value, (DictConfig, ListConfig)):
            return OmegaConf.to_container(value, resolve=True)
    except Exception:  # an interpolation only Hydra's runtime can resolve, or ???: not ours to judge
        return MISSING
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
    hints = typing.get_type_hints(schema, include_extras=True)
    return {f.name: Key(hints[f.name], {**rule_of(hints[f.name]), **f.metadata}, schema.__name__) for f in fields(schema)}


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
        found = target_keys(t, node)
        if found is None:
            return None, t
        keys.update({k: v for k, v in found.items() if k not in keys})
    for name in group.passed:
        keys.pop(name, None)
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
        value = node_value(node, name)  # MISSING: something inside resolves only at run time; its keys still count
        rule = rules.get(name, key.rule)
        if value is not MISSING and (problem := check_value(f"{prefix}{name}", value, key.hint, **rule)):
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
        value = node_value(node, name)
        if value is MISSING or OmegaConf.is_interpolation(node, name):
            continue
        key = ranges.get(name) or (keys or {}).get(name) or Key()
        problem = check_value(f"{prefix}{name}", value, key.hint, **key.rule)
        if problem:
            problems.append(problem)


def _check_top(cfg: DictConfig, schema: type, groups: Mapping[str, Group | None], problems: list[str]) -> None:
    """The top-level keys: ``schema``'s knobs and the group names (each group is checked on its own)."""
    _check_options(cfg, "", {**_schema_keys(schema), **{name: Key() for name in groups}}, schema, problems)


def raise_problems(problems: list[str]) -> None:
    if problems:
        raise ConfigError(list(dict.fromkeys(problems)))


def validate_eval_config(cfg: DictConfig) -> None:
    """Check an evaluate config (every key of every group: known, typed, in range) before any work.

    Raises:
        ConfigError: one line per problem, naming the key and the rule.
    """
    problems: list[str] = []
    _check_top(cfg, EvalSchema, EVAL_GROUPS, problems)
    method = str(node_value(cfg.get("method"), "name"))
    retrieves = node_value(cfg.get("method"), "retrieves") is not False
    # k / R: a retrieving method needs both >= 1; one that never retrieves may use 0 (and must, for R: below).
    least = 1 if retrieves else 0
    rules = {"retrieval": {"k": {"ge": least}}, "loop": {"max_rounds": {"ge": least}}}
    for name, group in EVAL_GROUPS.items():
        if group is not None:
            check_node(cfg.get(name), f"{name}.", group, problems, rules.get(name))
    _check_data_name(cfg.get("data"), problems)
    _check_index_options(cfg, problems)
    from canopy_lit.data.shards import shard_problems

    mode, modes = cfg.get("mode", "qa"), cfg.get("modes")
    if isinstance(modes, DictConfig) and isinstance(mode, str) and mode not in modes:
        guess = difflib.get_close_matches(mode, sorted(map(str, modes)), n=1)
        hint = f" (did you mean {guess[0]}?)" if guess else ""
        problems.append(f"mode must be one of {', '.join(map(str, modes))}, got {mode!r}{hint}; a mode of your own "
                        f"is a _target_ block under modes (+modes.{mode}=...)")  # fmt: skip
    elif (shard := node_value(cfg, "shard")) is not MISSING and isinstance(modes, DictConfig):
        runner = node_value(modes, str(mode))
        runner = runner.get("_target_") if isinstance(runner, dict) else None
        problems.extend(shard_problems(shard, mode, runner))
    if cfg.get("mode", "qa") == "qa":
        if retrieves:  # the surprising part of the k / R message: 0 is fine for another method
            why = f" (method={method} retrieves; only a method with method.retrieves=false may use 0)"
            problems = [p + why if p.startswith(("retrieval.k ", "loop.max_rounds ")) else p for p in problems]
        else:
            problems.extend(_rounds_of_a_closed_book(cfg, method))
    raise_problems(problems)


def _rounds_of_a_closed_book(cfg: DictConfig, method: str) -> list[str]:
    """A method that never retrieves must not run a retrieval round: its records would carry its name
    over retrieved evidence (the loop retrieves whenever R >= 1 and k >= 1)."""
    rounds, k = node_value(cfg.get("loop"), "max_rounds"), node_value(cfg.get("retrieval"), "k")
    if isinstance(rounds, int) and not isinstance(rounds, bool) and rounds > 0 and k != 0:
        return [
            f"loop.max_rounds must be 0 for method={method}, got {rounds} (method={method} never retrieves; "
            "method=vanilla is one retrieval round)"
        ]
    return []


def _check_data_name(data: Any, problems: list[str]) -> None:
    """``data.name`` is a registered benchmark, or a label of data that ``data.reader`` reads. Every shipped data
    config names its reader, so a label is a plain name; one that looks like a benchmark's name is a typo."""
    from canopy_lit.data.base import BENCHMARKS, resolve_reader

    name, reader = node_value(data, "name"), node_value(data, "reader")
    if isinstance(reader, str):
        try:
            resolve_reader(reader)
        except (ImportError, TypeError) as err:
            problems.append(f"data.reader: {err} (a registered benchmark or a dotted path to a reader)")
            return
    if not isinstance(name, str) or name.lower() in BENCHMARKS:
        return
    known = ", ".join(sorted(BENCHMARKS))
    if not isinstance(reader, str):
        problems.append(f"data.name must be one of {known}, got {name!r} "
                        "(or name its reader: data.reader=<registered name | dotted path>)")  # fmt: skip
    elif guess := difflib.get_close_matches(name.lower(), sorted(BENCHMARKS), n=1, cutoff=0.75):
        problems.append(f"data.name must be one of {known}, got {name!r} (did you mean {guess[0]}?); a label of "
                        "your own for data read by data.reader must not look like a benchmark's name")  # fmt: skip


def _check_index_options(cfg: DictConfig, problems: list[str]) -> None:
    """IVF-PQ splits each vector into pq_m sub-vectors: pq_m must divide the encoder's dimension, which is
    checked here from the backbone's config file rather than after the corpus is encoded."""
    retrieval = cfg.get("retrieval")
    options = node_value(retrieval, "index_options")
    if node_value(retrieval, "index") != "ivfpq" or not isinstance(options, dict):
        return
    pq_m = options.get("pq_m", 64)
    dim = embedding_dim(str(node_value(cfg.get("encoder"), "backbone")))
    if isinstance(pq_m, int) and not isinstance(pq_m, bool) and pq_m >= 1 and dim and dim % pq_m:
        nearest = sorted(sorted((m for m in range(1, dim + 1) if dim % m == 0), key=lambda m: abs(m - pq_m))[:2])
        problems.append(
            f"retrieval.index_options.pq_m must divide the embedding dim {dim} of encoder "
            f"{node_value(cfg.get('encoder'), 'backbone')}, got {pq_m} (nearest that do: {nearest[0]}, {nearest[1]})"
        )


def embedding_dim(backbone: str) -> int | None:
    """The embedding dimension of an encoder backbone from its local config file (None: not known here)."""
    from canopy_lit import assets
    from canopy_lit.encoders.qwen3vl import qwen3vl_backbone

    asset = text_asset(backbone)
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


def text_asset(backbone: str) -> str | None:
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
    raise_problems(problems)


def _test_problems(cfg: DictConfig) -> list[str]:
    """``model.test_scorers`` names known scorers, and ``train=false`` (no fit) has something to measure: f0, or
    fθ when ``encoder.adapter`` names a trained adapter."""
    scorers = node_value(cfg.get("model"), "test_scorers")
    scorers = list(scorers) if isinstance(scorers, (list, ListConfig)) else ["ftheta", "f0"]
    problems = []
    unknown = [s for s in scorers if s not in ("ftheta", "f0")]
    if unknown or not scorers:
        problems.append(f"model.test_scorers={scorers}: a non-empty list of ftheta and f0")
    if cfg.get("train", True) is False:
        if not cfg.get("test", True):
            problems.append("train=false test=false: nothing to run (train=false runs the test pass only)")
        elif "ftheta" in scorers and node_value(cfg.get("encoder"), "adapter") in (None, MISSING, ""):
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
    devices, nodes = node_value(trainer, "devices"), node_value(trainer, "num_nodes")
    problems = []
    if devices == -1 and node_value(trainer, "accelerator") == "cpu":
        problems.append("trainer.devices=-1 (every GPU) needs trainer.accelerator=gpu; on a CPU give the number "
                        "of processes, e.g. trainer.devices=2")
    if isinstance(nodes, int) and nodes > 1 and _is_single_device(node_value(trainer, "strategy")):
        problems.append(f"trainer.num_nodes={nodes} needs a distributed strategy (trainer=ddp), got "
                        "trainer.strategy=single_device")
    return problems


# --------------------------------------------------------------------------- option blocks


def _index_options(node: DictConfig, block: DictConfig, prefix: str, problems: list[str]) -> None:
    keys = target_keys("canopy_lit.retrieval.index.FaissIndex", node) or {}
    _check_options(block, prefix, {k: v for k, v in keys.items() if k not in ("dim", "kind")}, None, problems)


def _bm25_options(node: DictConfig, block: DictConfig, prefix: str, problems: list[str]) -> None:
    keys = target_keys("canopy_lit.retrieval.bm25.build_bm25_retriever", node)
    _check_options(block, prefix, keys, None, problems)


def _data_options(node: DictConfig, block: DictConfig, prefix: str, problems: list[str]) -> None:
    name, reader = node_value(node, "name"), node_value(node, "reader")
    keys = reader_keys(name, reader if isinstance(reader, str) else None) if isinstance(name, str) else None
    _check_options(block, prefix, keys, None, problems)


def _optimizer(node: DictConfig, block: DictConfig, prefix: str, problems: list[str]) -> None:
    check_node(block, prefix, Group(OptimizerSchema), problems)


def _benchmark_options(node: DictConfig, block: DictConfig, prefix: str, problems: list[str]) -> None:
    for name in map(str, block):
        if (options := _child(block, name)) is not None:
            reader = node_value(options, "reader")
            keys = reader_keys(name, reader if isinstance(reader, str) else None)
            if keys is not None:
                keys |= _schema_keys(BenchmarkOptionsSchema)
            _check_options(options, f"{prefix}{name}.", keys, BenchmarkOptionsSchema, problems)


# Option blocks passed whole to another callable: (owner, key) -> the check of that callable's keys.
_NESTED: dict[tuple[str, str], Callable[[DictConfig, DictConfig, str, list[str]], None]] = {
    ("canopy_lit.retrieval.build_retriever", "index_options"): _index_options,
    ("canopy_lit.retrieval.hybrid.build_hybrid_retriever", "bm25"): _bm25_options,
    ("canopy_lit.data.splits.load_split", "options"): _data_options,
    ("canopy_lit.data.datamodule.PreferenceDataModule", "options"): _benchmark_options,
    ("canopy_lit.training.NodeEncoderModule", "optimizer"): _optimizer,
}
