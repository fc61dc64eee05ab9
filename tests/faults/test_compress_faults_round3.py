"""Hostile input to ``canopy_lit.compress``: each is one clear error naming the argument, item and field, or a
documented result, before any encoding (real MiniLM from the offline cache where a call gets that far)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import canopy_lit
from canopy_lit.api import MAX_ITEM_CHARS, Compressor
from canopy_lit.integrations import Passage, compress_passages

ROOT = Path(__file__).resolve().parents[2]
IMAGE = ROOT / "data" / "media" / "images" / "coffee.png"
Q = "Who designed the Eiffel Tower?"
PASSAGE = "The Eiffel Tower was designed by the engineering firm of Gustave Eiffel. It opened in 1889."


@pytest.fixture(scope="module")
def compressor() -> Compressor:
    return Compressor()  # f0 MiniLM


@pytest.fixture(scope="module")
def hotpot_text() -> str:
    records = json.loads((ROOT / "data" / "hotpotqa" / "hotpot_dev_distractor_100.json").read_text(encoding="utf-8"))
    return " ".join(" ".join(s) for r in records for _, s in r["context"])


def test_one_str_is_one_item_not_one_item_per_character(compressor: Compressor) -> None:
    alone = compressor(Q, PASSAGE)
    listed = compressor(Q, [PASSAGE])
    assert alone.block_ids == ["item0"] and alone.blocks == listed.blocks and alone.tokens == listed.tokens


@pytest.mark.parametrize(("question", "error", "match"), [
    ("", ValueError, "question: empty"),
    ("   \n", ValueError, "question: empty"),
    (3, TypeError, "question: expected a str, got int"),
    (None, TypeError, "question: expected a str, got NoneType"),
    (["who?"], TypeError, "question: expected a str, got list"),
    ("who\ud800?", ValueError, "question: not valid Unicode"),
])  # fmt: skip
def test_a_bad_question_is_refused(question, error, match) -> None:
    with pytest.raises(error, match=match):
        canopy_lit.compress(question, [PASSAGE])


def test_an_empty_question_is_refused_by_the_framework_adapters_too(compressor: Compressor) -> None:
    with pytest.raises(ValueError, match="question: empty"):
        compress_passages(compressor, "", [Passage(PASSAGE)])
    with pytest.raises(ValueError, match="question: empty"):
        compress_passages(compressor, " ", [])


@pytest.mark.parametrize(("budget", "error"), [
    (True, TypeError), (False, TypeError), ("lots", TypeError), ("300", TypeError),
    (float("inf"), ValueError), (float("nan"), ValueError), (0, ValueError), (-5, ValueError), (2.5, ValueError),
])  # fmt: skip
def test_a_budget_that_is_not_a_whole_number_of_tokens_is_refused(budget, error) -> None:
    with pytest.raises(error, match="budget must be a positive whole number of tokens or None"):
        canopy_lit.compress(Q, [PASSAGE], budget=budget)


def test_a_whole_float_budget_is_that_many_tokens(compressor: Compressor) -> None:
    assert compressor(Q, [PASSAGE], budget=12.0).tokens == compressor(Q, [PASSAGE], budget=12).tokens <= 12


@pytest.mark.parametrize(("margin", "error"), [
    (float("nan"), ValueError), (float("inf"), ValueError), ("0.1", TypeError), (True, TypeError),
])  # fmt: skip
def test_a_descend_margin_that_is_not_a_finite_number_is_refused(margin, error) -> None:
    with pytest.raises(error, match="descend_margin"):
        canopy_lit.compress(Q, [PASSAGE], descend_margin=margin)
    with pytest.raises(error, match="descend_margin"):
        Compressor(encoder=None, descend_margin=margin)  # before any encoder is needed


def test_a_whitespace_only_item_is_skipped_not_a_block(compressor: Compressor) -> None:
    ev = compressor(Q, [{"id": "blank", "text": " \n\t "}, {"id": "real", "text": PASSAGE}, {"id": "none", "text": ""}])
    assert ev.block_ids == ["real"] and ev.skipped == ["blank", "none"]
    assert all(b.strip() for b in ev.blocks) and ev.item_tokens == compressor(Q, [PASSAGE]).item_tokens
    only = compressor(Q, ["   "])
    assert only.blocks == [] and only.tokens == 0 and only.skipped == ["item0"]


@pytest.mark.parametrize(("item", "error", "match"), [
    ({"title": {"a": 1}, "text": PASSAGE}, TypeError, r"items\[0\]\.title: expected str, got dict"),
    ({"text": 42}, TypeError, r"items\[0\]\.text: expected str, got int"),
    ({"id": 7, "text": PASSAGE}, TypeError, r"items\[0\]\.id: expected str, got int"),
    ({"txt": PASSAGE}, TypeError, r"items\[0\]: unknown field 'txt'"),
    ({"modality": "audio", "text": PASSAGE}, ValueError, r"items\[0\]\.modality: 'audio' is not one of"),
    ({"modality": "table", "table": {"rows": [["1"]]}}, ValueError, r"items\[0\]\.table: no 'header' field"),
    ({"modality": "table", "table": {"header": ["a"]}}, ValueError, r"items\[0\]\.table: no 'rows' field"),
    ({"modality": "table", "table": {"header": ["a"], "rows": [[1]]}}, TypeError,
     r"items\[0\]\.table\.rows\[0\]\[0\]: expected str, got int"),
    ({"modality": "table"}, ValueError, r"items\[0\]: item 'item0': modality table but no matching payload"),
    ({"text": "Paris \ud800 is big."}, ValueError, r"items\[0\]\.text: not valid Unicode \(a lone surrogate"),
    ({"title": "T\udfff", "text": PASSAGE}, ValueError, r"items\[0\]\.title: not valid Unicode"),
])  # fmt: skip
def test_a_bad_item_field_is_named(item, error, match) -> None:
    with pytest.raises(error, match=match):
        canopy_lit.compress(Q, [item])


def test_a_lone_surrogate_in_a_later_item_names_that_item() -> None:
    with pytest.raises(ValueError, match=r"items\[1\]\.sentences\[0\]|items\[1\]\.text"):
        canopy_lit.compress(Q, [PASSAGE, {"sentences": ["bad \udc80 text."]}])


def test_a_non_image_file_is_not_an_image(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"items\[0\]\.image: /etc/passwd is not an image file"):
        canopy_lit.compress(Q, [{"modality": "image", "image": "/etc/passwd"}])
    fake = tmp_path / "passwd.png"
    fake.write_text("root:x:0:0:root:/root:/bin/bash\n")
    with pytest.raises(ValueError, match=r"items\[0\]\.image: .*passwd\.png is not an image \(not PNG"):
        canopy_lit.compress(Q, [{"modality": "image", "image": str(fake)}])
    with pytest.raises(ValueError, match=r"items\[0\]\.image: image file not found"):
        canopy_lit.compress(Q, [{"modality": "image", "image": str(tmp_path / "missing.jpg")}])
    with pytest.raises(ValueError, match=r"items\[0\]\.video\.path: /etc/passwd is not an video file"):
        canopy_lit.compress(Q, [{"modality": "video", "video": {"path": "/etc/passwd"}}])


def test_media_paths_stay_inside_media_root(compressor: Compressor) -> None:
    root = IMAGE.parent
    with pytest.raises(ValueError, match=r"items\[0\]\.image: \.\./\.\./\.\./\.\./etc/passwd is outside media_root"):
        compressor(Q, [{"modality": "image", "image": "../../../../etc/passwd"}], media_root=root)
    outside = ROOT / "data" / "media" / "video" / "bikes.mp4"
    with pytest.raises(ValueError, match=r"items\[0\]\.video\.path: .* is outside media_root"):
        compressor(Q, [{"modality": "video", "video": {"path": str(outside)}}], media_root=root)
    ev = compressor(Q, [{"id": "img", "modality": "image", "image": IMAGE.name, "meta": {"caption": "A cup of coffee."}}],
                    media_root=root)  # relative: under the root; a real image is accepted
    assert ev.block_ids == ["img"]


def test_a_huge_item_is_refused_at_once_naming_it(compressor: Compressor, hotpot_text: str) -> None:
    big = (hotpot_text * (1_000_000 // len(hotpot_text) + 1))[:1_000_000]  # 1 MB of real text
    start = time.perf_counter()
    with pytest.raises(ValueError, match=rf"items\[1\] \('huge'\): 1000000 characters, over max_item_chars={MAX_ITEM_CHARS}"):
        compressor(Q, [PASSAGE, {"id": "huge", "text": big}])
    assert time.perf_counter() - start < 2.0
    table = {"header": ["a"], "rows": [[hotpot_text[:1000]] for _ in range(1000)]}  # a 1 MB table too
    with pytest.raises(ValueError, match=r"items\[0\] \('item0'\): 1000\d+ characters"):
        compressor(Q, [{"modality": "table", "table": table}])
    assert time.perf_counter() - start < 4.0


def test_an_item_at_the_bound_is_compressed(compressor: Compressor, hotpot_text: str) -> None:
    text = hotpot_text[:2000]  # real text well under the bound, with max_item_chars lowered to it
    with pytest.raises(ValueError, match="over max_item_chars=1999"):
        compressor(Q, [text], max_item_chars=1999)
    ev = compressor(Q, [text], max_item_chars=2000)
    assert ev.blocks and 0 < ev.tokens <= ev.item_tokens
