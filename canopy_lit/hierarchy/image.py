"""Image items: a single node (no refinement inside an image, METHOD.md §1.1 step 2)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from canopy_lit.hierarchy.base import Frame, NodeInput, TreeBuilder, describer_fingerprint
from canopy_lit.types import Item, Leaf, Modality, Tree


class ImageTreeBuilder(TreeBuilder):
    """One node per image; its text is title + caption (+ the describer's text, the CPU visual path).

    Args:
        describer: optional image -> text function, e.g. ``canopy_lit.visual.FrameDescriber``.
    """

    modality = Modality.IMAGE

    def __init__(self, describer: Callable[[Frame], str] | None = None) -> None:
        self.describer = describer

    def render_options(self) -> dict[str, Any]:
        return {"describer": describer_fingerprint(self.describer)}

    def leaves(self, item: Item) -> list[Leaf]:
        return [Leaf(0, item.title)]

    def _parts(self, item: Item) -> list[str]:
        assert item.image is not None
        parts = [item.meta.get("caption", "")]
        if self.describer is not None:
            parts.append(self.describer(Frame(item.image)))
        return [p for p in parts if p]

    def node_input(self, tree: Tree, node_id: int) -> NodeInput:
        assert tree.item.image is not None
        text = " ".join(x for x in (tree.item.title, *self._parts(tree.item)) if x)
        return NodeInput(text, [Frame(tree.item.image)])

    def evidence_text(self, tree: Tree, node_ids: Sequence[int]) -> str:
        parts = self._parts(tree.item)
        return f"[image] {tree.item.title}" + (f": {'; '.join(parts)}" if parts else "")
