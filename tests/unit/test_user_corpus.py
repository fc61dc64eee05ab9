"""Your own corpus file: the record format, malformed records, and a changed file rebuilding (never reusing).

Real bundled items (HotpotQA, TAT-QA), media and MiniLM; BM25 where the index kind does not matter.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from canopy_lit.data import DataFormatError, load_benchmark
from canopy_lit.retrieval.user_corpus import read_corpus, user_corpus_store
from canopy_lit.types import Item, Modality

DATA = Path(__file__).resolve().parents[2] / "data"


def _write(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def real_records() -> list[dict]:
    """Four real items in the documented format: a pre-split HotpotQA paragraph, a TAT-QA table and paragraph."""
    hp = load_benchmark("hotpotqa")
    para = next(i for i in hp.items.values() if i.sentences)
    tat = load_benchmark("tatqa")
    table = next(i for i in tat.items.values() if i.modality == Modality.TABLE)
    text = next(i for i in tat.items.values() if i.modality == Modality.TEXT and i.text and len(i.text) > 80)
    return [
        {"id": para.id, "title": para.title, "sentences": para.sentences},
        {"id": table.id, "title": table.title, "modality": "table",
         "table": {"header": table.table.header, "rows": table.table.rows}},
        {"id": text.id, "title": text.title, "text": text.text, "meta": {"source": "tatqa"}},
        {"id": 7, "title": "an item with an int id", "text": "Short text about a lighthouse on a rock."},
    ]  # fmt: skip


@pytest.fixture
def media(tmp_path: Path) -> Path:
    """The corpus folder with a bundled photo and video under media/."""
    folder = tmp_path / "corpus"
    (folder / "media").mkdir(parents=True)
    shutil.copy(DATA / "media" / "images" / "hubble_deep_field.jpg", folder / "media" / "hdf.jpg")
    shutil.copy(DATA / "media" / "video" / "bikes.mp4", folder / "media" / "bikes.mp4")
    return folder


def test_jsonl_and_saved_dataset_read_into_the_same_items(tmp_path, media, real_records) -> None:
    records = real_records + [
        {"id": "img", "title": "Hubble Deep Field", "image": "media/hdf.jpg", "caption": "distant galaxies"},
        {"id": "vid", "title": "Bikes", "video": {"path": "media/bikes.mp4", "start": 0, "end": 2}},
    ]
    items = list(read_corpus(_write(media / "corpus.jsonl", records)))
    assert [i.id for i in items] == [r["id"] if isinstance(r["id"], str) else str(r["id"]) for r in records]
    para, table, text, short, img, vid = items
    assert para.sentences == [s.strip() for s in real_records[0]["sentences"]] and para.modality == Modality.TEXT
    assert table.modality == Modality.TABLE and table.table.rows == real_records[1]["table"]["rows"]
    assert text.meta == {"source": "tatqa"} and short.id == "7"
    # media paths resolve under the corpus file's folder, as absolute paths (the store lives in a cache)
    assert img.image == str(media / "media" / "hdf.jpg") and img.meta["caption"] == "distant galaxies"
    assert vid.video.path == str(media / "media" / "bikes.mp4") and (vid.video.start, vid.video.end) == (0.0, 2.0)
    # Item.to_dict lines are valid records, and read back as the same items
    again = list(read_corpus(_write(media / "dumped.jsonl", [it.to_dict() for it in items])))
    assert again == items

    import datasets

    # an Arrow column holds one type (the int id as a string), and from_list takes its columns from the first row
    folder = tmp_path / "saved"
    keys = list(dict.fromkeys(k for r in records for k in r))
    rows = [{k: str(r[k]) if k == "id" else r.get(k) for k in keys} for r in records]
    datasets.Dataset.from_list(rows).save_to_disk(str(folder))
    from_disk = list(read_corpus(folder, media_root=media))
    assert from_disk == items


BAD = [
    ('{"id": "b", "text": ', "line 2: not valid JSON"),
    ('{"title": "no id", "text": "x"}', "line 2: id: missing"),
    ('{"id": "b", "text": "x", "table": {"header": [], "rows": [["1"]]}}', "one payload per item, got text and table"),
    ('{"id": "b", "txt": "x"}', "txt: unknown field (did you mean 'text'?)"),
    ('{"id": "b", "modality": "table", "text": "x"}', "modality: 'table' but the payload is 'text'"),
    ('{"id": "a", "text": "again"}', "line 2 (id 'a'): id: 'a' is already the id of line 1"),
    ('{"id": "b", "table": {"header": ["h"], "rows": []}}', "table.rows: expected a non-empty list"),
    ('{"id": "b", "image": "../outside.jpg"}', "lies outside media_root"),
    ('{"id": "b", "image": "media/missing.jpg"}', "image: file not found"),
    ('{"id": "b", "title": "nothing"}', "'b' has no payload"),
    ('{"id": "b", "sentences": ["One.", "Two."], "text": "One."}', "text: differs from the join of sentences"),
]


@pytest.mark.parametrize(("line", "message"), BAD, ids=[m for _, m in BAD])
def test_a_malformed_record_is_one_error_naming_file_line_and_field(tmp_path, line, message) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "a", "text": "A fine first record."}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(DataFormatError) as err:
        list(read_corpus(path))
    assert str(err.value).startswith(f"{path}, line 2")
    assert message in str(err.value)
    if "outside" in message:  # the switch named is the corpus's, not data.options'
        assert "--allow-outside-media-root" in str(err.value)


def test_a_malformed_dataset_record_names_the_record_and_the_command_stops_before_any_model(
    tmp_path, capsys
) -> None:
    import datasets

    from canopy_lit.retrieval.__main__ import main

    folder = tmp_path / "saved"
    datasets.Dataset.from_list([{"id": "a", "text": "Fine."}, {"id": "b", "text": None}]).save_to_disk(str(folder))
    with pytest.raises(DataFormatError, match=r"saved, record 1 \(id 'b'\): id: 'b' has no payload"):
        list(read_corpus(folder))
    cache = tmp_path / "cache"
    capsys.readouterr()  # the dataset's save progress
    assert main(["index", "--corpus", str(folder), "--cache-dir", str(cache), "--index", "none", "--bm25"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python -m canopy_lit.retrieval index: error: ") and "record 1" in err[0]
    assert not list(cache.glob("corpus-*"))  # no partial store left behind
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match="no records"):
        user_corpus_store(empty, cache)


def test_an_edited_corpus_file_rebuilds_its_store_and_bm25_index(tmp_path, real_records, caplog) -> None:
    """Same path, other bytes: another store and BM25 index; the old ones stay cached and are reused as they are."""
    from canopy_lit.retrieval.bm25 import build_bm25_retriever

    path = _write(tmp_path / "corpus.jsonl", real_records)
    cache = tmp_path / "cache"
    first = build_bm25_retriever(corpus=path, cache_dir=cache)
    assert first.corpus.ids == [str(r["id"]) for r in real_records]
    assert first.retrieve("lighthouse", 1).ids == ["7"]
    edited = [dict(r) for r in real_records]
    edited[3]["text"] = "A short note about a windmill in a field of tulips."
    _write(path, edited)
    second = build_bm25_retriever(corpus=path, cache_dir=cache)
    assert second.corpus.path != first.corpus.path
    assert "7" not in second.retrieve("lighthouse", 4).ids and second.retrieve("windmill tulips", 1).ids == ["7"]
    assert len(list(cache.glob("corpus-*.jsonl"))) == 2 and len(list(cache.glob("bm25-*"))) == 2
    # the first content again: the first store, untouched
    mtime = first.corpus.path.stat().st_mtime_ns
    _write(path, real_records)
    assert user_corpus_store(path, cache).path == first.corpus.path
    assert first.corpus.path.stat().st_mtime_ns == mtime
    # the same bytes at another path of the same folder are the same corpus; a damaged store is rewritten
    copy = shutil.copy(path, tmp_path / "copy.jsonl")
    store = user_corpus_store(copy, cache)
    assert store.path == first.corpus.path
    store.path.write_text(store.path.read_text().splitlines(keepends=True)[0], encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="canopy_lit.retrieval.user_corpus"):
        again = user_corpus_store(copy, cache)
    assert len(again) == len(real_records) and any("rebuilding the corpus" in r.getMessage() for r in caplog.records)


def test_an_edited_corpus_file_rebuilds_its_embeddings_and_faiss_index(tmp_path, real_records) -> None:
    """MiniLM + FAISS: the embeddings and the index are keyed on the store's bytes, so an edit re-encodes."""
    from canopy_lit.encoders import load_encoder
    from canopy_lit.retrieval.retriever import build_retriever

    encoder = load_encoder("minilm")
    path = _write(tmp_path / "corpus.jsonl", real_records)
    cache = tmp_path / "cache"
    first = build_retriever(encoder, corpus=path, cache_dir=cache, index="flat")
    assert first.retrieve("a lighthouse standing on a rock", 1).ids == ["7"]
    edited = [r for r in real_records if r["id"] != 7] + [
        {"id": "new", "title": "Windmill", "text": "A windmill turns slowly in a field of red tulips."}
    ]
    _write(path, edited)
    second = build_retriever(encoder, corpus=path, cache_dir=cache, index="flat")
    assert second.corpus.ids == [str(r["id"]) for r in edited]
    assert second.retrieve("windmill and tulips", 1).ids == ["new"]
    assert "7" not in second.retrieve("a lighthouse standing on a rock", len(edited)).ids
    assert len(list(cache.glob("emb-*"))) == 2 and len(list(cache.glob("index-*"))) == 2


