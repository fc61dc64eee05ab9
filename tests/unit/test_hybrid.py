"""Reciprocal-rank fusion by hand, and the hybrid retriever over real MiniLM + BM25 on bundled items."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("bm25s")

from canopy_lit.retrieval.bm25 import BM25Retriever, ItemPool  # noqa: E402
from canopy_lit.retrieval.candidates import CandidateRetriever  # noqa: E402
from canopy_lit.retrieval.corpus import render_item  # noqa: E402
from canopy_lit.retrieval.hybrid import HybridRetriever, build_hybrid_retriever, reciprocal_rank_fusion  # noqa: E402

FIXTURE_2WIKI = (
    Path(__file__).resolve().parents[2] / "data" / "fixtures" / "hotpot_format_2wiki_layout_from_bundled.json"
)


def test_rrf_by_hand() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["c", "a"]], rrf_k=60)
    # a: 1/61 + 1/62 = .032525; c: 1/63 + 1/61 = .032266; b: 1/62 = .016129
    assert [i for i, _ in fused] == ["a", "c", "b"]
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 62) and fused[2][1] == pytest.approx(1 / 62)
    # weights: a zero weight turns a ranking off; rrf_k=0 trusts the top ranks most
    assert [i for i, _ in reciprocal_rank_fusion([["a", "b", "c"], ["c", "a"]], [0.0, 1.0])] == [
        "c",
        "a",
        "b",
    ]
    assert [i for i, _ in reciprocal_rank_fusion([["x", "y", "z"], ["z", "y", "x"]], rrf_k=0)][0] in (
        "x",
        "z",
    )
    assert [i for i, _ in reciprocal_rank_fusion([["x", "y"], ["y", "x"]])] == ["x", "y"]  # tie: first seen
    with pytest.raises(ValueError, match="2 weights for 1 rankings"):
        reciprocal_rank_fusion([["a"]], [1.0, 1.0])


@pytest.fixture(scope="module")
def encoder():
    from canopy_lit.encoders import load_encoder

    return load_encoder("minilm")


@pytest.fixture(scope="module")
def hotpot():
    from canopy_lit.data import load_benchmark

    return load_benchmark("hotpotqa")


@pytest.fixture(scope="module")
def pool(hotpot):
    """The first 5 HotpotQA dev questions with their 50 delivered paragraphs."""
    hp = hotpot
    questions = [q for q in hp.questions if q.meta.get("split") == "test"][:5]
    ids = list(dict.fromkeys(i for q in questions for i in hp.candidates[q.id]))
    return [hp.items[i] for i in ids], questions


@pytest.fixture(scope="module")
def sides(pool, encoder):
    from canopy_lit.retrieval.index import FaissIndex
    from canopy_lit.retrieval.retriever import FaissRetriever

    items, _ = pool
    vecs = encoder.encode_nodes([render_item(it) for it in items]).detach().cpu().numpy().astype(np.float32)
    dense = FaissRetriever(
        FaissIndex.build([it.id for it in items], vecs, kind="flat"), ItemPool(items), encoder
    )
    return {"dense": dense, "bm25": BM25Retriever.from_items(items)}


def test_hybrid_fuses_the_two_rankings(pool, sides) -> None:
    items, questions = pool
    hybrid = HybridRetriever(sides, rrf_k=60, depth=20)
    for q in questions:
        dense = sides["dense"].retrieve(q.text, 20).ids
        sparse = sides["bm25"].retrieve(q.text, 20).ids
        res = hybrid.retrieve(q.text, 5)
        expected = [i for i, _ in reciprocal_rank_fusion([dense, sparse], rrf_k=60)[:5]]
        assert res.ids == expected and len(res) == 5
        assert res.scores == sorted(res.scores, reverse=True)
        # an item ranked first by both sides is first after fusion
        if dense[0] == sparse[0]:
            assert res.ids[0] == dense[0]
    # one side weighted to zero reproduces the other side's order
    only_bm25 = HybridRetriever(sides, {"dense": 0.0}, depth=20)
    assert only_bm25.retrieve(questions[0].text, 5).ids == sides["bm25"].retrieve(questions[0].text, 5).ids
    assert hybrid.corpus is sides["dense"].corpus


def test_hybrid_exclude(pool, sides) -> None:
    _, questions = pool
    hybrid = HybridRetriever(sides, depth=20)
    q = questions[1].text
    first = hybrid.retrieve(q, 4)
    held = first.ids[:2]
    again = hybrid.retrieve(q, 4, exclude=held)
    assert not set(held) & set(again.ids) and len(again) == 4
    with pytest.raises(ValueError, match="weights names"):
        HybridRetriever(sides, {"splade": 1.0})


def test_build_hybrid_retriever_end_to_end(tmp_path, encoder) -> None:
    """Both sides built (and cached) over one corpus file: 30 paragraphs of the 2Wiki-layout fixture."""
    opts = {"2wikimultihopqa": {"path": str(FIXTURE_2WIKI)}}
    kw = {"benchmarks": ["2wikimultihopqa"], "cache_dir": tmp_path, "benchmark_options": opts}
    hybrid = build_hybrid_retriever(encoder, **kw, index="flat", weights={"bm25": 2.0}, bm25={"k1": 1.2})
    assert set(hybrid.retrievers) == {"dense", "bm25"} and hybrid.weights == {"bm25": 2.0}
    assert hybrid.retrievers["dense"].corpus.path == hybrid.retrievers["bm25"].corpus.path  # one corpus file
    assert hybrid.retrievers["bm25"].index.k1 == 1.2 and hybrid.retrievers["dense"].index.kind == "flat"
    res = hybrid.retrieve("If Gallu is a demon Lilu is what?", 3)
    assert len(res) == 3 and any("Lilu" in (it.title or "") for it in res)
    assert len(list(tmp_path.glob("bm25-*"))) == 1 and len(list(tmp_path.glob("index-*"))) == 1



@pytest.mark.parametrize("choice", ["default", "bm25", "hybrid"])
def test_evidence_grid_ranks_candidates_by_the_chosen_retriever(
    hydra_ctx, tmp_path, encoder, hotpot, choice
) -> None:
    """``+ablation=evidence_retriever``: each grid point's retriever ranks the delivered items (not always f0)."""
    from hydra import compose

    from canopy_lit.eval.records import retriever_name
    from canopy_lit.hierarchy import Hierarchy
    from canopy_lit.pipeline.build import build_retriever
    from canopy_lit.scoring import NodeEmbeddingCache
    from canopy_lit.scoring.scorers import QuerySideEncoder

    cfg = compose(
        "evaluate",
        overrides=[
            "+ablation=evidence_retriever",
            "adapter=/tmp/adapter",
            f"retrieval={choice}",
            f"paths.root_dir={tmp_path}",
        ],
    )
    assert cfg.mode == "evidence" and cfg.retriever.name == "candidates"
    expected = {"default": "dense", "bm25": "bm25", "hybrid": "hybrid"}[choice]
    assert retriever_name(cfg) == expected  # the tables' row label
    bench = hotpot
    base = build_retriever(cfg, bench, encoder, Hierarchy(), None)
    item_cache = NodeEmbeddingCache(QuerySideEncoder(encoder), Hierarchy(), cache_dir=None)
    cached = build_retriever(cfg, bench, encoder, Hierarchy(), None, item_cache=item_cache)  # the evidence mode's
    assert base.ranking.name == cached.ranking.name == expected
    qs = [q for q in bench.questions if q.meta.get("split") == "test"][:2]
    for q in qs:
        top = [it.id for it in cached.retrieve(q.text, 4, (), q)]
        assert top == [it.id for it in base.retrieve(q.text, 4, (), q)]
    if expected != "dense":  # BM25 and f0 disagree somewhere on these questions: the choice is not ignored
        dense = CandidateRetriever(bench.items, bench.candidates, encoder, Hierarchy())
        assert any(
            [it.id for it in base.retrieve(q.text, 4, (), q)]
            != [it.id for it in dense.retrieve(q.text, 4, (), q)]
            for q in qs
        )


