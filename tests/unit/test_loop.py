"""Control flow of the evidence loop, with hand-made stand-in stages (the real ones are tested on their own)."""

from __future__ import annotations

import numpy as np
import pytest

from canopy_lit.control import Decision
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.pipeline.loop import EvidenceLoop, LoopSettings
from canopy_lit.refine import FlatTopMRefiner, KeepWholeRefiner, ParentRelativeRefiner
from canopy_lit.types import Evidence, Item, Question, Table

ITEMS = {
    "a": Item("a", "text", title="A", sentences=["Alpha one.", "Alpha two.", "Alpha three."]),
    "b": Item("b", "text", title="B", sentences=["Beta one.", "Beta two."]),
    "c": Item("c", "text", title="C", sentences=["Gamma one."]),
    "t": Item("t", "table", title="T", table=Table(["x", "y"], [["1", "2"], ["3", "4"]])),
}
Q = Question("q1", "What is alpha?", ["alpha"], "unit")


class ScriptedRetriever:
    """Returns a fixed list per round; records the exclude sets it was given."""

    def __init__(self, rounds: list[list[str]], items: dict[str, Item] | None = None) -> None:
        self.rounds = rounds
        self.items = items or ITEMS
        self.calls: list[tuple[str, set[str]]] = []

    def retrieve(self, query, k, exclude, question):
        ids = [i for i in self.rounds[min(len(self.calls), len(self.rounds) - 1)] if i not in exclude]
        self.calls.append((query, set(exclude)))
        return [self.items[i] for i in ids[:k]]


class ScriptedController:
    def __init__(self, stops: list[bool]) -> None:
        self.stops = stops
        self.seen: list[int] = []

    def step(self, question, evidence, round, history):
        self.seen.append(len(evidence))
        return Decision(stop=self.stops[round], followup=f"follow-up {round}")


class EchoReader:
    def __init__(self) -> None:
        self.evidence: list[str] = []

    def answer(self, question, evidence):
        self.evidence = evidence
        return "alpha"


class CountingAggregation:
    def __init__(self, answer: bool) -> None:
        self.answer, self.calls = answer, 0

    def is_aggregation(self, question):
        self.calls += 1
        return self.answer


class LeafPreferringScorer:
    """Scores every node by its depth, so parent-relative refinement descends to the leaves."""

    def __init__(self) -> None:
        self.scored = 0  # nodes scored, all calls together

    def embed_query(self, query):
        return np.ones(1)

    def score(self, query, trees, nodes=None):
        ids = [range(len(t)) for t in trees] if nodes is None else nodes
        self.scored += sum(len(i) for i in ids)
        return [t.depth[list(i)].astype(float) for t, i in zip(trees, ids)]


def words(text: str) -> int:
    return len(text.split())


def make(retriever, controller=None, refiner=None, scorer=None, aggregation=None, **settings):
    return EvidenceLoop(
        retriever,
        Hierarchy(2),
        refiner or KeepWholeRefiner(),
        EchoReader(),
        words,
        scorer=scorer,
        controller=controller,
        aggregation=aggregation,
        settings=LoopSettings(**settings),
    )


def capped(loop: EvidenceLoop, evidence: list[Evidence]) -> tuple[list[str], int, int]:
    """The reader's blocks under the loop's cap, their tokens and the held items not delivered whole."""
    got = loop.budget.cap(evidence)
    return got.blocks, got.tokens, got.not_whole


def test_critic_stop_ends_the_loop_and_followup_becomes_the_query() -> None:
    retr = ScriptedRetriever([["a", "b"], ["b", "c"], ["c"]])
    ctrl = ScriptedController([False, True, True])
    rec = make(retr, ctrl, k=2, max_rounds=3).run(Q)
    assert [c[0] for c in retr.calls] == ["What is alpha?", "follow-up 0"]
    assert len(rec.rounds) == 2 and rec.rounds[1].duplicates == 1  # "b" was already held
    assert [k.item_id for r in rec.rounds for k in r.kept] == ["a", "b", "c"]
    assert ctrl.seen == [2, 3]  # the critic sees all accumulated evidence


