"""FaissIndex: exclusion, partitions, persistence and fp16-vs-fp32 agreement (synthetic vectors)."""

from __future__ import annotations

import numpy as np
import pytest

from canopy_lit.retrieval.index import FaissIndex, normalize


@pytest.fixture(autouse=True)
def _one_faiss_thread():
    # OpenMP spin-waits on a shared 2-core box make tiny builds ~25x slower with 2 threads.
    import faiss

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


def _data(n: int = 300, d: int = 32, seed: int = 0) -> tuple[list[str], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return [f"it{i}" for i in range(n)], rng.standard_normal((n, d)).astype(np.float32), rng.standard_normal((7, d))


def _brute(vectors: np.ndarray, queries: np.ndarray) -> np.ndarray:
    return normalize(queries) @ normalize(vectors).T  # (Q, N) cosines


def test_flat_matches_brute_force_order() -> None:
    ids, x, q = _data()
    res = FaissIndex.build(ids, x, kind="flat").search(q, 10)
    sims = _brute(x, q)
    for row, got in enumerate(res.ids):
        expect = [ids[j] for j in np.argsort(-sims[row])[:10]]
        assert got == expect
        np.testing.assert_allclose(res.scores[row], np.sort(sims[row])[::-1][:10], atol=1e-5)


def test_exclude_returns_k_items_none_excluded() -> None:
    ids, x, q = _data()
    index = FaissIndex.build(ids, x)
    top = index.search(q, 10).ids
    banned = set(top[0][:8]) | set(top[1][:3])  # shared set: most of query 0's top list
    res = index.search(q, 10, exclude=banned)
    for row, got in enumerate(res.ids):
        assert len(got) == 10 and not set(got) & banned
        # The survivors keep their order: they are the top of the unfiltered ranking minus the banned ids.
        expect = [i for i in index.search(q[row], 10 + len(banned)).ids[0] if i not in banned][:10]
        assert got == expect


def test_exclude_per_query_and_grows_past_first_fetch() -> None:
    ids, x, q = _data(n=50)
    index = FaissIndex.build(ids, x, kind="flat")
    full = index.search(q, 50).ids
    per_query = [set(f[:45]) for f in full]  # leaves exactly 5 per query
    res = index.search(q, 10, exclude=per_query)
    for got, f in zip(res.ids, full, strict=True):
        assert got == f[45:]  # fewer than k left: all of them, in order


def test_exclude_rejects_a_bare_string() -> None:
    ids, x, q = _data(n=20)
    with pytest.raises(TypeError):
        FaissIndex.build(ids, x).search(q, 3, exclude="it1")


def test_partitions_merge_exactly_and_restrict() -> None:
    ids, x, q = _data()
    groups = ["text" if i % 3 else "table" for i in range(len(ids))]
    whole = FaissIndex.build(ids, x, kind="flat")
    parts = FaissIndex.build(ids, x, groups=groups, kind="flat")
    assert sorted(parts.groups) == ["table", "text"] and len(parts) == len(ids)
    assert parts.search(q, 15).ids == whole.search(q, 15).ids
    tables = parts.search(q, 5, groups=["table"])
    assert all(int(i[2:]) % 3 == 0 for row in tables.ids for i in row)
    with pytest.raises(KeyError, match="no index partition"):
        parts.search(q, 5, groups=["video"])


def test_save_load_round_trip(tmp_path) -> None:
    ids, x, q = _data()
    groups = ["a" if i % 2 else "b" for i in range(len(ids))]
    index = FaissIndex.build(ids, x, groups=groups)
    before = index.search(q, 10, exclude={"it3"})
    index.save(tmp_path / "idx")
    loaded = FaissIndex.load(tmp_path / "idx")
    after = loaded.search(q, 10, exclude={"it3"})
    assert loaded.kind == "flat_sq_fp16" and loaded.groups == index.groups
    assert after.ids == before.ids
    np.testing.assert_allclose(after.scores, before.scores, atol=1e-6)
    with pytest.raises(FileNotFoundError, match="meta.json"):
        FaissIndex.load(tmp_path / "missing")


def test_sq_fp16_agrees_with_flat() -> None:
    ids, x, q = _data(n=2000, d=64)
    flat = FaissIndex.build(ids, x, kind="flat").search(q, 10)
    sq = FaissIndex.build(ids, x, kind="flat_sq_fp16").search(q, 10)
    np.testing.assert_allclose(sq.scores, flat.scores, atol=2e-3)  # fp16 codes: ~1e-3 cosine error
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(sq.ids, flat.ids, strict=True)])
    assert overlap >= 0.9


def test_ivfpq_builds_and_small_partitions_fall_back() -> None:
    ids, x, q = _data(n=1000, d=32)
    index = FaissIndex.build(ids, x, kind="ivfpq", nlist=8, pq_m=8, pq_nbits=4, nprobe=8)
    res = index.search(q, 10)
    flat = FaissIndex.build(ids, x, kind="flat").search(q, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(res.ids, flat.ids, strict=True)])
    assert recall > 0.3  # 4-byte PQ codes are lossy; all cells probed, so far above chance (10/1000)
    assert all(len(r) == 10 for r in res.ids)
    small = FaissIndex.build(ids[:50], x[:50], kind="ivfpq", nlist=8, pq_m=8, pq_nbits=4)
    assert type(small.parts["all"]).__name__ == "IndexScalarQuantizer"


def test_bad_input_errors() -> None:
    ids, x, _ = _data(n=10)
    with pytest.raises(ValueError, match="one id per row"):
        FaissIndex.build(ids[:5], x)
    with pytest.raises(ValueError, match="duplicate"):
        FaissIndex.build(["a"] * 10, x)
    with pytest.raises(ValueError, match="unknown index kind"):
        FaissIndex.build(ids, x, kind="hnsw")
    with pytest.raises(ValueError, match="query dim"):
        FaissIndex.build(ids, x).search(np.zeros((1, 3)), 1)
