"""Retrieval on real MiniLM over a small slice of real bundled items (HotpotQA dev + one TAT-QA table)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import Callback

from canopy_lit.retrieval.corpus import CorpusStore, render_item
from canopy_lit.retrieval.encode import done_ids, encode_corpus, finished_shards, load_shards
from canopy_lit.retrieval.index import FaissIndex
from canopy_lit.retrieval.retriever import FaissRetriever
from canopy_lit.scoring.node_cache import NodeEmbeddingCache

N_QUESTIONS = 3  # HotpotQA dev questions whose 10 paragraphs form the corpus (30 items + 1 table)


@pytest.fixture(scope="module")
def encoder():
    from canopy_lit.encoders import load_encoder

    torch.manual_seed(0)
    return load_encoder("minilm")


@pytest.fixture(scope="module")
def slice_(tmp_path_factory):
    from canopy_lit.data import load_benchmark

    hp = load_benchmark("hotpotqa")
    questions = [q for q in hp.questions if q.meta.get("split") == "test"][:N_QUESTIONS]
    ids = list(dict.fromkeys(i for q in questions for i in hp.candidates[q.id]))
    tat = load_benchmark("tatqa")
    table = next(i for i in tat.items.values() if i.modality.value == "table")
    items = [hp.items[i] for i in ids] + [table]
    store = CorpusStore.write(items, tmp_path_factory.mktemp("corpus") / "corpus.jsonl")
    return store, questions


class _Interrupt(Callback):
    """Simulates a crash (pre-emption, OOM) after ``after`` predict batches."""

    def __init__(self, after: int) -> None:
        self.after = after

    def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        if batch_idx + 1 >= self.after:
            raise RuntimeError("simulated interruption")


def test_corpus_store_round_trip(slice_) -> None:
    store, questions = slice_
    assert store.counts() == {"text": len(store) - 1, "table": 1}
    assert all(g in store for q in questions for g in q.gold)
    first = next(iter(store))
    assert store.get(first.id) == first
    assert len(store.view("table")) == 1
    with pytest.raises(KeyError, match="not in corpus"):
        store.get("hotpotqa:no such paragraph")


@pytest.fixture(scope="module")
def interrupted_then_resumed(slice_, encoder, tmp_path_factory):
    """Encode with a crash after 2 batches, then rerun: what each call saw."""
    store, _ = slice_
    out = tmp_path_factory.mktemp("emb")
    with pytest.raises(RuntimeError, match="simulated interruption"):
        encode_corpus(store, encoder, out, batch_size=8, shard_size=8, callbacks=[_Interrupt(after=2)])
    shards_after_crash, half = len(finished_shards(out)), done_ids(out)
    rep = encode_corpus(store, encoder, out, batch_size=8, shard_size=8)
    return out, shards_after_crash, half, rep


def test_encode_resumes_after_interruption(slice_, encoder, interrupted_then_resumed) -> None:
    store, _ = slice_
    out, shards_after_crash, half, rep = interrupted_then_resumed
    assert shards_after_crash == 2 and len(half) == 16  # two finished shards survive the crash
    assert rep.skipped == 16 and rep.encoded == len(store) - 16  # only the rest is encoded
    ids, vecs = load_shards(out, order=store.ids)
    assert vecs.shape == (len(store), encoder.dim) and ids == store.ids
    # Same vectors as encoding the rendered items directly with f0 (a sample from both runs).
    sample = [i for i in ids if i in half][:3] + [i for i in ids if i not in half][:3]
    ref = encoder.encode_queries([render_item(store.get(i)).text for i in sample]).numpy()
    np.testing.assert_allclose(vecs[[ids.index(i) for i in sample]], ref, atol=1e-5)
    # A finished encode is a no-op; a different encoder setup refuses to mix into the folder.
    assert encode_corpus(store, encoder, out, batch_size=8).encoded == 0
    with pytest.raises(ValueError, match="another setup"):
        encode_corpus(store, encoder, out, role="ftheta", batch_size=8)


@pytest.fixture(scope="module")
def retriever(slice_, encoder, interrupted_then_resumed):
    store, _ = slice_
    ids, vecs = load_shards(interrupted_then_resumed[0], order=store.ids)
    index = FaissIndex.build(ids, vecs, groups=store.modalities.tolist())
    return FaissRetriever(index, store, encoder)


def test_retrieves_supporting_paragraphs(slice_, retriever) -> None:
    _, questions = slice_
    hits = []
    for q in questions:
        res = retriever.retrieve(q.text, k=5)
        assert len(res) == 5 and res.scores == sorted(res.scores, reverse=True)
        hits.append(bool(set(q.gold) & set(res.ids)))
    # 31 real items, 10 per question are distractors of the same question: chance for top-5 is low.
    assert sum(hits) >= len(questions) - 1


def test_exclude_and_routing(slice_, retriever) -> None:
    _, questions = slice_
    q = questions[0].text
    top = retriever.retrieve(q, k=10)
    held = set(top.ids[:3])
    res = retriever.retrieve(q, k=10, exclude=held)
    assert len(res) == 10 and not held & set(res.ids)
    assert res.ids[:7] == top.ids[3:]  # same ranking, held items skipped

    class TableRouter:
        def route(self, query: str) -> list[str]:
            return ["table"]

    routed = FaissRetriever(retriever.index, retriever.corpus, retriever.encoder, router=TableRouter())
    r = routed.retrieve(q, k=3)
    assert r.groups == ["table"] and [it.modality.value for it in r.items] == ["table"]

    class VideoRouter:  # routes to a partition this corpus lacks: search everything instead
        modalities = ("video",)

        def route(self, query: str) -> str:
            return "video"

    from canopy_lit.retrieval.router import LLMModalityRouter

    router = LLMModalityRouter(VideoRouter())
    fallback = FaissRetriever(retriever.index, retriever.corpus, retriever.encoder, router=router)
    assert fallback.retrieve(q, k=10).ids == top.ids and fallback.retrieve(q, k=10).groups is None
    assert router.calls == 1  # the decision for a repeated query is cached


def test_node_cache_with_minilm(slice_, encoder, tmp_path) -> None:
    store, questions = slice_
    from canopy_lit.hierarchy import Hierarchy

    h = Hierarchy(2)
    gold_id = next(iter(questions[0].gold))
    tree = h.build(store.get(gold_id))
    cache = NodeEmbeddingCache(encoder, h, cache_dir=tmp_path)
    emb = cache.embed_tree(tree)
    ref = encoder.encode_nodes([h.node_input(tree, i) for i in range(len(tree))]).numpy()
    np.testing.assert_allclose(emb, ref, atol=1e-5)
    warm = NodeEmbeddingCache(encoder, h, cache_dir=tmp_path).embed_tree(tree)
    np.testing.assert_array_equal(warm, emb)
    # Scores against a real f0 query are cosines in [-1, 1].
    s = emb @ encoder.encode_queries([questions[0].text]).numpy()[0]
    assert s.shape == (len(tree),) and np.all(np.abs(s) <= 1 + 1e-5)


def test_evaluate_retrieval_metrics_keys(slice_, retriever, tmp_path) -> None:
    from omegaconf import OmegaConf

    from canopy_lit.pipeline.build import build_retrieval_eval
    from canopy_lit.retrieval.evaluate import evaluate_retrieval

    _, questions = slice_
    cfg = OmegaConf.create(
        {
            # the loop's and the pipeline's keys (k, node_cache_dir) share the group and must be ignored here
            "retrieval": {"k": 10, "index": "flat_sq_fp16", "scope": None, "node_cache_dir": "x"},
            "retrieval_eval": {"benchmarks": ["hotpotqa"], "ks": [1, 5, 10], "split": "test"},
            "limit": len(questions),
        }
    )
    m = evaluate_retrieval(**build_retrieval_eval(cfg), retriever=retriever, out_dir=tmp_path)
    assert m["retrieval/hotpotqa/questions"] == len(questions)
    r = [m[f"retrieval/hotpotqa/recall@{k}"] for k in (1, 5, 10)]
    assert r == sorted(r) and r[-1] == 1.0  # 31 items: every question has a supporting paragraph in its top 10
    assert m["retrieval/hotpotqa/recall_all@10"] <= r[-1]
    assert (tmp_path / "metrics.json").is_file()