def test_no_critic_call_after_the_last_round() -> None:
    ctrl = ScriptedController([False, False, False])
    rec = make(ScriptedRetriever([["a"], ["b"], ["c"]]), ctrl, max_rounds=3).run(Q)
    assert len(rec.rounds) == 3 and len(ctrl.seen) == 2


def test_exclude_seen_passes_held_items_to_the_retriever() -> None:
    retr = ScriptedRetriever([["a", "b"], ["a", "b", "c"]])
    rec = make(retr, ScriptedController([False, True]), k=2, max_rounds=2, exclude_seen=True).run(Q)
    assert retr.calls[1][1] == {"a", "b"}
    assert rec.rounds[1].duplicates == 0 and rec.rounds[1].retrieved == ["c"]


def test_no_retrieval_reads_without_evidence() -> None:
    loop = make(ScriptedRetriever([["a"]]), max_rounds=0)
    rec = loop.run(Q)
    assert rec.rounds == [] and rec.prediction == "alpha" and loop.reader.evidence == []


def test_reader_cap_keeps_the_newest_evidence() -> None:
    loop = make(
        ScriptedRetriever([["a"], ["b"]]),
        ScriptedController([False, True]),
        max_rounds=2,
        reader_max_tokens=6,
    )
    rec = loop.run(Q)
    # "B: Beta one. Beta two." = 5 words fits; adding A's 7 words would not: the older item is dropped.
    assert loop.reader.evidence == ["B: Beta one. Beta two."]
    assert rec.truncated_items == 1 and rec.evidence_tokens == 5


# Hand-made untitled items whose blocks are 3, 8 and 4 words (tokens under ``words``).
CAP_ITEMS = {
    "x": Item("x", "text", sentences=["x1 x2 x3"]),
    "y": Item("y", "text", sentences=[f"y{i}" for i in range(1, 9)]),
    "z": Item("z", "text", sentences=["z1 z2 z3 z4"]),
}


def cap_loop(cap: int) -> EvidenceLoop:
    return EvidenceLoop(
        None, Hierarchy(2), KeepWholeRefiner(), EchoReader(), words, settings=LoopSettings(reader_max_tokens=cap)
    )


def held(*ids: str) -> list[Evidence]:
    h = Hierarchy(2)
    return [Evidence(h.build(CAP_ITEMS[i]), [0], r) for r, i in enumerate(ids)]


def test_reader_cap_newest_first_truncates_at_a_region_boundary_and_drops_older() -> None:
    loop = cap_loop(10)
    assert [words(loop.budget.block(ev)) for ev in held("x", "y", "z")] == [3, 8, 4]
    blocks, tokens, not_whole = capped(loop, held("x", "y", "z"))
    # z (4) whole; y cut to its first five leaves + elision (6 tokens); x dropped, never kept over y.
    assert blocks == ["y1 y2 y3 y4 y5 …", "z1 z2 z3 z4"]
    assert tokens == 10 == sum(words(b) for b in blocks) and not_whole == 2


def test_reader_cap_truncates_a_block_larger_than_the_cap() -> None:
    blocks, tokens, not_whole = capped(cap_loop(5), held("y"))
    assert blocks == ["y1 y2 y3 y4 …"] and tokens == 5 and not_whole == 1
    assert capped(cap_loop(1), held("y")) == ([], 0, 1)  # not even one leaf fits
    assert capped(cap_loop(15), held("x", "y", "z"))[1:] == (15, 0)  # everything fits whole


