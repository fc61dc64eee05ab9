"""Streaming index build from embedding shards on disk, ids on disk, exact sharded search (synthetic vectors)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from canopy_lit.retrieval.ids import IdArray, IdMap, write_ids
from canopy_lit.retrieval.index import FaissIndex, normalize


@pytest.fixture(autouse=True)
def _one_faiss_thread():
    # OpenMP spin-waits on a shared 2-core box make tiny builds ~25x slower with 2 threads.
    import faiss

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


def _write_shards(folder, ids, x, sizes, rng) -> None:
    """``encode_corpus``'s layout: rows in another order than ``ids``, cut into shards of ``sizes``."""
    folder.mkdir(parents=True, exist_ok=True)
    order = rng.permutation(len(ids))
    lo = 0
    for s, size in enumerate(sizes):
        rows = order[lo : lo + size]
        lo += size
        (folder / f"shard-r0-{s:06d}.ids.json").write_text(json.dumps([ids[r] for r in rows]))
        np.save(folder / f"shard-r0-{s:06d}.npy", x[rows])
    assert lo == len(ids)


@pytest.fixture
def shards(tmp_path):
    rng = np.random.default_rng(0)
    n, d = 1000, 32
    ids = [f"it{i}" if i % 7 else f"itém:{i}/ü" for i in range(n)]  # non-ASCII ids survive the byte store
    x = rng.standard_normal((n, d)).astype(np.float32)
    groups = ["text" if i % 4 else "table" for i in range(n)]
    _write_shards(tmp_path / "emb", ids, x, [300, 300, 250, 150], rng)
    # a DDP repeat (same id, same vector) and an id the corpus lacks: both ignored
    (tmp_path / "emb" / "shard-r1-000000.ids.json").write_text(json.dumps([ids[5], "not-in-corpus"]))
    np.save(tmp_path / "emb" / "shard-r1-000000.npy", x[[5, 6]])
    q = rng.standard_normal((20, d)).astype(np.float32)
    return tmp_path, ids, x, groups, q


@pytest.mark.parametrize(
    "kind,opts",
    [("flat", {}), ("flat_sq_fp16", {}), ("ivfpq", {"nlist": 8, "pq_m": 8, "pq_nbits": 4, "nprobe": 4})],
)
def test_streaming_build_equals_in_memory_build(shards, kind, opts) -> None:
    tmp, ids, x, groups, q = shards
    ref = FaissIndex.build(ids, x, groups=groups, kind=kind, **opts)
    got = FaissIndex.build_from_shards(tmp / "emb", ids, tmp / "idx", groups=groups, kind=kind,
                                       block_bytes=4 * 32 * 97, **opts)  # fmt: skip  # 97-row blocks
    assert got.groups == ref.groups == ["table", "text"] and len(got) == len(ids)
    for g in ref.groups:  # same ids in the same order, and the very same codes
        assert isinstance(got.part_ids[g], IdArray) and list(got.part_ids[g]) == list(ref.part_ids[g])
        assert got.parts[g].ntotal == ref.parts[g].ntotal
    a, b = ref.search(q, 10, exclude={ids[3]}), got.search(q, 10, exclude={ids[3]})
    assert a.ids == b.ids and a.scores == b.scores
    loaded = FaissIndex.load(tmp / "idx")
    assert loaded.search(q, 10).ids == ref.search(q, 10).ids
    assert not list(tmp.glob("idx.tmp*"))  # built under a temporary name, renamed when complete


def test_flat_codes_written_in_place_equal_faiss_add(shards) -> None:
    import faiss

    tmp, ids, x, _, _ = shards
    xn = x.copy()
    faiss.normalize_L2(xn)
    for kind, ref in (
        (
            "flat_sq_fp16",
            faiss.IndexScalarQuantizer(32, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT),
        ),
        ("flat", faiss.IndexFlatIP(32)),
    ):
        got = FaissIndex.build_from_shards(tmp / "emb", ids, tmp / kind, kind=kind, block_bytes=4 * 32 * 64)
        ref.add(xn)  # what earlier versions did: one add of the whole normalised matrix
        assert np.array_equal(faiss.serialize_index(got.parts["all"]), faiss.serialize_index(ref))


