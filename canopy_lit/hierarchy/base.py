"""The tree-builder interface: a modality = how an item splits into leaves + how a node renders."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from canopy_lit.types import Item, Leaf, Modality, Tree

TokenCounter = Callable[[str], int]
ELISION = "…"


@dataclass(frozen=True)
class Frame:
    """A visual input: an image file, or one frame of a video at ``t`` seconds."""

    path: str
    t: float | None = None


@dataclass
class NodeInput:
    """What an encoder sees for one node: text, plus frames/images for visual nodes."""

    text: str
    frames: list[Frame] = field(default_factory=list)


class TreeBuilder(ABC):
    """Builds the region tree of one modality and renders its nodes.

    Subclasses implement ``leaves`` (the minimal regions, in order) and the two
    renderers; tree shape (contiguous near-equal B-way splits) is shared.
    """

    modality: Modality

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
