"""Table items: leaves are rows; every node renders with the table title and the column header."""

from __future__ import annotations

from collections.abc import Sequence

from canopy_lit.hierarchy.base import NodeInput, TreeBuilder, with_elisions
from canopy_lit.types import Item, Leaf, Modality, Tree


def _row(cells: Sequence[str]) -> str:
    return " | ".join(str(c).strip() for c in cells)


class TableTreeBuilder(TreeBuilder):
    """Row leaves. A row without its header is unreadable, so the header travels with every node."""

    modality = Modality.TABLE

    def leaves(self, item: Item) -> list[Leaf]:
        assert item.table is not None
        rows = item.table.rows or [[]]
        return [Leaf(i, _row(r)) for i, r in enumerate(rows)]

    @staticmethod
    def _head(tree: Tree) -> str:
        table = tree.item.table
        assert table is not None
        lines = [x for x in (tree.item.title, table.caption) if x]
        lines.append(_row(table.header))
        return "\n".join(lines)

    def _rows(self, tree: Tree, start: int, end: int) -> str:
        return "\n".join(leaf.text for leaf in tree.leaves[start:end])

    def node_input(self, tree: Tree, node_id: int) -> NodeInput:
        rows = self._rows(tree, int(tree.starts[node_id]), int(tree.ends[node_id]))
        return NodeInput(f"{self._head(tree)}\n{rows}")

    def node_spans(self, tree: Tree) -> tuple[str, list[list[tuple[int, int]]]]:
        """Root text ``head\\nrow0\\nrow1 ...``; a node is the head (title, caption, header) plus its rows."""
        head = self._head(tree)
        root = self.node_input(tree, 0).text
        row_at = [len(head) + 1]  # where each row starts in the root text
        for leaf in tree.leaves:
            row_at.append(row_at[-1] + len(leaf.text) + 1)
        spans = [
            [(0, len(head) + 1), (row_at[s], row_at[e] - 1)]
            for s, e in zip(tree.starts.tolist(), tree.ends.tolist(), strict=True)
        ]
        return root, spans

    def evidence_text(self, tree: Tree, node_ids: Sequence[int]) -> str:
        # Header once, then the kept rows in order with elided stretches marked.
        body = with_elisions(tree, node_ids, lambda s, e: self._rows(tree, s, e), "\n")
        return f"{self._head(tree)}\n{body}"
