"""CARVE over the bundled real clips: real MiniLM, the real CPU describer, the hand-written triple fixture.

OCR is switched off here (it costs ~1 s per frame on a busy CPU); the LLM reranker test uses the
real SmolLM2-135M GGUF when its asset is cached and is skipped otherwise.
"""

from __future__ import annotations

import json

import pytest

from canopy_lit.carve import (
    CONFIGS,
    CarveComponents,
    CarvePipeline,
    ClipAdaptiveReranker,
    EmbeddingCrossEncoder,
)
from canopy_lit.data import load_benchmark

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def bench(data_dir):
    return load_benchmark(
        "vragbench", data_dir / "fixtures" / "vragbench_bundled_clips.jsonl", video_root=data_dir / "media" / "video"
    )


@pytest.fixture(scope="module")
def components(bench, data_dir, tmp_path_factory):
    cfg = {
        "k": 2,
        "pool_k": 2,
        "recall_ks": [1, 2],
        "generate": False,
        "describer": {"top_k": 3, "ocr": False, "cache_path": str(tmp_path_factory.mktemp("desc") / "cache.jsonl")},
        "summariser": {"kind": "captions", "captions": str(data_dir / "fixtures" / "vragbench_bundled_captions.jsonl")},
        "reranker": {"kind": "embedding"},
    }
    return CarveComponents(cfg, list(bench.items.values()), need_llm=False)


def test_fixture_triples_resolve_to_bundled_clips(bench):
    assert len(bench.questions) == 9 and not bench.skipped
    assert {i.meta["video_id"] for i in bench.items.values()} == {"bikes", "bigbuckbunny", "tree", "vtest"}
    assert all(set(q.meta["evidence"]) == {"video", "start", "end"} for q in bench.questions)


def test_corpus_has_four_views_of_the_30s_leaves(components):
    corpus = components.corpus
    # vtest 79.5 s -> 3 clips; tree, bikes, bigbuckbunny -> 1 each; frames 1 / 10 s at window midpoints
    assert len(corpus) == 6
    assert sum(len(c.frames) for c in corpus.clips) == 3 + 3 + 2 + 3 + 1 + 1
    assert corpus.configs == CONFIGS
    assert corpus.views["visual_frame"].vectors.shape == (13, 384)
    assert corpus.views["visual_clip"].vectors.shape == (6, 384)
    assert "describer-text" in corpus.meta["visual_embedder"] and corpus.meta["summariser"] == "captions"
    assert all("labels:" in t for t in corpus.views["visual_frame"].texts)  # real EfficientNet labels
    bunny = next(i for i, c in enumerate(corpus.clips) if c.video_id == "bigbuckbunny")
    assert "rabbit" in corpus.views["text_clip"].texts[bunny]


def test_caption_configuration_finds_captioned_evidence(components, bench):
    pipe = CarvePipeline(components.corpus, method="single:text_clip", k=1, pool_k=1, recall_ks=(1,))
    for qid in ("vrb-bunny-animal", "vrb-tree-hand", "vrb-vtest-pair"):
        rec = pipe.answer(next(q for q in bench.questions if q.id == qid))
        assert rec["stage"]["recall@1"] == 1.0, (qid, rec["ranking"])


def test_carve_run_writes_stage_metrics_and_winners(components, bench, tmp_path):
    reranker = ClipAdaptiveReranker(EmbeddingCrossEncoder(components.encoder), normalisation="zscore")
    pipe = CarvePipeline(components.corpus, method="carve", k=2, pool_k=2, reranker=reranker, recall_ks=(1, 2))
    metrics = pipe.run(bench.questions, tmp_path)
    recs = [json.loads(x) for x in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(recs) == 9 and all(r["status"] == "ok" for r in recs)
    for r in recs:
        assert 1 <= len(r["ranking"]) <= 2
        for c in r["ranking"]:
            assert c["winner"] == max(c["per_config"], key=lambda k: (c["per_config"][k], -CONFIGS.index(k)))
            pooled = next(p for p in r["pool"] if p["clip"] == c["clip"])
            assert set(c["per_config"]) == set(pooled["configs"])  # scored only under retrieving configurations
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert 0.0 <= saved["carve/retrieval_recall@1"] <= saved["carve/retrieval_recall@2"] <= saved["carve/pool_recall"] <= 1.0
    assert 0.0 <= saved["carve/top1_tiou"] <= 1.0 and "carve/accuracy" not in saved  # generate=False
    assert sum(saved[f"carve/winner_share/{c}"] for c in CONFIGS) == pytest.approx(1.0)
    assert saved == pytest.approx(metrics)


def test_carve_with_real_smollm2_reranker(components, bench, tmp_path):
    from canopy_lit.assets import REGISTRY, cache_home

    if not (cache_home() / REGISTRY["smollm2-135m"].filename).is_file():
        pytest.skip("smollm2-135m not cached (python -m canopy_lit.assets fetch smollm2-135m)")
    from canopy_lit.carve import CarveReader, LLMYesNoCrossEncoder
    from canopy_lit.llm import load_llm

    llm = load_llm("llamacpp", "smollm2-135m", n_ctx=2048, n_threads=1)
    try:
        pipe = CarvePipeline(
            components.corpus, method="carve", k=2, pool_k=1,
            reranker=ClipAdaptiveReranker(LLMYesNoCrossEncoder(llm), frame_units="best"),
            reader=CarveReader(llm, max_tokens=8), recall_ks=(1, 2),
        )  # fmt: skip
        qs = [q for q in bench.questions if q.id in ("vrb-tree-hand", "vrb-bunny-animal")]
        metrics = pipe.run(qs, tmp_path)
    finally:
        llm.close()
    recs = [json.loads(x) for x in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    for r in recs:
        assert r["llm_calls"]["relevance"] == r["rerank_calls"] >= 1 and r["llm_calls"]["reader"] == 1
        assert all(0.0 <= v <= 1.0 for c in r["ranking"] for v in c["raw"].values())  # P(yes)
    assert {"carve/accuracy", "eval/em", "carve/retrieval_recall@1", "carve/top1_tiou"} <= set(metrics)


def test_visual_winner_reaches_a_vision_reader_as_real_frames(components, bench):
    from canopy_lit.carve import CarveReader, evidence_blocks
    from canopy_lit.llm.base import BaseLLM, LLMResponse

    class RecordingVL(BaseLLM):
        """A canned multimodal backend that keeps what it was sent."""

        def __init__(self) -> None:
            super().__init__(multimodal=True)
            self.sent: list = []

        def _complete(self, messages, **_):
            self.sent.append(messages)
            return LLMResponse("a hand", 100, 2)

        def count_tokens(self, text: str) -> int:
            return len(text.split())

    pipe = CarvePipeline(components.corpus, method="single:visual_clip", k=1, pool_k=1, recall_ks=(1,))
    q = next(q for q in bench.questions if q.id == "vrb-tree-hand")
    ranking, *_ = pipe.rank(q.text)
    blocks = evidence_blocks(ranking, components.corpus)
    llm = RecordingVL()
    out = CarveReader(llm).answer(q.text, blocks)
    parts = llm.sent[0][-1]["content"]
    images = [p for p in parts if p["type"] == "image_url"]
    assert out.image_parts == len(images) == len(blocks[0].frames) >= 1  # every frame of the winning clip
    assert all(p["image_url"]["url"].startswith("data:image/jpeg;base64,") for p in images)
    assert out.text == "a hand"
