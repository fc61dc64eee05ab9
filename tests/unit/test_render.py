"""Node rendering (encoder input) and evidence rendering (reader input)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from canopy_lit.hierarchy import ELISION, Hierarchy, split_sentences
from canopy_lit.refine import parent_relative
from canopy_lit.types import Item, Table

TEXT = (
    "The Eiffel Tower is in Paris. It was completed in 1889. Gustave Eiffel's company built it. "
    "It is 330 m tall. Millions visit it every year."
)


def test_sentence_leaves_keep_offsets_into_original_text() -> None:
    item = Item("p", "text", title="Eiffel Tower", text=TEXT)
    tree = Hierarchy(2).build(item)
    assert tree.n_leaves == 5
    for leaf in tree.leaves:
        assert TEXT[leaf.char_start : leaf.char_end] == leaf.text
    assert tree.leaves[1].text == "It was completed in 1889."


def test_presplit_sentences_are_kept_verbatim() -> None:
    sents = ["Arthur's Magazine (1844-1846) was an American literary periodical.", " It was published in Philadelphia."]
    tree = Hierarchy(2).build(Item("h", "text", title="Arthur's Magazine", sentences=sents))
    assert [leaf.text for leaf in tree.leaves] == sents


def test_text_evidence_marks_elided_stretches_in_original_order() -> None:
    h = Hierarchy(2)
    tree = h.build(Item("p", "text", title="Eiffel Tower", text=TEXT))
    leaf = {int(tree.starts[i]): i for i in range(len(tree)) if tree.is_leaf(i)}
    ev = h.evidence_text(tree, [leaf[3], leaf[1]])  # given out of order
    assert ev == f"Eiffel Tower: {ELISION} It was completed in 1889. {ELISION} It is 330 m tall. {ELISION}"
    assert h.evidence_text(tree, [0]) == f"Eiffel Tower: {TEXT}"


TABLE = Item(
    "tab",
    "table",
    title="Summer Olympics",
    table=Table(["Year", "City"], [["1896", "Athens"], ["1900", "Paris"], ["1904", "St. Louis"], ["1908", "London"]]),
)


@given(b=st.integers(2, 4))
def test_every_table_node_renders_with_title_and_header(b: int) -> None:
    h = Hierarchy(b)
    tree = h.build(TABLE)
    for i in range(len(tree)):
        text = h.node_text(tree, i)
        assert text.startswith("Summer Olympics\nYear | City\n")
        assert text.count("Year | City") == 1


def test_table_evidence_reattaches_header_once() -> None:
    h = Hierarchy(2)
    tree = h.build(TABLE)
    rows = {int(tree.starts[i]): i for i in range(len(tree)) if tree.is_leaf(i)}
    ev = h.evidence_text(tree, [rows[1], rows[3]])
    assert ev == f"Summer Olympics\nYear | City\n{ELISION}\n1900 | Paris\n{ELISION}\n1908 | London"


def test_adjacent_kept_nodes_merge_without_elision() -> None:
    h = Hierarchy(2)
    tree = h.build(TABLE)
    ev = h.evidence_text(tree, list(tree.children[0]))
    assert ELISION not in ev


@given(st.lists(st.integers(0, 3), min_size=0, max_size=12))
def test_refined_evidence_never_longer_than_whole_item(seed_scores: list[int]) -> None:
    h = Hierarchy(2)
    tree = h.build(Item("p", "text", title="T", text=TEXT))
    scores = np.resize(np.array(seed_scores or [0], dtype=float), len(tree))
    kept = parent_relative(tree, scores)
    # Elision marks are short; kept text is a subset of the original sentences.
    assert len(h.evidence_text(tree, kept)) <= len(h.evidence_text(tree, [0])) + 3 * len(ELISION) + 6


def test_blank_text_still_yields_one_leaf() -> None:
    assert split_sentences("   ") == []
    tree = Hierarchy(2).build(Item("e", "text", text=""))
    assert tree.n_leaves == 1


def test_image_item_is_a_single_node(media_dir) -> None:
    h = Hierarchy(2)
    tree = h.build(Item("img", "image", title="A cat", image=str(media_dir / "images" / "chelsea.png")))
    assert len(tree) == 1
    node = h.node_input(tree, 0)
    assert node.frames[0].path.endswith("chelsea.png")
