"""Gold spans -> gold leaf indices, on exactly the leaves the tree builders produce.

Leaves do not depend on the branching factor, so gold computed here holds for
every B. Text spans are located with ``str.find`` (then a case- and
whitespace-insensitive fallback, for tokenised sources such as OTT-QA) and mapped
from character offsets to the sentence leaves that overlap them.

Public (re-exported by ``canopy_lit.data`` and ``canopy_lit.data.readers``): ``gold_leaves`` (any modality,
any span kind, raises on a span it cannot place), ``locate_sentences`` (the sentences holding any of
several candidate strings, e.g. answers), ``leaves_of``, ``find_span`` and ``clip_leaves``.
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


GoldSpan = str | int | tuple[float, float] | Sequence[float]


def gold_leaves(item: Item, spans: Iterable[GoldSpan], cache: dict[str, list[Leaf]] | None = None) -> list[int]:
    """Leaf indices of ``item`` holding each gold span, on the leaves its tree builder makes (sorted, unique).

    Leaves do not depend on the branching factor, so the result is ``Question.gold[item.id]`` for every B.
    A span is:

    - a string: text items -> the sentences overlapping its first occurrence (exact, else ignoring case
      and whitespace); tables -> every row with a cell holding it;
    - a pair ``(start, end)``: text -> character offsets ``[start, end)`` into ``item.text`` (for pre-split
      ``sentences``, their join with single spaces); video -> a time window in seconds of the file;
    - an int: a leaf index (a sentence, a table row, a video clip; 0 for an image).

    Example::

        item = Item("p1", "text", title="Paris", text="Paris is in France. It has 2.1 million people.")
        gold_leaves(item, ["2.1 million"])   # [1]
        gold_leaves(item, [(0, 5)])          # [0]

    Raises:
        ValueError: a span that matches no leaf, or the wrong kind for the item's modality (the message
            names the item and the span).
    """
    leaves = leaves_of(item, cache)
    out: set[int] = set()
    for span in spans:
        out.update(_span_leaves(item, leaves, span))
    return sorted(out)


def _span_leaves(item: Item, leaves: Sequence[Leaf], span: GoldSpan) -> list[int]:
    modality = item.modality
    where = f"item {item.id!r} ({modality.value})"
    if isinstance(span, bool):
        raise ValueError(f"{where}: a gold span is a string, an int or a [start, end] pair, got {span!r}")
    if isinstance(span, int):
        if not 0 <= span < len(leaves):
            raise ValueError(f"{where}: leaf index {span} out of range (the item has {len(leaves)} leaves)")
        return [span]
    if isinstance(span, str):
        if modality == Modality.TEXT:
            found = find_span(item.text or "", span)
            hit = leaves_overlapping(leaves, *found) if found is not None else []
        elif modality == Modality.TABLE:
            hit = [leaf.index for leaf in leaves if find_span(leaf.text, span) is not None]
        else:
            raise ValueError(f"{where}: text spans locate text or table leaves; give leaf indices or times")
        if not hit:
            raise ValueError(f"{where}: span {span!r} not found")
        return hit
    pair = list(span) if isinstance(span, Sequence) else []
    if len(pair) != 2 or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in pair):
        raise ValueError(f"{where}: a gold span is a string, an int or a [start, end] pair, got {span!r}")
    start, end = pair
    if modality == Modality.TEXT:
        n = len(item.text or "")
        if not (isinstance(start, int) and isinstance(end, int) and 0 <= start < end <= n):
            raise ValueError(f"{where}: character offsets {pair} must be integers with 0 <= start < end <= {n}")
        hit = leaves_overlapping(leaves, start, end)
        if not hit:
            raise ValueError(f"{where}: character offsets {pair} cover no sentence (whitespace only)")
        return hit
    if modality == Modality.VIDEO:
        hit = clip_leaves(leaves, float(start), float(end))
        if not hit:
            t0, t1 = leaves[0].t_start, leaves[-1].t_end
            raise ValueError(f"{where}: time window {pair} lies outside the video's [{t0:g}, {t1:g}] s")
        return hit
    raise ValueError(f"{where}: [start, end] pairs are character offsets (text) or seconds (video)")


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