def test_unknown_corpus_options_are_refused(tmp_path, real_records) -> None:
    from canopy_lit.retrieval.user_corpus import open_corpus

    path = _write(tmp_path / "corpus.jsonl", real_records)
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['media_rot'\]"):
        open_corpus([], tmp_path, path, {"media_rot": str(tmp_path)})
    assert isinstance(next(iter(open_corpus([], tmp_path, path, {}))), Item)


def test_the_how_to_example_corpus_reads_as_written(tmp_path) -> None:
    """docs/how-to/own-corpus.md's four records (its image path is relative to the clone's root)."""
    import re

    guide = (Path(__file__).resolve().parents[2] / "docs" / "how-to" / "own-corpus.md").read_text(encoding="utf-8")
    body = re.search(r"cat > my_corpus.jsonl <<'EOF'\n(.*?)\nEOF\n", guide, re.S).group(1)
    path = tmp_path / "my_corpus.jsonl"
    path.write_text(body + "\n", encoding="utf-8")
    items = list(read_corpus(path, media_root=DATA.parent))
    assert [(i.id, i.modality.value) for i in items] == [
        ("eiffel", "text"), ("heights", "table"), ("louvre", "text"), ("hdf-photo", "image")]  # fmt: skip
    assert Path(items[3].image).is_file()


