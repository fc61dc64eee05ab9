"""Field checks of the custom record format: each bad value is one ``RecordError`` naming its field."""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from typing import Any

from canopy_lit.data.readers._io import RecordError


def field_error(field: str, message: str) -> RecordError:
    """A ``RecordError`` naming the field (``items[2].table.rows[0]``) and what is wrong with it."""
    return RecordError(f"{field}: {message}" if field else message)


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """`` (did you mean 'answers'?)`` for the closest known key, "" when none is close."""
    hit = difflib.get_close_matches(key, list(known), n=1)
    return f" (did you mean {hit[0]!r}?)" if hit else ""


def check_keys(obj: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
    """Every key of ``obj`` is one of ``known``, else a ``RecordError`` naming it with the nearest known key."""
    # Arrow fills fields a record lacks with None: only keys with a value are the record's own.
    for key in obj:
        if key not in known and obj[key] is not None:
            raise field_error(
                where + str(key), f"unknown field{did_you_mean(str(key), known)}; known: {', '.join(known)}"
            )


def as_string(value: Any, field: str, allow_empty: bool = False) -> str:
    """A string field (numbers are taken as their text; NaN, lists, bools are refused; empty only if allowed)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise field_error(field, f"expected a string, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):  # a dataset's NaN is no answer 'nan'
        raise field_error(field, f"expected a string, got {value!r}")
    text = str(value)
    if not allow_empty and not text.strip():
        raise field_error(field, "is empty")
    return text


def as_strings(value: Any, field: str) -> list[str]:
    """A list of strings (entries may be empty)."""
    if not isinstance(value, list):
        raise field_error(field, f"expected a list of strings, got {type(value).__name__}")
    return [as_string(v, f"{field}[{i}]", allow_empty=True) for i, v in enumerate(value)]


def as_number(value: Any, field: str) -> float:
    """A finite number (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise field_error(field, f"expected a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise field_error(field, f"expected a finite number, got {value!r}")
    return float(value)
