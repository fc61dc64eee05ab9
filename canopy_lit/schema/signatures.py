"""The keys a ``_target_`` takes, typed by its signature (``**kwargs`` followed to where they go), and the
option blocks typed by the class or reader they are passed to."""

from __future__ import annotations

import functools
import inspect
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from canopy_lit.dotted import locate
from canopy_lit.schema.values import rule_of

# --------------------------------------------------------------------------- signatures


@dataclass(frozen=True)
class Key:
    """One accepted key: its type hint, its range rule, and the callable it is an argument of."""

    hint: Any = Any
    rule: Mapping[str, Any] = field(default_factory=dict)
    owner: str = ""


def import_target(target: str) -> Any:
    """The object a dotted path names (``module.attr.attr``), or None when it cannot be imported here."""
    try:
        return locate(target)
    except ImportError:
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


def target_keys(target: str | Callable[..., Any], node: DictConfig) -> dict[str, Key] | None:
    """The keyword arguments a target accepts, ``**kwargs`` followed; None when they cannot be known."""
    name = target if isinstance(target, str) else f"{target.__module__}.{target.__qualname__}"
    obj = import_target(target) if isinstance(target, str) else target
    found = _signature_keys(obj) if obj is not None else None
    if found is None:
        return None
    hints, var_kw = found
    keys = {k: Key(h, rule_of(h), name) for k, h in hints.items()}
    if var_kw:
        if name not in _KWARGS_GO_TO:
            return None
        passed_on = target_keys(_KWARGS_GO_TO[name](node), node)
        if passed_on is None:
            return None
        keys = {**passed_on, **keys}
    return keys


def reader_keys(benchmark: str, reader: Any = None) -> dict[str, Key] | None:
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
        found = target_keys(reader, OmegaConf.create({}))
        if found is None:
            return None
        keys.update(found)
    named, _ = _signature_keys(load_benchmark) or ({}, True)  # its **options are the reader's, above
    keys.update({k: Key(h, rule_of(h), "load_benchmark") for k, h in named.items()})
    for positional in ("name", "path"):
        keys.pop(positional, None)
    return keys
