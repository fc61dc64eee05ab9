"""Region trees, one builder per modality (METHOD.md §1.1 step 2).

Add a modality: subclass ``TreeBuilder`` (leaves + two renderers) and register
it in a ``Hierarchy``; tree shape and refinement need no change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from annotated_types import Ge

from canopy_lit.hierarchy.base import (
    ELISION,
    Frame,
    NodeInput,
    TokenCounter,
    TreeBuilder,
    describer_fingerprint,
    short_hash,
)
from canopy_lit.hierarchy.image import ImageTreeBuilder
from canopy_lit.hierarchy.table import TableTreeBuilder
from canopy_lit.hierarchy.text import TextTreeBuilder, split_sentences
from canopy_lit.hierarchy.video import VideoTreeBuilder, decode_frames, sample_times, video_duration
from canopy_lit.types import Item, Modality, Tree


class Hierarchy:
    """Dispatches items to their modality's builder; one object configures all trees of a run.

    Args:
        branching: branching factor B (>= 2) of every tree.
        builders: optional overrides, e.g. a ``VideoTreeBuilder`` with a describer.
    """

    def __init__(self, branching: Annotated[int, Ge(2)] = 2, builders: Sequence[TreeBuilder] | None = None) -> None:
        if branching < 2:
            raise ValueError(f"tree.branching must be >= 2, got {branching}")
        self.branching = branching
        self.builders: dict[Modality, TreeBuilder] = {
            b.modality: b for b in (TextTreeBuilder(), TableTreeBuilder(), ImageTreeBuilder(), VideoTreeBuilder())
        }
        for b in builders or ():
            self.builders[b.modality] = b

    @property
    def fingerprint(self) -> str:
        """Renderer identity: a hash of every builder's ``render_spec``, by modality.

        The branching factor is left out on purpose: a node renders from its leaf range only,
        so trees of different B share node embeddings.
        """
        return "render-" + short_hash({m.value: b.render_spec for m, b in sorted(self.builders.items())})

    def builder(self, modality: Modality) -> TreeBuilder:
        try:
            return self.builders[Modality(modality)]
        except KeyError as err:
            raise KeyError(f"no tree builder registered for modality {modality!r}") from err

    def build(self, item: Item) -> Tree:
        return self.builder(item.modality).build(item, self.branching)

    def node_input(self, tree: Tree, node_id: int) -> NodeInput:
        return self.builder(tree.item.modality).node_input(tree, node_id)

    def node_spans(self, tree: Tree) -> tuple[str, list[list[tuple[int, int]]]]:
        """The root's rendering and each node's character ranges of it (``TreeBuilder.node_spans``)."""
        return self.builder(tree.item.modality).node_spans(tree)

    def node_text(self, tree: Tree, node_id: int) -> str:
        return self.node_input(tree, node_id).text

    def evidence_text(self, tree: Tree, node_ids: Sequence[int]) -> str:
        return self.builder(tree.item.modality).evidence_text(tree, node_ids)


__all__ = [
    "ELISION",
    "Frame",
    "Hierarchy",
    "ImageTreeBuilder",
    "NodeInput",
    "TableTreeBuilder",
    "TextTreeBuilder",
    "TokenCounter",
    "TreeBuilder",
    "VideoTreeBuilder",
    "decode_frames",
    "describer_fingerprint",
    "sample_times",
    "short_hash",
    "split_sentences",
    "video_duration",
]
