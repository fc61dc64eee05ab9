"""CorpusStore on hand-made fixture items: dedup, random access, views, rendering, bad input."""

from __future__ import annotations

import pytest

from canopy_lit.retrieval.corpus import CorpusStore, render_item
from canopy_lit.types import Item, Table

ITEMS = [
    Item(id="fx:a", modality="text", title="Alpha", text="First sentence. Second sentence."),
    Item(id="fx:t", modality="table", title="Scores", table=Table(["team", "pts"], [["x", "1"], ["y", "2"]])),
    Item(id="fx:b", modality="text", title="Beta", sentences=["One.", "Two."]),
]


def test_write_dedups_and_reads_back(tmp_path, caplog) -> None:
    dup_same = ITEMS[0]
    dup_other = Item(id="fx:b", modality="text", text="different")
    store = CorpusStore.write([*ITEMS, dup_same, dup_other], tmp_path / "c.jsonl")
    assert store.ids == ["fx:a", "fx:t", "fx:b"]
    assert "1 items share an id" in caplog.text  # only the differing duplicate is reported
    assert list(store) == ITEMS
    assert store.get("fx:t") == ITEMS[1] and store.get("fx:a") == ITEMS[0]  # seeks both ways
    assert store.view("table") == ["fx:t"] and store.counts() == {"text": 2, "table": 1}
    assert store.modality("fx:b") == "text" and "fx:b" in store and "fx:zz" not in store
    assert len(store.digest()) == 16


def test_render_item_is_the_root_node() -> None:
    assert render_item(ITEMS[0]).text == "Alpha: First sentence. Second sentence."
    table = render_item(ITEMS[1]).text.splitlines()
    assert table == ["Scores", "team | pts", "x | 1", "y | 2"]


def test_bad_input_names_file_and_line(tmp_path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "modality": "text", "text": "ok"}\n{"id": "b", "modality": "smell"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: bad corpus record"):
        CorpusStore(path)
    with pytest.raises(FileNotFoundError, match="corpus file not found"):
        CorpusStore(tmp_path / "missing.jsonl")
    store = CorpusStore.write(ITEMS, tmp_path / "ok.jsonl")
    with pytest.raises(KeyError, match="not in corpus"):
        store.get("fx:missing")


def test_ids_are_packed_bytes_not_a_list_of_str(tmp_path) -> None:
    """Was: a list of str (~75 B of Python objects per item, 2.5 GB at 33M items); now one bytes buffer and
    int64 offsets, equal to the list wherever a list was compared or looked up."""
    import pickle

    from canopy_lit.retrieval.ids import IdArray

    items = [*ITEMS, Item(id="fx:ü ünïcode", modality="text", text="x")]
    store = CorpusStore.write(items, tmp_path / "c.jsonl")
    assert isinstance(store.ids, IdArray) and not isinstance(store.ids, list)
    assert store.ids == [it.id for it in items] and [it.id for it in items] == store.ids  # both sides
    assert store.ids != ["fx:a"] and store.ids != "fx:a" and store.ids[-1] == "fx:ü ünïcode"
    assert list(store.ids[[3, 0]]) == ["fx:ü ünïcode", "fx:a"] and len(store) == 4
    assert store.get("fx:ü ünïcode").text == "x" and store.rows(["fx:t", "nope"]).tolist() == [1, -1]
    again = pickle.loads(pickle.dumps(store))  # a DataLoader worker or a spawned DDP rank
    assert again.ids == store.ids and again.get("fx:b") == ITEMS[2]
    with pytest.raises(TypeError):
        hash(store.ids)