def test_reader_cap_in_the_loop_counts_what_the_reader_gets() -> None:
    retr = ScriptedRetriever([["x"], ["y"], ["z"]], CAP_ITEMS)
    loop = EvidenceLoop(
        retr, Hierarchy(2), KeepWholeRefiner(), EchoReader(), words,
        controller=ScriptedController([False, False, False]), settings=LoopSettings(max_rounds=3, reader_max_tokens=10),
    )  # fmt: skip
    rec = loop.run(Q)
    assert loop.reader.evidence == ["y1 y2 y3 y4 y5 …", "z1 z2 z3 z4"]
    assert rec.evidence_tokens == 10 and rec.truncated_items == 2


def test_flat_top_m_items_without_a_chosen_leaf_reach_no_one() -> None:
    ctrl = ScriptedController([True])
    loop = make(
        ScriptedRetriever([["a", "b"]]), ctrl, refiner=FlatTopMRefiner(m=1), scorer=LeafPreferringScorer(),
        max_rounds=2,
    )  # fmt: skip
    rec = loop.run(Q)
    assert loop.reader.evidence == ["A: Alpha one. …"]  # no bare "B: …" header
    assert rec.evidence_tokens == 4 and ctrl.seen == [1]
    kept = {k.item_id: k for k in rec.rounds[0].kept}
    assert kept["b"].leaf_ranges == [] and kept["b"].kept_tokens == 0 and kept["a"].kept_tokens == 4


def test_refinement_compresses_and_tables_of_aggregation_questions_stay_whole() -> None:
    agg = CountingAggregation(True)
    loop = make(
        ScriptedRetriever([["a", "t"], ["t", "b"]]),
        ScriptedController([False, True]),
        refiner=ParentRelativeRefiner(),
        scorer=LeafPreferringScorer(),
        aggregation=agg,
        max_rounds=2,
    )
    rec = loop.run(Q)
    kept = {k.item_id: k for r in rec.rounds for k in r.kept}
    assert kept["a"].leaf_ranges == [(0, 1), (1, 2), (2, 3)]  # leaves (deeper = higher score)
    assert kept["t"].leaf_ranges == [(0, 2)] and kept["t"].aggregation
    assert agg.calls == 1  # classified once per question, the first time a table appears


@pytest.mark.parametrize("lazy", [True, False])
def test_lazy_and_eager_refinement_keep_the_same_evidence(lazy: bool) -> None:
    scorer = LeafPreferringScorer()
    loop = make(
        ScriptedRetriever([["a", "t"]]), refiner=ParentRelativeRefiner(lazy=lazy), scorer=scorer, max_rounds=1
    )
    rec = loop.run(Q)
    assert [k.leaf_ranges for k in rec.rounds[0].kept] == [[(0, 1), (1, 2), (2, 3)], [(0, 1), (1, 2)]]
    assert {"encode", "refine"} <= set(rec.time_s)
    # Leaves win everywhere, so even lazily every node is read; eagerly each is scored exactly once.
    n_nodes = sum(len(loop.hierarchy.build(ITEMS[i])) for i in ("a", "t"))
    assert scorer.scored == n_nodes


def test_stage_times_are_recorded() -> None:
    rec = make(ScriptedRetriever([["a"]]), max_rounds=1).run(Q)
    assert {"retrieve", "trees", "refine", "reader"} <= set(rec.time_s)
    assert np.isfinite(rec.latency_s)


# --- the reader cap within a round, oversized items ------------------------------------------------


def test_reader_cap_within_a_round_keeps_rank_order() -> None:
    """One round retrieves [z (rank 1), x (rank 2)] and the cap fits one: the reader gets rank 1."""
    loop = EvidenceLoop(
        ScriptedRetriever([["z", "x"]], CAP_ITEMS), Hierarchy(2), KeepWholeRefiner(), EchoReader(), words,
        settings=LoopSettings(k=2, max_rounds=1, reader_max_tokens=5),
    )  # fmt: skip
    rec = loop.run(Q)
    assert loop.reader.evidence == ["z1 z2 z3 z4"]
    assert rec.evidence_tokens == 4 and rec.truncated_items == 1
    assert [(k.item_id, k.cap, k.delivered_tokens) for k in rec.rounds[0].kept] == [("z", "whole", 4), ("x", "dropped", 0)]


