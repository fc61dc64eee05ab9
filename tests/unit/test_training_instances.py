"""One instance builder for training, the stats command and the tests (``supervision.training_instances``)."""

from __future__ import annotations

import pytest

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.supervision import InstanceStats, instances_for, training_instances
from canopy_lit.types import Item, Question


def _item(i: str, n: int) -> Item:
    return Item(i, "text", sentences=[f"Sentence {j} of {i}." for j in range(n)])


def test_counts_missing_and_unlocated_gold_without_failing() -> None:
    items = {"a": _item("a", 5), "b": _item("b", 3)}
    questions = [
        Question("q1", "first?", ["x"], "bench1", gold={"a": [1, 2], "b": []}),  # b: span not located
        Question("q2", "second?", ["y"], "bench1", gold={"gone": [0], "a": [4]}),  # "gone" not in items
    ]
    trees: dict = {}
    stats = InstanceStats()
    insts = training_instances(questions, items, Hierarchy(2), tree_cache=trees, stats=stats)
    h = Hierarchy(2)
    expect = [*instances_for("q1", "first?", h.build(items["a"]), [1, 2]),
              *instances_for("q2", "second?", h.build(items["a"]), [4])]  # fmt: skip
    assert [(x.question_id, x.node, x.pairs) for x in insts] == [(x.question_id, x.node, x.pairs) for x in expect]
    assert all(x.benchmark == "bench1" for x in insts)  # default label: the question's benchmark
    assert (stats.questions, stats.gold_items, stats.instances) == (2, 3, len(insts))
    assert stats.skipped_items == {"missing_item": 1}
    assert set(trees) == {"a"}  # one tree per item with located gold, shared by both questions


def test_bad_gold_leaf_names_question_and_item() -> None:
    q = Question("q1", "?", ["x"], "b", gold={"a": [9]})
    with pytest.raises(ValueError, match=r"bench: question 'q1', item 'a': gold leaf 9 outside item"):
        training_instances([q], {"a": _item("a", 3)}, Hierarchy(2), benchmark="bench")

