"""Text items: leaves are sentences (blingfire splitter), with character offsets into the original text."""

from __future__ import annotations

from collections.abc import Sequence

import blingfire

from canopy_lit.hierarchy.base import NodeInput, TreeBuilder, with_elisions
from canopy_lit.types import Item, Leaf, Modality, Tree


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Sentence spans ``[start, end)`` of ``text`` (whitespace-only text -> no spans)."""
    if not text.strip():
        return []
    _, offsets = blingfire.text_to_sentences_and_offsets(text)
    return [(int(s), int(e)) for s, e in offsets if text[s:e].strip()]


class TextTreeBuilder(TreeBuilder):
    """Sentence leaves; items that arrive pre-split (``Item.sentences``) keep their sentences."""

    modality = Modality.TEXT

    def leaves(self, item: Item) -> list[Leaf]:
        if item.sentences is not None:
            # Offsets into " ".join(sentences), which is how Item builds ``text`` for pre-split items.
            leaves, pos = [], 0
            for i, sent in enumerate(item.sentences):
                leaves.append(Leaf(i, sent, pos, pos + len(sent)))
                pos += len(sent) + 1
            return leaves or [Leaf(0, "", 0, 0)]
        text = item.text or ""
        spans = split_sentences(text) or [(0, len(text))]
        return [Leaf(i, text[s:e], s, e) for i, (s, e) in enumerate(spans)]

    @staticmethod
    def _span(tree: Tree, start: int, end: int) -> str:
        if tree.item.sentences is not None:
            return " ".join(leaf.text for leaf in tree.leaves[start:end])
        text = tree.item.text or ""
        return text[tree.leaves[start].char_start : tree.leaves[end - 1].char_end]

    def node_input(self, tree: Tree, node_id: int) -> NodeInput:
        body = self._span(tree, int(tree.starts[node_id]), int(tree.ends[node_id]))
        title = tree.item.title
        return NodeInput(f"{title}: {body}" if title else body)

    def node_spans(self, tree: Tree) -> tuple[str, list[list[tuple[int, int]]]]:
        """Root text ``title: body``; a node is the title prefix plus its own sentences' stretch of the body."""
        root = self.node_input(tree, 0).text
        prefix = len(f"{tree.item.title}: ") if tree.item.title else 0
        first = tree.leaves[0].char_start  # the body starts at the first leaf (both renderings of ``_span``)
        spans: list[list[tuple[int, int]]] = []
        for s, e in zip(tree.starts.tolist(), tree.ends.tolist(), strict=True):
            a = prefix + tree.leaves[s].char_start - first
            b = prefix + tree.leaves[e - 1].char_end - first
            spans.append([(0, prefix), (a, b)] if prefix else [(a, b)])
        return root, spans

    def evidence_text(self, tree: Tree, node_ids: Sequence[int]) -> str:
        body = with_elisions(tree, node_ids, lambda s, e: self._span(tree, s, e), " ")
        return f"{tree.item.title}: {body}" if tree.item.title else body
