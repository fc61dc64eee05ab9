"""The union corpus is keyed by its sources' content, and the run's ``data.path`` reaches it.

Real bundled TAT-QA dev documents (BM25 where the index kind does not matter; MiniLM for the dense one).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

pytest.importorskip("bm25s")

from canopy_lit.data import load_benchmark  # noqa: E402
from canopy_lit.retrieval.bm25 import build_bm25_retriever  # noqa: E402
from canopy_lit.retrieval.corpus import CorpusStore  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "data"
TATQA = DATA / "tatqa" / "tatqa_dataset_dev.json"


@pytest.fixture(scope="module")
def docs() -> list[dict]:
    return json.loads(TATQA.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def full_ids() -> list[str]:
    return list(load_benchmark("tatqa").items)


def _write(path: Path, docs: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(docs), encoding="utf-8")
    return path


def test_small_data_dir_copy_then_bundled_file_retrieves_from_the_full_corpus(
    tmp_path, monkeypatch, docs, full_ids
) -> None:
    """A 3-document TAT-QA under another data folder, then the bundled one, same cache: the second run
    held the 3-document corpus (its file name came from the benchmark names alone)."""
    small_root = tmp_path / "small_data"
    _write(small_root / "tatqa" / "tatqa_dataset_dev.json", docs[:3])
    cache = tmp_path / "cache"
    monkeypatch.setenv("CANOPY_LIT_DATA", str(small_root))
    small = build_bm25_retriever(benchmarks=["tatqa"], cache_dir=cache)
    assert 0 < len(small.corpus) < 20
    monkeypatch.delenv("CANOPY_LIT_DATA")
    full = build_bm25_retriever(benchmarks=["tatqa"], cache_dir=cache)
    assert full.corpus.ids == full_ids
    question = load_benchmark("tatqa").questions[-1]  # a question of a document the small copy lacks
    assert set(full.retrieve(question.text, 5).ids) - set(small.corpus.ids)
    # Both corpora stay cached side by side; the small one is reused as it is.
    assert len(list(cache.glob("corpus-*.jsonl"))) == 2
    monkeypatch.setenv("CANOPY_LIT_DATA", str(small_root))
    assert build_bm25_retriever(benchmarks=["tatqa"], cache_dir=cache).corpus.ids == small.corpus.ids


def test_a_source_file_edited_in_place_rebuilds_the_corpus(tmp_path, docs) -> None:
    """Same path, other bytes (3 documents, then 5): the corpus and its BM25 index follow the file."""
    path = _write(tmp_path / "tatqa_copy.json", docs[:3])
    opts = {"tatqa": {"path": str(path)}}
    first = build_bm25_retriever(benchmarks=["tatqa"], cache_dir=tmp_path / "cache", benchmark_options=opts)
    _write(path, docs[:5])
    second = build_bm25_retriever(benchmarks=["tatqa"], cache_dir=tmp_path / "cache", benchmark_options=opts)
    assert second.corpus.ids == list(load_benchmark("tatqa", path).items)
    assert len(second.corpus) > len(first.corpus)
    assert second.index.scores["num_docs"] == len(second.corpus)


def test_a_corpus_file_changed_after_it_was_written_is_rebuilt(tmp_path, docs, caplog) -> None:
    """The manifest beside the JSONL records its bytes: a truncated file is rebuilt, with one warning."""
    path = _write(tmp_path / "tatqa_copy.json", docs[:3])
    opts = {"tatqa": {"path": str(path)}}
    store = CorpusStore.from_benchmarks(["tatqa"], tmp_path / "cache", options=opts)
    n = len(store)
    lines = store.path.read_text(encoding="utf-8").splitlines(keepends=True)
    store.path.write_text("".join(lines[:2]), encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="canopy_lit.retrieval.corpus"):
        again = CorpusStore.from_benchmarks(["tatqa"], tmp_path / "cache", options=opts)
    assert again.path == store.path and len(again) == n
    assert any("rebuilding the corpus" in r.getMessage() for r in caplog.records)
    manifest = json.loads(again.path.with_suffix(".json").read_text())
    assert manifest["sha256"] == again.digest() and manifest["items"] == n


def test_dense_index_follows_the_source_content(tmp_path, docs) -> None:
    """FAISS over MiniLM: the file at one path changes from documents 0-1 to 2-3; the second index holds
    only the new items (the embeddings and the index are keyed on the corpus bytes)."""
    from canopy_lit.encoders import load_encoder
    from canopy_lit.retrieval.retriever import build_retriever

    encoder = load_encoder("minilm")
    path = _write(tmp_path / "tatqa_copy.json", docs[:2])
    kw = {"benchmarks": ["tatqa"], "cache_dir": tmp_path / "cache", "index": "flat",
          "benchmark_options": {"tatqa": {"path": str(path)}}}  # fmt: skip
    first = build_retriever(encoder, **kw)
    _write(path, docs[2:4])
    second = build_retriever(encoder, **kw)
    new_ids = list(load_benchmark("tatqa", path).items)
    assert second.corpus.ids == new_ids and not set(new_ids) & set(first.corpus.ids)
    hits = second.retrieve("revenue", len(new_ids))
    assert set(hits.ids) == set(new_ids)


def test_data_path_reaches_the_corpus_retriever(hydra_ctx, tmp_path, docs) -> None:
    """``retriever=corpus data=tatqa data.path=P``: the corpus holds P's items, not the bundled file's."""
    from hydra import compose

    from canopy_lit.hierarchy import Hierarchy
    from canopy_lit.pipeline.build import build_retriever, load_questions

    path = _write(tmp_path / "tatqa_three_docs.json", docs[:3])
    cfg = compose(
        "evaluate",
        overrides=[
            "retriever=corpus", "retrieval=bm25", "retrieval.benchmarks=[tatqa]", "data=tatqa",
            f"data.path={path}", "data.split=all", f"paths.root_dir={tmp_path}",
        ],
    )  # fmt: skip
    bench, _ = load_questions(cfg, notify=lambda line: None)
    retriever = build_retriever(cfg, bench, None, Hierarchy(), None)
    assert retriever.corpus.ids == list(bench.items)
    assert len(retriever.corpus) < len(load_benchmark("tatqa").items)


def test_a_benchmark_outside_the_union_is_named(hydra_ctx, tmp_path, docs, caplog) -> None:
    """``data=X`` not in ``retrieval.benchmarks``: the corpus is the union's, and one warning says so."""
    from hydra import compose

    from canopy_lit.hierarchy import Hierarchy
    from canopy_lit.pipeline.build import build_retriever

    path = _write(tmp_path / "tatqa_three_docs.json", docs[:3])
    other = _write(tmp_path / "tatqa_two_docs.json", docs[3:5])
    cfg = compose(
        "evaluate",
        overrides=[
            "retriever=corpus", "retrieval=bm25", "retrieval.benchmarks=[tatqa]", "data=nq",
            f"+retrieval.benchmark_options={{tatqa: {{path: '{other}'}}}}", f"paths.root_dir={tmp_path}",
        ],
    )  # fmt: skip
    bench = load_benchmark("tatqa", path)
    bench.name = "nq"
    with caplog.at_level(logging.WARNING, logger="canopy_lit.retrieval.scopes"):
        retriever = build_retriever(cfg, bench, None, Hierarchy(), None)
    assert retriever.corpus.ids == list(load_benchmark("tatqa", other).items)
    assert any("not in retrieval.benchmarks" in r.getMessage() for r in caplog.records)
