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