def test_routing_reaches_both_sides_of_the_hybrid(tmp_path, encoder) -> None:
    """Only the dense side got the router, so BM25 fused tables into a text-routed query.

    Corpus: two real TAT-QA dev documents (2 tables, 4 paragraphs); router: the LLM router over the
    project's simulated backend (it picks the first modality offered, ``text``), uncached."""
    import json

    from canopy_lit.llm.simulated import SimulatedLLM
    from canopy_lit.retrieval.router import LLMModalityRouter

    docs = json.loads((FIXTURE_2WIKI.parents[1] / "tatqa" / "tatqa_dataset_dev.json").read_text())[:2]
    path = tmp_path / "tatqa_two_docs.json"
    path.write_text(json.dumps(docs))
    kw = {"benchmarks": ["tatqa"], "cache_dir": tmp_path, "benchmark_options": {"tatqa": {"path": str(path)}},
          "index": "flat", "depth": 6}  # fmt: skip
    queries = ["What was the change in the amount for Appliances in 2019 from 2018?",
               "In which year was the amount for Sensors the largest?"]  # fmt: skip
    unrouted = build_hybrid_retriever(encoder, **kw)
    assert all(any(it.modality.value == "table" for it in r) for r in unrouted.retrieve_batch(queries, 3))
    llm = SimulatedLLM()
    hybrid = build_hybrid_retriever(encoder, **kw, routing=True, router=LLMModalityRouter(llm, cache=False))
    for res in hybrid.retrieve_batch(queries, 3):
        assert len(res) == 3 and {it.modality.value for it in res} == {"text"} and res.groups == ["text"]
    assert all(side.router is not None for side in hybrid.retrievers.values())
    assert llm.log.summary()["calls"] == len(queries)  # one routing decision per query, shared by both sides
