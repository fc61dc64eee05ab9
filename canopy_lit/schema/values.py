"""One value against a type hint and a rule (``check_value``), and the phrase that names what was expected."""

from __future__ import annotations

import collections.abc as abc
import inspect
import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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


def rule_of(hint: Any) -> dict[str, Any]:
    """The range a type hint declares with ``Annotated`` metadata (``annotated_types``: ``Ge``, ``Gt``, ``Le``,
    ``Lt``, ``Interval``), e.g. ``Annotated[int, Ge(1)] | None`` -> ``{"ge": 1}``: the constructor that takes a
    value owns its range, and the config check reads it from there."""
    rule: dict[str, Any] = {}
    stack = [hint]
    while stack:
        h = stack.pop()
        origin = typing.get_origin(h)
        if origin in (typing.Union, types.UnionType):
            stack.extend(typing.get_args(h))
        elif origin is typing.Annotated:
            for meta in typing.get_args(h)[1:]:
                rule.update({name: v for name in ("ge", "gt", "le", "lt") if (v := getattr(meta, name, None)) is not None})
    return rule


def _is_none(hint: Any) -> bool:
    return hint is None or hint is type(None)


def _conforms(hint: Any, value: Any) -> bool:
    """Whether a config value (plain Python, resolved) fits a type hint; what cannot be judged here passes."""
    if hint is Any or hint is inspect.Parameter.empty or isinstance(hint, (str, typing.TypeVar)):
        return True
    if typing.get_origin(hint) is typing.Annotated:  # the type; its range is checked by the rule
        return _conforms(typing.get_args(hint)[0], value)
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
    # 1.0 as 1: typing caches Annotated[float, Le(1)] and Annotated[float, Le(1.0)] as one object (1 == 1.0)
    shown = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in rule.items() if k != "choices"}
    bounds = [f"{op} {shown[key]}" for key, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")) if key in rule]
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
