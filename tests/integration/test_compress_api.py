"""``canopy_lit.compress``: one call over real HotpotQA paragraphs with the real MiniLM and the committed adapter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import canopy_lit
from canopy_lit.api import Compressor, as_item
from canopy_lit.types import Modality

ROOT = Path(__file__).resolve().parents[2]
ADAPTER = ROOT / "experiments" / "runs" / "recipe" / "base" / "adapter"


@pytest.fixture(scope="module")
def record() -> dict:
    return json.loads((ROOT / "data" / "hotpotqa" / "hotpot_dev_distractor_100.json").read_text())[0]


@pytest.fixture(scope="module")
def compressor() -> Compressor:
    return Compressor(adapter=ADAPTER)


def test_compress_keeps_fewer_tokens_than_the_items_and_names_each_region(record: dict, compressor: Compressor) -> None:
    items = [{"id": t, "title": t, "text": " ".join(s)} for t, s in record["context"]]
    ev = compressor(record["question"], items)
    assert 0 < ev.tokens < ev.item_tokens and ev.cut == []
    assert {r.item_id for r in ev.regions} <= {t for t, _ in record["context"]}
    for r in ev.regions:  # every region's text is in the reader's evidence, and its score is a cosine
        assert any(r.text.split(": ", 1)[-1].strip(" …") in b for b in ev.blocks)
        assert -1.0 <= r.score <= 1.0 and 0 <= r.start < r.end


def test_a_budget_caps_the_tokens_in_the_items_order(record: dict, compressor: Compressor) -> None:
    items = [{"id": t, "title": t, "text": " ".join(s)} for t, s in record["context"]]
    free = compressor(record["question"], items)
    ev = compressor(record["question"], items, budget=120)
    assert ev.tokens <= 120 < free.tokens
    kept_ids = [b.split(":", 1)[0] for b in ev.blocks]
    assert kept_ids == [i for i in [it["id"] for it in items] if i in kept_ids]  # order kept
    assert ev.cut and set(ev.cut).isdisjoint(kept_ids[:-1])  # only the last kept block may be a cut one
    assert compressor.count_tokens(ev.text.replace("\n\n", " ")) <= 120 + len(ev.blocks)


def test_the_package_level_call_and_bad_input(record: dict) -> None:
    ev = canopy_lit.compress(record["question"], ["A passage about nothing in particular. Another sentence."],
                             adapter=None)
    assert ev.blocks and ev.kept_ratio <= 1.0
    with pytest.raises(ValueError, match="budget must be a positive"):
        canopy_lit.compress("q", ["x"], budget=0)
    with pytest.raises(ValueError, match="distinct ids"):
        canopy_lit.compress("q", [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}])
    with pytest.raises(TypeError, match=r"items\[0\]: expected an Item, a str or a dict, got int"):
        canopy_lit.compress("q", [3])
    assert as_item("text", 2).id == "item2" and as_item({"text": "t"}, 0).modality is Modality.TEXT


def test_item_margin_drops_whole_items_and_keeps_the_rest_as_refined(record: dict, compressor: Compressor) -> None:
    items = [{"id": t, "title": t, "text": " ".join(s)} for t, s in record["context"]]
    plain = compressor(record["question"], items)
    assert plain.dropped == [] and len(plain.blocks) == len(items)  # off: every item keeps a region
    pruning = Compressor(adapter=ADAPTER, item_margin=0.1)
    pruning.encoder, pruning.scorer = compressor.encoder, compressor.scorer  # same weights, cache shared
    ev = pruning(record["question"], items)
    assert ev.dropped and set(ev.dropped).isdisjoint(ev.block_ids)
    assert sorted([*ev.dropped, *ev.block_ids]) == sorted(plain.block_ids)
    kept = dict(zip(plain.block_ids, plain.blocks, strict=True))
    assert all(kept[i] == b for i, b in zip(ev.block_ids, ev.blocks, strict=True))  # survivors unchanged
    best = max(plain.regions, key=lambda r: r.score).item_id
    assert best in ev.block_ids and ev.tokens < plain.tokens and ev.item_tokens == plain.item_tokens
    only = canopy_lit.compress(record["question"], items, adapter=ADAPTER, item_margin=0.0)
    assert only.block_ids == [best]  # a margin of 0 keeps the best item alone
    with pytest.raises(ValueError, match="item_margin must be None or a finite number >= 0"):
        canopy_lit.compress("q", ["x"], item_margin=-0.1)
    with pytest.raises(TypeError, match="item_margin: expected a number or None"):
        Compressor(item_margin="0.1")


@pytest.mark.parametrize("pooling", ["late", "cross"])
def test_an_adapter_trained_with_another_pooling_compresses_with_it(record: dict, pooling: str, caplog) -> None:
    from canopy_lit.scoring.scorers import CrossNodeScorer

    adapter = ROOT / "experiments" / "runs" / "scorers" / f"{pooling}_base" / "adapter"
    with caplog.at_level("WARNING"):
        compressor = Compressor(adapter=adapter)
    assert compressor.encoder.node_pooling == pooling  # adopted from the adapter's fingerprint: no warning
    assert not [r for r in caplog.records if "node_pooling" in r.getMessage()]
    assert isinstance(compressor.scorer, CrossNodeScorer) == (pooling == "cross")
    items = [{"id": t, "title": t, "text": " ".join(s)} for t, s in record["context"]]
    ev = compressor(record["question"], items)
    assert ev.regions and 0 < ev.tokens < ev.item_tokens
    assert all(-1.0 <= r.score <= 1.0 for r in ev.regions)