def test_retrieval_corpus_reaches_the_corpus_retriever_and_the_run_settings(
    hydra_ctx, tmp_path, real_records, caplog
) -> None:
    """``retriever=corpus retrieval=bm25 retrieval.corpus=P``: checked config, the file's items, P in settings.json
    (null when left at the union)."""
    from hydra import compose

    from canopy_lit.eval.records import run_settings
    from canopy_lit.hierarchy import Hierarchy
    from canopy_lit.pipeline.build import build_retriever
    from canopy_lit.schema import validate_eval_config

    path = _write(tmp_path / "corpus.jsonl", real_records)
    common = [f"paths.root_dir={tmp_path}", f"retrieval.cache_dir={tmp_path / 'cache'}", "data=hotpotqa"]
    cfg = compose("evaluate", overrides=[*common, "retriever=corpus", "retrieval=bm25", f"retrieval.corpus={path}"])
    validate_eval_config(cfg)
    bench = load_benchmark("hotpotqa")
    retriever = build_retriever(cfg, bench, None, Hierarchy(), None)
    assert retriever.corpus.ids == [str(r["id"]) for r in real_records]  # the loaded benchmark adds nothing
    assert run_settings(cfg)["retrieval.corpus"] == "${paths.root_dir}/corpus.jsonl"  # a path under the root, as data.path
    default = compose("evaluate", overrides=common)
    assert run_settings(default)["retrieval.corpus"] is None
    # retriever=candidates reads no corpus, and says so
    cand = compose("evaluate", overrides=[*common, "retriever=candidates", f"retrieval.corpus={path}"])
    with caplog.at_level(logging.WARNING, logger="canopy_lit.retrieval.scopes"):
        build_retriever(cand, bench, None, Hierarchy(), None)
    assert any("read by retriever=corpus only" in r.getMessage() for r in caplog.records)
