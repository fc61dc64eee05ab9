"""The tree-builder interface: a modality = how an item splits into leaves + how a node renders."""

from __future__ import annotations

import hashlib
import json
import types
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from canopy_lit.types import Frame as Frame  # re-exported: NodeInput and Frame live in types.py
from canopy_lit.types import Item, Leaf, Modality, Tree
from canopy_lit.types import NodeInput as NodeInput

TokenCounter = Callable[[str], int]
ELISION = "…"


def elided(text: str, end: int) -> str:
    """``text`` cut after its first ``end`` characters, with the renderer's elision mark."""
    return f"{text[:end].rstrip()} {ELISION}"


def cut_prefix(text: str, head: int, budget: int, count_tokens: TokenCounter) -> int | None:
    """The longest cut ``end`` > ``head`` such that ``elided(text, end)`` fits ``budget`` tokens, at a word
    boundary where the fitting prefix has one; None when no content beyond the first ``head`` characters
    (a title or header) fits.

    An exponential then binary search over characters: no tokenizer call reads much more than the budget's
    worth of a huge text.
    """
    if head >= len(text):
        return None  # a renderer that ignores regions (an image): nothing to cut

    def fits(n: int) -> bool:
        return count_tokens(elided(text, n)) <= budget

    lo, step = head, max(64, 8 * budget)
    hi = min(len(text), head + step)
    while hi < len(text) and fits(hi):
        lo, step = hi, 2 * step
        hi = min(len(text), head + step)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    if lo < len(text) and not text[lo].isspace():  # lo splits a word: end at the word before
        space = max(text.rfind(" ", head, lo), text.rfind("\n", head, lo))
        lo = space if space > head and fits(space) else lo
    if not text[head:lo].strip() or not fits(lo):
        return None
    return lo


def describer_fingerprint(describer: Any) -> str | None:
    """Identity of a frame describer: its class (or function) name, ``version`` and model settings.

    Uses the describer's own ``fingerprint`` or ``model_key`` (``FrameDescriber``: weights, top-k,
    OCR settings) when it has one; a plain function is known by its qualified name only.
    """
    if describer is None:
        return None
    owner = describer if isinstance(describer, types.FunctionType | types.MethodType) else type(describer)
    parts = [f"{owner.__module__}.{owner.__qualname__}"]
    for attr in ("version", "fingerprint", "model_key"):
        value = getattr(describer, attr, None)
        if value is not None and not callable(value):
            parts.append(f"{attr}={value}")
    return "|".join(parts)


def short_hash(payload: Any) -> str:
    """16 hex digits of sha256 over canonical JSON (stable across processes and machines)."""
    text = json.dumps(payload, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class TreeBuilder(ABC):
    """Builds the region tree of one modality and renders its nodes.

    Subclasses implement ``leaves`` (the minimal regions, in order) and the two
    renderers; tree shape (contiguous near-equal B-way splits) is shared.
    A builder whose rendering has knobs lists them in ``render_options`` so that
    ``render_spec`` (a key of the node-embedding cache) changes with them; bump
    ``render_version`` when ``leaves`` or ``node_input`` change format.
    """

    modality: Modality
    render_version: int = 1

    def render_options(self) -> dict[str, Any]:
        """Settings that change ``leaves`` or ``node_input`` (none by default)."""
        return {}

    @property
    def render_spec(self) -> dict[str, Any]:
        """Everything that decides what a node renders to: class, version and options."""
        cls = type(self)
        return {
            "builder": f"{cls.__module__}.{cls.__qualname__}",
            "version": self.render_version,
            **self.render_options(),
        }

    @property
    def fingerprint(self) -> str:
        """Short stable hash of ``render_spec``."""
        return short_hash(self.render_spec)

    def build(self, item: Item, branching: int = 2) -> Tree:
        if item.modality != self.modality:
            raise ValueError(f"{type(self).__name__} builds {self.modality.value} trees, got {item.modality.value}")
        return Tree(item, self.leaves(item), branching)

    @abstractmethod
    def leaves(self, item: Item) -> list[Leaf]:
        """The item's minimal regions in original order."""

    @abstractmethod
    def node_input(self, tree: Tree, node_id: int) -> NodeInput:
        """Encoder input for one node (always the original regions, never a summary)."""

    @abstractmethod
    def evidence_text(self, tree: Tree, node_ids: Sequence[int]) -> str:
        """Reader evidence for the retained nodes of one item, in original order, gaps elided."""

    def node_spans(self, tree: Tree) -> tuple[str, list[list[tuple[int, int]]]]:
        """The root's rendering and, per node, the character ranges of it that make up that node's own
        rendering (late chunking: every node pooled from one whole-item forward).

        Joining ``text[s:e]`` over a node's ranges gives ``node_input(tree, node).text``. Builders whose
        nodes are not text (images, video frames) have none.
        """
        raise NotImplementedError(
            f"{type(self).__name__} ({self.modality.value} items) has no text spans: encoder.node_pooling=late "
            "works on text and table items only"
        )


def merged_ranges(tree: Tree, node_ids: Sequence[int]) -> list[tuple[int, int]]:
    """Leaf ranges of the retained nodes, sorted and with touching ranges merged."""
    ranges = sorted((int(tree.starts[i]), int(tree.ends[i])) for i in node_ids)
    out: list[tuple[int, int]] = []
    for s, e in ranges:
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def with_elisions(tree: Tree, node_ids: Sequence[int], render_range: Callable[[int, int], str], sep: str) -> str:
    """Join rendered kept ranges, marking every dropped stretch (start, middle, end) with an ellipsis."""
    parts: list[str] = []
    prev_end = 0
    for s, e in merged_ranges(tree, node_ids):
        if s > prev_end:
            parts.append(ELISION)
        parts.append(render_range(s, e))
        prev_end = e
    if prev_end < tree.n_leaves:
        parts.append(ELISION)
    return sep.join(parts)