def test_reader_cap_newer_rounds_first_then_rank_order() -> None:
    """Round 1 holds [x], round 2 [z, y]: z (newest round, rank 1) whole, y cut, x (older round) dropped."""
    evidence = [*held("x"), *(Evidence(ev.tree, ev.node_ids, 1) for ev in held("z", "y"))]
    blocks, tokens, not_whole = capped(cap_loop(10), evidence)
    assert blocks == ["z1 z2 z3 z4", "y1 y2 y3 y4 y5 …"] and tokens == 10 and not_whole == 2


HUGE = Item("huge", "text", title="Huge", sentences=[" ".join(f"w{i}" for i in range(150_000))])  # ~1 MB, one leaf


def test_one_oversized_item_ranked_last_is_cut_at_a_token_boundary_and_the_others_kept() -> None:
    items = {**CAP_ITEMS, "huge": HUGE}
    loop = EvidenceLoop(
        ScriptedRetriever([["x", "z", "huge"]], items), Hierarchy(2), KeepWholeRefiner(), EchoReader(), words,
        settings=LoopSettings(k=3, max_rounds=1, reader_max_tokens=50),
    )  # fmt: skip
    rec = loop.run(Q)
    x, z, cut = loop.reader.evidence
    assert (x, z) == ("x1 x2 x3", "z1 z2 z3 z4")
    assert cut.startswith("Huge: w0 w1 w2") and cut.endswith(" w40 …")  # whole words, the cut marked
    assert rec.evidence_tokens == 3 + 4 + words(cut) == 50 and rec.truncated_items == 1
    kept = rec.rounds[0].kept
    assert [k.cap for k in kept] == ["whole", "whole", "tokens"]
    assert kept[2].delivered_ranges == [] and kept[2].delivered_tokens == 43 and kept[2].kept_tokens == 150_001


def test_one_oversized_item_ranked_first_fills_the_cap_and_drops_the_rest() -> None:
    evidence = [Evidence(Hierarchy(2).build(HUGE), [0], 0), *(Evidence(ev.tree, ev.node_ids, 0) for ev in held("x"))]
    blocks, tokens, not_whole = capped(cap_loop(20), evidence)
    assert len(blocks) == 1 and blocks[0].startswith("Huge: w0") and tokens == words(blocks[0]) == 20
    assert not_whole == 2
    assert capped(cap_loop(1), [Evidence(Hierarchy(2).build(HUGE), [0], 0)]) == ([], 0, 1)  # title alone


def test_oversized_item_cut_with_the_reader_tokenizer() -> None:
    """The real SmolLM2 tokenizer: a one-sentence paragraph of ~130 kB is cut within the cap at a word boundary."""
    from canopy_lit.assets import AssetError, resolve
    from canopy_lit.llm.tokenizers import token_counter

    try:
        count = token_counter(str(resolve("smollm2-135m")))
    except AssetError as err:
        pytest.skip(f"smollm2-135m asset unavailable: {err}")
    loop = EvidenceLoop(
        None, Hierarchy(2), KeepWholeRefiner(), EchoReader(), count, settings=LoopSettings(reader_max_tokens=300)
    )
    big = Item("huge", "text", title="Huge", sentences=[" ".join(f"w{i}" for i in range(20_000))])
    blocks, tokens, not_whole = capped(loop, [Evidence(Hierarchy(2).build(big), [0], 0)])
    assert len(blocks) == 1 and 290 <= tokens == count(blocks[0]) <= 300 and not_whole == 1
    assert blocks[0].startswith("Huge: w0 w1") and blocks[0].endswith(" …") and blocks[0][-3] != "w"
