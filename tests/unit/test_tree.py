"""Tree shape invariants (property-based) and hand-computed trees."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.types import Item, Table, Tree


def text_item(n: int) -> Item:
    return Item("t", "text", title="T", sentences=[f"Sentence {i}." for i in range(n)])


@given(n=st.integers(1, 200), b=st.integers(2, 6))
def test_children_partition_parent_into_near_equal_contiguous_parts(n: int, b: int) -> None:
    tree = Hierarchy(b).build(text_item(n))
    assert (tree.starts[0], tree.ends[0]) == (0, n)
    for v in range(len(tree)):
        kids = tree.children[v]
        size = tree.ends[v] - tree.starts[v]
        if size == 1:
            assert kids == ()
            continue
        assert len(kids) == min(b, size)
        assert tree.starts[kids[0]] == tree.starts[v] and tree.ends[kids[-1]] == tree.ends[v]
        for a, c in zip(kids, kids[1:]):
            assert tree.ends[a] == tree.starts[c]
        sizes = [int(tree.ends[c] - tree.starts[c]) for c in kids]
        assert max(sizes) - min(sizes) <= 1
        assert all(tree.parent[c] == v and tree.depth[c] == tree.depth[v] + 1 for c in kids)


@given(n=st.integers(1, 100), b=st.integers(2, 5))
def test_every_leaf_is_a_node_and_find_inverts_node(n: int, b: int) -> None:
    tree = Hierarchy(b).build(text_item(n))
    for i in range(len(tree)):
        node = tree.node(i)
        assert tree.find(node.start, node.end) == i
    assert sorted(int(tree.starts[i]) for i in range(len(tree)) if tree.is_leaf(i)) == list(range(n))


@pytest.mark.parametrize(
    ("n", "b", "expected_children_of_root"),
    [(5, 2, [(0, 3), (3, 5)]), (7, 3, [(0, 3), (3, 5), (5, 7)]), (4, 4, [(0, 1), (1, 2), (2, 3), (3, 4)]), (3, 4, [(0, 1), (1, 2), (2, 3)])],
)
def test_hand_computed_splits(n: int, b: int, expected_children_of_root: list[tuple[int, int]]) -> None:
    tree = Hierarchy(b).build(text_item(n))
    assert [(int(tree.starts[c]), int(tree.ends[c])) for c in tree.children[0]] == expected_children_of_root


def test_five_leaves_binary_tree_by_hand() -> None:
    tree = Hierarchy(2).build(text_item(5))
    # [0,5) -> [0,3) [3,5); [0,3) -> [0,2) [2,3); [3,5) -> [3,4) [4,5); [0,2) -> [0,1) [1,2)
    assert [tree.node(i).start for i in range(len(tree))] == [0, 0, 3, 0, 2, 3, 4, 0, 1]
    assert [tree.node(i).end for i in range(len(tree))] == [5, 3, 5, 2, 3, 4, 5, 1, 2]
    assert tree.ancestors(8) == [3, 1, 0]
    assert list(tree.depth) == [0, 1, 1, 2, 2, 2, 2, 3, 3]


def test_single_leaf_item_is_a_single_node() -> None:
    tree = Hierarchy(3).build(text_item(1))
    assert len(tree) == 1 and tree.is_leaf(0) and tree.children == [()]


def test_branching_below_two_is_rejected() -> None:
    with pytest.raises(ValueError, match="branching"):
        Hierarchy(1)
    with pytest.raises(ValueError, match="branching"):
        Tree(text_item(3), [], 1)


def test_item_without_payload_is_rejected() -> None:
    with pytest.raises(ValueError, match="no matching payload"):
        Item("x", "table", title="no table")


def test_item_json_round_trip() -> None:
    item = Item("tab", "table", title="T", table=Table(["a", "b"], [["1", "2"]], caption="c"), meta={"src": "x"})
    again = Item.from_dict(item.to_dict())
    assert again == item
