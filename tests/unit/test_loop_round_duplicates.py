"""The same item retrieved twice in one round is one reader block (its repeat is a duplicate)."""

from __future__ import annotations

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.pipeline.loop import EvidenceLoop, LoopSettings
from canopy_lit.refine import KeepWholeRefiner
from canopy_lit.types import Item, Question

A = Item("a", "text", title="A", sentences=["Alpha one.", "Alpha two."])
B = Item("b", "text", title="B", sentences=["Beta one."])


class Twice:
    """A retriever that returns one item twice (a fused index can)."""

    def retrieve(self, query, k, exclude, question):
        return [A, B, A][:k]


class Reader:
    def __init__(self) -> None:
        self.evidence: list[str] = []

    def answer(self, question, evidence):
        self.evidence = list(evidence)
        return ""


def test_an_item_twice_in_one_round_is_one_block_and_one_duplicate() -> None:
    reader = Reader()
    loop = EvidenceLoop(Twice(), Hierarchy(2), KeepWholeRefiner(), reader, lambda t: len(t.split()),
                        settings=LoopSettings(k=3, max_rounds=1))
    rec = loop.run(Question("q", "alpha?", ["alpha"], "unit"))
    once = EvidenceLoop(Twice(), Hierarchy(2), KeepWholeRefiner(), Reader(), lambda t: len(t.split()),
                        settings=LoopSettings(k=2, max_rounds=1)).run(Question("q", "alpha?", ["alpha"], "unit"))
    assert len(reader.evidence) == 2
    assert [k.item_id for k in rec.rounds[0].kept] == ["a", "b"]
    assert rec.rounds[0].duplicates == 1 and rec.rounds[0].retrieved == ["a", "b", "a"]
    assert rec.evidence_tokens == once.evidence_tokens
