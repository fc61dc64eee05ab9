"""What a question's evidence holds: its answer (``answer_found``) and its gold leaves and items.

Answers are looked up as SQuAD-normalised tokens; bare numbers are compared as numbers, so
"1,234.5" = "1234.5", "(5.3)" = "-5.3", "12.5%" = "12.5" (``canopy_lit.numbers.as_number``). TAT-QA
multi-span answers need every span, arithmetic answers every derivation operand (the ones the reader's gold
uses: ``Question.meta["operands"]``, else ``canopy_lit.operands.formula_operands`` of the derivation), count
answers every counted cell; yes/no answers cannot be looked up (``answer_needles`` returns None).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from canopy_lit.data.readers._gold import numbers_in
from canopy_lit.hierarchy import ELISION, Hierarchy
from canopy_lit.metrics import normalize_answer
from canopy_lit.numbers import as_number
from canopy_lit.operands import formula_operands
from canopy_lit.reader.budget import ReaderBlock
from canopy_lit.types import Question

__all__ = [
    "EvidenceText",
    "answer_found",
    "answer_needles",
    "content_text",
    "gold_leaf_counts",
    "item_recall",
    "kept_leaves",
]

_YES_NO = {"yes", "no"}


def answer_needles(question: Question) -> list[list[str]] | None:
    """What the evidence must contain: alternatives, each a list of strings that must all occur.

    Returns None when the answer cannot be looked up in text (yes/no, no answer, an arithmetic
    answer without operands).
    """
    answers = [a for a in question.answers if str(a).strip()]
    if not answers:
        return None
    kind = str(question.meta.get("answer_type") or "")
    derivation = str(question.meta.get("derivation") or "")
    if kind == "arithmetic":  # the computed value is not in the evidence; its operands are
        # The reader's operands (checked against the document's numbers), else the derivation's own.
        recorded = question.meta.get("operands")
        operands = [str(x) for x in recorded] if isinstance(recorded, list) else formula_operands(derivation)
        return [operands] if operands else None
    if kind == "count":  # the counted cells, "a##b##c" (or the one cell)
        cells = [c.strip() for c in derivation.split("##") if c.strip()]
        return [cells] if cells else None
    if kind == "multi-span":
        return [answers]
    if all(normalize_answer(a) in _YES_NO for a in answers):
        return None
    return [[a] for a in answers]


@dataclass
class EvidenceText:
    """Evidence prepared once for many look-ups: normalised tokens and the numbers written in it."""

    tokens: list[str]
    numbers: list[float]

    @classmethod
    def of(cls, text: str) -> EvidenceText:
        return cls(normalize_answer(text).split(), numbers_in(text))

    def contains(self, needle: str) -> bool:
        """Bare numbers by value (isclose), anything else as a contiguous run of normalised tokens."""
        value = as_number(needle)
        if value is not None:
            return any(math.isclose(value, x, rel_tol=1e-9, abs_tol=1e-9) for x in self.numbers)
        want = normalize_answer(needle).split()
        n = len(want)
        if not n:
            return False
        toks = self.tokens
        first = want[0]
        return any(toks[i] == first and toks[i : i + n] == want for i in range(len(toks) - n + 1))


def answer_found(needles: list[list[str]] | None, text: str | EvidenceText) -> bool | None:
    """Does ``text`` hold every string of at least one alternative? None when not measurable."""
    if needles is None:
        return None
    ev = text if isinstance(text, EvidenceText) else EvidenceText.of(text)
    return any(all(ev.contains(s) for s in alt) for alt in needles if alt)


def content_text(hierarchy: Hierarchy, block: ReaderBlock) -> str:
    """What the reader gets of an item's regions: its block without the item's title, table caption and
    column header, which reach the reader with any region of the item (CANOPY keeps one of every
    retrieved item, flat and extractive may keep none)."""
    tree = block.evidence.tree
    item = tree.item
    if block.evidence.text is not None:  # a compressed block: the text after the head it passes through
        if block.cap == "dropped" or not block.text:
            return ""
        head = hierarchy.evidence_text(tree, []).removesuffix(ELISION)
        return block.text[len(head):] if block.text.startswith(head) else block.text
    if block.cap == "dropped" or (not block.node_ids and block.cut_leaf is None):
        return ""
    bare = copy.copy(tree)
    bare.item = dataclasses.replace(
        item, title="", table=dataclasses.replace(item.table, header=[], caption="") if item.table else None
    )
    if block.cut_leaf is None:
        return hierarchy.evidence_text(bare, block.node_ids)
    # Cut at a token boundary: the renderings with and without the header share the cut-off tail.
    tail = len(hierarchy.evidence_text(tree, [block.cut_leaf])) - block.cut_chars
    text = hierarchy.evidence_text(bare, [block.cut_leaf])
    return text[: max(0, len(text) - tail)]


# --- gold leaves and items ------------------------------------------------------------------------


def kept_leaves(leaf_ranges: Sequence[Sequence[int]]) -> set[int]:
    """Leaf indices covered by ``[start, end)`` ranges."""
    return {leaf for s, e in leaf_ranges for leaf in range(int(s), int(e))}


def gold_leaf_counts(
    gold: Mapping[str, Sequence[int]], kept: Mapping[str, Sequence[Sequence[int]]]
) -> tuple[int, int]:
    """(gold leaves kept, gold leaves) over the retrieved gold items with located gold.

    Args:
        gold: item id -> gold leaf indices (``Question.gold``; [] = not located, skipped).
        kept: retrieved item id -> kept leaf ranges.
    """
    hit = total = 0
    for iid, ranges in kept.items():
        leaves = set(gold.get(iid) or ())
        if leaves:
            total += len(leaves)
            hit += len(leaves & kept_leaves(ranges))
    return hit, total


def item_recall(gold_items: Sequence[str], retrieved: Sequence[str]) -> float | None:
    """Share of gold items among the retrieved ones; None without gold items."""
    if not gold_items:
        return None
    got = set(retrieved)
    return sum(i in got for i in gold_items) / len(gold_items)
