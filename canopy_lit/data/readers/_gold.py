"""Gold spans -> gold leaf indices, on exactly the leaves the tree builders produce.

Leaves do not depend on the branching factor, so gold computed here holds for
every B. Text spans are located with ``str.find`` (then a case- and
whitespace-insensitive fallback, for tokenised sources such as OTT-QA) and mapped
from character offsets to the sentence leaves that overlap them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.types import Item, Leaf, Modality

_HIERARCHY = Hierarchy()


def leaves_of(item: Item, cache: dict[str, list[Leaf]] | None = None) -> list[Leaf]:
    """The item's leaves as its tree builder makes them (B-independent).

    ``cache`` (item id -> leaves) lets a reader split each item once: sentence
    splitting dominates reading time when many questions share a passage.
    """
    if cache is None:
        return _HIERARCHY.builder(item.modality).leaves(item)
    leaves = cache.get(item.id)
    if leaves is None:
        leaves = cache[item.id] = _HIERARCHY.builder(item.modality).leaves(item)
    return leaves


@lru_cache(maxsize=65536)
def _squeezed(text: str) -> tuple[str, tuple[int, ...]]:
    """Casefolded ``text`` without whitespace, plus the original index of every kept character."""
    chars, index = [], []
    for i, ch in enumerate(text):
        if not ch.isspace():
            low = ch.lower()
            chars.append(low)
            index.extend([i] * len(low))
    return "".join(chars), tuple(index)


def find_span(text: str, needle: str, start: int = 0) -> tuple[int, int] | None:
    """Char span ``[s, e)`` of the first occurrence of ``needle`` in ``text`` at or after ``start``.

    Exact ``str.find`` first; else ignoring case and whitespace (so "La Plante ." in
    a tokenised passage matches "La Plante."). Empty needles never match.
    """
    needle = needle.strip()
    if not needle:
        return None
    s = text.find(needle, start)
    if s >= 0:
        return s, s + len(needle)
    hay, index = _squeezed(text)
    pin, _ = _squeezed(needle)
    if not pin:
        return None
    lo = next((k for k, i in enumerate(index) if i >= start), len(index))
    k = hay.find(pin, lo)
    if k < 0:
        return None
    return index[k], index[k + len(pin) - 1] + 1


def leaves_overlapping(leaves: Sequence[Leaf], s: int, e: int) -> list[int]:
    """Indices of the text leaves whose character range overlaps ``[s, e)``."""
    return [leaf.index for leaf in leaves if leaf.char_start < e and leaf.char_end > s]


def locate_sentences(
    item: Item, needles: Iterable[str], cache: dict[str, list[Leaf]] | None = None
) -> list[int]:
    """Sentence leaves of a text item holding the first occurrence of any needle (sorted, unique)."""
    if item.modality != Modality.TEXT:
        raise ValueError(f"item {item.id!r} is not text")
    leaves = leaves_of(item, cache)
    text = item.text or ""
    out: set[int] = set()
    for needle in needles:
        span = find_span(text, str(needle))
        if span is not None:
            out.update(leaves_overlapping(leaves, *span))
    return sorted(out)


def clip_leaves(leaves: Sequence[Leaf], t0: float, t1: float) -> list[int]:
    """Video leaves (clips ``[t_start, t_end)``) overlapping the time window ``[t0, t1]``.

    A point reference (``t0 == t1``) selects the clip that contains it.
    """
    if t1 < t0:
        t0, t1 = t1, t0
    if t1 == t0:
        return [
            leaf.index
            for leaf in leaves
            if leaf.t_start <= t0 < leaf.t_end or (t0 == leaf.t_end == leaves[-1].t_end)
        ]
    return [leaf.index for leaf in leaves if leaf.t_start < t1 and leaf.t_end > t0]


_NUM = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def numbers_in(text: str) -> list[float]:
    """Numeric values written in ``text`` ("$ 1,452.4" -> 1452.4, "(3.5)%" -> 3.5)."""
    out = []
    for m in _NUM.finditer(str(text)):
        try:
            out.append(abs(float(m.group().replace(",", ""))))
        except ValueError:
            continue
    return out
