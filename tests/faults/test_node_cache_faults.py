"""A damaged node-embedding cache on disk: detected, named, moved aside and rebuilt (real MiniLM, real HotpotQA items).

Each case damages the SQLite store of a warm cache the way a crash, a bad disk or a stray
writer would, then asks a new cache object for the same trees: the answer must be the
fresh encoder's vectors (so the scores are right), the damaged file must sit next to the
new one as ``<file>.corrupt-<time>``, and the warning must name it.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.scoring.node_cache import NodeEmbeddingCache
from canopy_lit.scoring.node_keys import row_checksum

N_ITEMS = 3  # multi-sentence HotpotQA paragraphs: a store of several SQLite pages


@pytest.fixture(scope="module")
def encoder():
    from canopy_lit.encoders import load_encoder

    return load_encoder("minilm")


@pytest.fixture(scope="module")
def trees():
    from canopy_lit.data import load_benchmark

    h = Hierarchy(2)
    items = [it for it in load_benchmark("hotpotqa").items.values() if it.modality.value == "text"]
    built = [h.build(it) for it in items]
    return [t for t in built if len(t) >= 5][:N_ITEMS]


@pytest.fixture(scope="module")
def reference(encoder, trees):
    """Fresh fθ vectors of every node and f0 scores against one real question."""
    h = Hierarchy(2)
    vecs = [encoder.encode_nodes([h.node_input(t, i) for i in range(len(t))]).numpy() for t in trees]
    q = encoder.encode_queries(["Which magazine was started first?"]).numpy()[0]
    return vecs, q


def warm_store(encoder, trees, cache_dir: Path) -> Path:
    cache = NodeEmbeddingCache(encoder, Hierarchy(2), cache_dir=cache_dir)
    cache.embed_trees(trees)
    path = cache.path_for(cache.fingerprint)
    cache.close()
    assert path is not None and path.is_file()
    return path


def read_back(encoder, trees, cache_dir: Path) -> tuple[list[np.ndarray], NodeEmbeddingCache]:
    cache = NodeEmbeddingCache(encoder, Hierarchy(2), cache_dir=cache_dir)
    return cache.embed_trees(trees), cache


def assert_recovered(path: Path, got, cache, reference, caplog, trees) -> None:
    vecs, q = reference
    for g, ref in zip(got, vecs, strict=True):
        np.testing.assert_allclose(g, ref, atol=1e-5)
        np.testing.assert_allclose(g @ q, ref @ q, atol=1e-5)  # the scores refinement compares
    aside = list(path.parent.glob(f"{path.name}.corrupt-*"))
    assert len([p for p in aside if not p.name.endswith(("-wal", "-shm"))]) == 1
    assert any(str(path) in r.getMessage() and "corrupt" in r.getMessage() for r in caplog.records)
    assert cache.stats()["misses"] == sum(len(t) for t in trees)  # rebuilt from the encoder
    cache.close()
    # The rebuilt store serves the same vectors on the next run, without the encoder.
    again, warm = read_back_cached(cache.encoder, trees, path.parent)
    assert warm.stats()["misses"] == 0
    for g, ref in zip(again, vecs, strict=True):
        np.testing.assert_allclose(g, ref, atol=1e-5)


def read_back_cached(encoder, trees, cache_dir: Path):
    got, cache = read_back(encoder, trees, cache_dir)
    cache.close()
    return got, cache


def test_random_vectors_of_valid_length_fail_the_checksum(
    encoder, trees, reference, tmp_path, caplog
) -> None:
    path = warm_store(encoder, trees, tmp_path)
    with sqlite3.connect(path) as db:  # a stray writer: right length, wrong numbers, old checksums
        rows = db.execute("SELECT item, start, end_, vec FROM nodes").fetchall()
        rng = np.random.default_rng(0)
        db.executemany(
            "UPDATE nodes SET vec = ? WHERE item = ? AND start = ? AND end_ = ?",
            [(rng.standard_normal(len(v) // 4).astype(np.float32).tobytes(), i, s, e) for i, s, e, v in rows],
        )
    db.close()
    with caplog.at_level(logging.WARNING):
        got, cache = read_back(encoder, trees, tmp_path)
    assert any("checksum" in r.getMessage() for r in caplog.records)
    assert_recovered(path, got, cache, reference, caplog, trees)


def test_truncated_sqlite_file(encoder, trees, reference, tmp_path, caplog) -> None:
    path = warm_store(encoder, trees, tmp_path)
    size = path.stat().st_size
    with path.open("r+b") as fh:  # a copy or a disk that stopped half way
        fh.truncate(size // 2)
    with caplog.at_level(logging.WARNING):
        got, cache = read_back(encoder, trees, tmp_path)
    assert_recovered(path, got, cache, reference, caplog, trees)


def test_garbage_file(encoder, trees, reference, tmp_path, caplog) -> None:
    cache = NodeEmbeddingCache(encoder, Hierarchy(2), cache_dir=tmp_path)
    path = cache.path_for(cache.fingerprint)
    path.write_bytes(np.random.default_rng(1).bytes(20_000))
    with caplog.at_level(logging.WARNING):
        got = cache.embed_trees(trees)
    assert any("not a database" in r.getMessage() for r in caplog.records)
    assert_recovered(path, got, cache, reference, caplog, trees)


def test_wrong_dim_vectors_with_valid_checksums(encoder, trees, reference, tmp_path, caplog) -> None:
    path = warm_store(encoder, trees, tmp_path)
    short = np.ones(25, np.float32).tobytes()  # e.g. vectors of another encoder copied into the file
    with sqlite3.connect(path) as db:
        keys = db.execute("SELECT item, digest, start, end_, cut FROM nodes").fetchall()
        db.executemany(
            "UPDATE nodes SET vec = ?, sum = ? WHERE item = ? AND digest = ? AND start = ? AND end_ = ?",
            [(short, row_checksum(i, d, s, e, c, short), i, d, s, e) for i, d, s, e, c in keys],
        )
    db.close()
    with caplog.at_level(logging.WARNING):
        got, cache = read_back(encoder, trees, tmp_path)
    assert any("100 bytes, expected 1536" in r.getMessage() for r in caplog.records)
    assert_recovered(path, got, cache, reference, caplog, trees)


def test_other_sqlite_errors_name_the_file(encoder, trees, tmp_path) -> None:
    cache = NodeEmbeddingCache(encoder, Hierarchy(2), cache_dir=tmp_path)
    path = cache.path_for(cache.fingerprint)
    path.mkdir(parents=True)  # not a file: SQLite cannot open it, and moving it aside would not help
    with pytest.raises(RuntimeError, match=str(path)):
        cache.embed_trees(trees[:1])
    assert path.is_dir() and not list(tmp_path.glob("*.corrupt-*"))
    os.rmdir(path)


def test_an_item_id_reused_for_other_text_is_encoded_again(encoder, trees, tmp_path) -> None:
    # A benchmark file edited (or another version of it) keeps an item's id but not its sentences: the
    # vectors of the old text must not be served for the new one, from memory or from disk.
    from dataclasses import replace

    h = Hierarchy(2)
    old_tree, donor = trees[0], trees[1]
    edited = replace(old_tree.item, sentences=list(donor.item.sentences), text=None)
    new_tree = h.build(edited)
    assert new_tree.item.id == old_tree.item.id and edited.text != old_tree.item.text
    fresh = encoder.encode_nodes([h.node_input(new_tree, i) for i in range(len(new_tree))]).numpy()

    warm = NodeEmbeddingCache(encoder, h, cache_dir=tmp_path)
    warm.embed_tree(old_tree)
    served = warm.embed_tree(new_tree)  # same cache object: the memory tier
    assert warm.stats()["misses"] == len(old_tree) + len(new_tree)
    np.testing.assert_allclose(served, fresh, atol=1e-5)
    warm.close()

    NodeEmbeddingCache(encoder, h, cache_dir=tmp_path / "disk").embed_tree(old_tree)
    cold = NodeEmbeddingCache(encoder, h, cache_dir=tmp_path / "disk")  # a new run: the disk tier
    np.testing.assert_allclose(cold.embed_tree(new_tree), fresh, atol=1e-5)
    assert cold.stats()["misses"] == len(new_tree) and cold.stats()["disk_hits"] == 0
    again = NodeEmbeddingCache(encoder, h, cache_dir=tmp_path / "disk")  # both versions stay cached
    again.embed_trees([old_tree, new_tree])
    assert again.stats()["misses"] == 0


def test_a_store_of_the_older_schema_is_moved_aside_not_read(encoder, trees, tmp_path, caplog) -> None:
    # Schema 2 keyed rows by (item id, leaf range) only: its vectors may belong to other text.
    cache = NodeEmbeddingCache(encoder, Hierarchy(2), cache_dir=tmp_path)
    path = cache.path_for(cache.fingerprint)
    assert path is not None
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        db.executemany("INSERT INTO meta VALUES (?, ?)",
                       [("fingerprint", cache.fingerprint), ("dim", "384"), ("schema", "2")])  # fmt: skip
        db.execute("CREATE TABLE nodes (item TEXT, start INTEGER, end_ INTEGER, vec BLOB, sum BLOB,"
                   " PRIMARY KEY (item, start, end_)) WITHOUT ROWID")  # fmt: skip
    db.close()
    with caplog.at_level(logging.WARNING):
        cache.embed_trees(trees)
    assert cache.stats()["misses"] == sum(len(t) for t in trees)
    assert len(list(tmp_path.glob(f"{path.name}.outdated-*"))) == 1
    assert any(str(path) in r.getMessage() and "schema 2 of an older canopy-lit" in r.getMessage()
               for r in caplog.records)  # fmt: skip
    cache.close()