def test_sharded_search_merges_exactly(shards) -> None:
    tmp, ids, x, groups, q = shards
    one = FaissIndex.build(ids, x, groups=groups, kind="flat")
    many = FaissIndex.build_from_shards(
        tmp / "emb", ids, tmp / "idx", groups=groups, kind="flat", shard_vectors=97
    )
    assert [len(many.parts[g].indexes) for g in many.groups] == [3, 8]  # 250 tables, 750 texts
    for k in (1, 10, 120):
        a, b = one.search(q, k), many.search(q, k)
        assert a.ids == b.ids
        np.testing.assert_allclose(a.scores, b.scores, atol=1e-6)
    per_query = [set(r[:5]) for r in one.search(q, 5).ids]
    assert many.search(q, 10, exclude=per_query).ids == one.search(q, 10, exclude=per_query).ids
    loaded = FaissIndex.load(tmp / "idx")
    assert json.loads((tmp / "idx" / "meta.json").read_text())["shards"] == {"table": 3, "text": 8}
    assert loaded.search(q, 10).ids == one.search(q, 10).ids
    # an in-memory build shards the same way, and saving it writes the same layout
    mem = FaissIndex.build(ids, x, groups=groups, kind="flat", shard_vectors=97)
    assert mem.search(q, 10).ids == one.search(q, 10).ids
    assert FaissIndex.load(mem.save(tmp / "mem")).search(q, 10).ids == one.search(q, 10).ids


def test_sharded_ties_order_as_one_faiss_index() -> None:
    import faiss

    rng = np.random.default_rng(2)
    x = rng.standard_normal((60, 8)).astype(np.float32)
    x[[13, 29, 44, 58]] = x[5]  # exact score ties spread over several shards
    ids = [f"it{i}" for i in range(60)]
    q = np.concatenate(
        [x[[5]], rng.standard_normal((24, 8)).astype(np.float32)]
    )  # 25 queries: FAISS's BLAS path
    one = faiss.IndexFlatIP(8)
    one.add(normalize(x))
    _, lab = one.search(normalize(q), 6)
    got = FaissIndex.build(ids, x, kind="flat", shard_vectors=7).search(q, 6).ids
    assert got == [[ids[j] for j in row] for row in lab]
    assert got[0][:5] == ["it58", "it44", "it29", "it13", "it5"]


def test_missing_embedding_and_bad_shards_are_one_clear_error(shards) -> None:
    tmp, ids, x, _, _ = shards
    with pytest.raises(KeyError, match=r"emb: 1 ids have no embedding, e\.g\. \['extra'\]"):
        FaissIndex.build_from_shards(tmp / "emb", [*ids, "extra"], tmp / "idx")
    with pytest.raises(ValueError, match="duplicate ids"):
        FaissIndex.build_from_shards(tmp / "emb", [*ids, ids[0]], tmp / "idx")
    np.save(tmp / "emb" / "shard-r1-000000.npy", x[:3])  # 3 vectors for 2 ids
    with pytest.raises(ValueError, match=r"shard-r1-000000\.npy: \(3, 32\) vectors for 2 ids"):
        FaissIndex.build_from_shards(tmp / "emb", ids, tmp / "idx")
    assert not (tmp / "idx").exists()
    with pytest.raises(ValueError, match="no finished embedding shards"):
        FaissIndex.build_from_shards(tmp / "nothing", [], tmp / "idx")


def test_a_failed_build_leaves_no_index_folder(shards, monkeypatch) -> None:
    import canopy_lit.retrieval.ids as ids_mod

    tmp, ids, _, groups, _ = shards

    def boom(self, ids):
        raise OSError("disk full")

    monkeypatch.setattr(ids_mod.IdWriter, "add", boom)
    with pytest.raises(OSError, match="disk full"):
        FaissIndex.build_from_shards(tmp / "emb", ids, tmp / "idx", groups=groups)
    assert not (tmp / "idx").exists() and not list(tmp.glob("idx.tmp*"))


def test_id_array_and_id_map(tmp_path) -> None:
    ids = ["a", "", "ünï/cödé", "b" * 300, "a2"]
    arr = write_ids(tmp_path / "x", ids)
    assert len(arr) == 5 and list(arr) == ids and arr[2] == ids[2] and arr[-1] == "a2"
    assert arr[np.array([[4, 0], [3, 1]])].tolist() == [["a2", "a"], [ids[3], ""]]
    assert list(IdArray(tmp_path / "x")[1:3]) == ids[1:3]
    with pytest.raises(IndexError):
        arr[5]
    m = IdMap(ids)
    assert m.rows(["a2", "zz", "", ids[3]]).tolist() == [4, -1, 1, 3] and m.row("nope") is None
    assert m.duplicates == [] and IdMap(["x", "y", "x"]).duplicates == ["x"]


def test_old_index_layout_with_json_ids_still_loads(tmp_path) -> None:
    ids, x = (
        [f"it{i}" for i in range(50)],
        np.random.default_rng(1).standard_normal((50, 16)).astype(np.float32),
    )
    index = FaissIndex.build(ids, x)
    path = index.save(tmp_path / "idx")
    for f in path.glob("all.ids.*"):
        f.unlink()
    (path / "all.ids.json").write_text(json.dumps(ids))  # what earlier versions wrote
    assert FaissIndex.load(path).search(x[:3], 5).ids == index.search(x[:3], 5).ids
