"""``canopy_lit.compress`` and the evaluate path give identical evidence for identical input.

Real MiniLM with the shipped adapter, real HotpotQA and TAT-QA test questions: the evidence loop of
``experiment=evidence`` retrieves and compresses each question's items; ``compress`` gets the same items in
the loop's rank order, the same budget counted in the same reader tokenizer, and (TAT-QA) the same
table-aggregation verdict. Blocks, tokens and kept regions must be equal.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose

import canopy_lit
from canopy_lit.types import Question

ROOT = Path(__file__).resolve().parents[2]
CASES = {
    "hotpotqa": ("data/hotpotqa/hotpot_dev_distractor_100.json", None),
    "tatqa": ("data/tatqa/tatqa_dataset_dev.json", True),  # aggregation questions: tables kept whole
}
QUESTIONS = 6
BUDGET = 160  # binds on most questions: whole, region-cut, token-cut and dropped blocks all occur


class SaysAggregation:
    """The loop's aggregation check with a fixed verdict (the classifier is an LLM; its verdict is the input)."""

    def __init__(self, verdict: bool) -> None:
        self.verdict = verdict

    def is_aggregation(self, question: Question) -> bool:
        return self.verdict


@pytest.mark.parametrize("name", sorted(CASES))
def test_compress_gives_the_evaluate_paths_evidence(name: str, hydra_ctx, tmp_path: Path) -> None:
    from canopy_lit.data import load_split
    from canopy_lit.pipeline.build import build_evidence_loop

    path, aggregation = CASES[name]
    cfg = compose("evaluate", overrides=[
        "experiment=evidence", f"data={name}", f"data.path={ROOT / path}", "encoder.adapter=quickstart",
        "evidence.tokenizer=qwen2.5-1.5b", f"loop.reader_max_tokens={BUDGET}", f"retrieval.node_cache_dir={tmp_path}",
    ])  # fmt: skip
    bench, questions = load_split(name, str(ROOT / path), split="test")
    loop = build_evidence_loop(cfg, bench)
    if aggregation is not None:
        loop.aggregation, loop.settings.aggregation_check = SaysAggregation(aggregation), True
    outcomes = set()
    for question in questions[:QUESTIONS]:
        record, capped = loop.run_with_evidence(question)
        (round_0,) = record.rounds
        items = [bench.items[i] for i in round_0.retrieved]
        got = canopy_lit.compress(question.text, items, adapter="quickstart", budget=BUDGET,
                                  tokenizer="qwen2.5-1.5b", aggregation=aggregation, max_item_chars=None)  # fmt: skip
        assert got.blocks == capped.blocks, question.id
        assert got.tokens == capped.tokens == record.evidence_tokens, question.id
        delivered = [(b.evidence.tree.item.id, b.delivered_ranges()) for b in capped.items if b.node_ids]
        regions: dict[str, list[tuple[int, int]]] = {}
        for r in got.regions:
            regions.setdefault(r.item_id, []).append((r.start, r.end))
        assert [(i, sorted(rs)) for i, rs in delivered] == [(i, sorted(regions[i])) for i, _ in delivered]
        assert got.item_tokens == sum(k.item_tokens for k in round_0.kept)
        outcomes |= {b.cap for b in capped.items}
        if aggregation:
            assert any(k.aggregation for k in round_0.kept), question.id  # a table was kept whole by the flag
    assert {"whole", "dropped"} <= outcomes, outcomes  # the budget bound: the comparison covers its cuts


def test_a_round_embeds_its_query_once_for_the_retriever_and_the_scorer(hydra_ctx, tmp_path: Path) -> None:
    """The candidates' ranking and the node scorer both need f0(question): the encoder computes it once."""
    from canopy_lit.data import load_split
    from canopy_lit.pipeline.build import build_evidence_loop

    path, _ = CASES["hotpotqa"]
    cfg = compose("evaluate", overrides=["experiment=evidence", "data=hotpotqa", f"data.path={ROOT / path}",
                                         f"retrieval.node_cache_dir={tmp_path}"])  # fmt: skip
    bench, questions = load_split("hotpotqa", str(ROOT / path), split="test")
    loop = build_evidence_loop(cfg, bench)
    encoder = loop.retriever.encoder
    loop.run(questions[0])  # the candidates' item vectors are cached now
    encoded: list[list[str]] = []
    inner = encoder._encode

    def spy(inputs, batch_size):
        encoded.append([x for x in inputs if isinstance(x, str)])
        return inner(inputs, batch_size)

    encoder._encode = spy
    first = loop.run_with_evidence(questions[1])[1].blocks
    assert sum(questions[1].text in texts for texts in encoded) == 1, encoded
    assert loop.run_with_evidence(questions[1])[1].blocks == first  # a remembered f0(q) scores the same
