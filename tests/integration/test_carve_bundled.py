"""CARVE over the bundled real clips: real MiniLM, the real CPU describer, the hand-written triple fixture.

Everything is built from the shipped configs (``method=carve`` composed as ``python -m canopy_lit.carve``
does). OCR is switched off here (it costs ~1 s per frame on a busy CPU); the LLM reranker test uses
the real SmolLM2-135M GGUF when its asset is cached and is skipped otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from canopy_lit.carve import (
    CONFIGS,
    CarvePipeline,
    ClipAdaptiveReranker,
    EmbeddingCrossEncoder,
    SingleConfigRanking,
    ZScore,
)
from canopy_lit.carve.__main__ import compose_cfg
from canopy_lit.carve.build import CarveParts, build_carve_corpus, build_carve_pipeline
from canopy_lit.data import load_benchmark
from canopy_lit.eval.carve import run_pipeline
from canopy_lit.pipeline.build import build_mode_runner

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def bench(data_dir):
    return load_benchmark(
        "vragbench", data_dir / "fixtures" / "vragbench_bundled_clips.jsonl", video_root=data_dir / "media" / "video"
    )


def carve_cfg(data_dir, out, *overrides: str):
    """``method=carve`` on the bundled triples: captions summariser, embedding reranker, no OCR, no reader."""
    cfg = compose_cfg(
        str(data_dir / "fixtures" / "vragbench_bundled_clips.jsonl"), str(data_dir / "media" / "video"), str(out),
        ["carve.k=2", "carve.pool_k=2", "carve.recall_ks=[1,2]", "carve.generate=false", "carve.describer.ocr=false",
         "carve/summariser=captions", "carve/reranker=embedding", *overrides],
    )  # fmt: skip
    cfg.carve.summariser.path = str(data_dir / "fixtures" / "vragbench_bundled_captions.jsonl")
    return cfg


@pytest.fixture(scope="module")
def cfg(data_dir, tmp_path_factory):
    cfg = carve_cfg(data_dir, tmp_path_factory.mktemp("run"))
    cfg.carve.describer.cache_path = str(tmp_path_factory.mktemp("desc") / "cache.jsonl")
    return cfg


@pytest.fixture(scope="module")
def models(cfg):
    return CarveParts(cfg)


@pytest.fixture(scope="module")
def corpus(cfg, bench, models):
    return build_carve_corpus(cfg, list(bench.items.values()), models)


def test_fixture_triples_resolve_to_bundled_clips(bench):
    assert len(bench.questions) == 9 and not bench.skipped
    assert {i.meta["video_id"] for i in bench.items.values()} == {"bikes", "bigbuckbunny", "tree", "vtest"}
    assert all(set(q.meta["evidence"]) == {"video", "start", "end"} for q in bench.questions)


def test_corpus_has_four_views_of_the_30s_leaves(corpus, models):
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
    assert "llm" not in vars(models)  # nothing asked for the LLM (no reader, embedding reranker): never loaded


def test_caption_configuration_finds_captioned_evidence(corpus, bench):
    pipe = CarvePipeline(corpus, SingleConfigRanking("text_clip"), k=1, pool_k=1, recall_ks=(1,))
    for qid in ("vrb-bunny-animal", "vrb-tree-hand", "vrb-vtest-pair"):
        rec = pipe.answer(next(q for q in bench.questions if q.id == qid))
        assert rec["stage"]["recall@1"] == 1.0, (qid, rec["ranking"])


def test_carve_run_writes_stage_metrics_and_winners(corpus, models, bench, tmp_path):
    reranker = ClipAdaptiveReranker(EmbeddingCrossEncoder(models.encoder), normalisation=ZScore())
    pipe = CarvePipeline(corpus, reranker, k=2, pool_k=2, recall_ks=(1, 2))
    metrics = run_pipeline(pipe, bench.questions, tmp_path)
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


def test_runner_of_method_carve_writes_the_run_folder(cfg, bench):
    """``method.runner`` targets ``run(cfg)``: every triple of the file, into ``paths.output_dir``."""
    metrics = build_mode_runner(cfg)(cfg)
    out = Path(cfg.paths.output_dir)
    recs = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert [r["id"] for r in recs] == [q.id for q in bench.questions] and all(r["method"] == "carve" for r in recs)
    assert json.loads((out / "metrics.json").read_text()) == pytest.approx(metrics)
    meta = json.loads((out / "run_meta.json").read_text())
    assert meta["reranker"] == "embedding-cosine (bi-encoder stand-in)" and meta["summariser"] == "captions"
    assert meta["k"] == 2 and meta["pool_k"] == 2


def test_carve_with_real_smollm2_reranker(cfg, data_dir, corpus, bench, tmp_path):
    from canopy_lit.assets import REGISTRY, cache_home

    if not (cache_home() / REGISTRY["smollm2-135m"].filename).is_file():
        pytest.skip("smollm2-135m not cached (python -m canopy_lit.assets fetch smollm2-135m)")
    llm_cfg = carve_cfg(
        data_dir, tmp_path, "llm=llamacpp_smollm2", "llm.n_threads=1", "carve/reranker=llm", "carve.generate=true",
        "carve.pool_k=1", "carve.frame_units=best", "carve.reader.max_tokens=8",
    )  # fmt: skip
    models = CarveParts(llm_cfg)
    try:
        pipe = build_carve_pipeline(llm_cfg, corpus, models)  # the corpus of the embedding config: same clips
        assert pipe.method.frame_units == "best" and pipe.reader.max_tokens == 8
        qs = [q for q in bench.questions if q.id in ("vrb-tree-hand", "vrb-bunny-animal")]
        metrics = run_pipeline(pipe, qs, tmp_path)
    finally:
        models.llm.close()
    recs = [json.loads(x) for x in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    for r in recs:
        assert r["llm_calls"]["relevance"] == r["rerank_calls"] >= 1 and r["llm_calls"]["reader"] == 1
        assert all(0.0 <= v <= 1.0 for c in r["ranking"] for v in c["raw"].values())  # P(yes)
    assert {"carve/accuracy", "eval/em", "carve/retrieval_recall@1", "carve/top1_tiou"} <= set(metrics)


def test_visual_winner_reaches_a_vision_reader_as_real_frames(corpus, bench):
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

    pipe = CarvePipeline(corpus, SingleConfigRanking("visual_clip"), k=1, pool_k=1, recall_ks=(1,))
    q = next(q for q in bench.questions if q.id == "vrb-tree-hand")
    ranking, *_ = pipe.rank(q.text)
    blocks = evidence_blocks(ranking, corpus)
    llm = RecordingVL()
    out = CarveReader(llm).answer(q.text, blocks)
    parts = llm.sent[0][-1]["content"]
    images = [p for p in parts if p["type"] == "image_url"]
    assert out.image_parts == len(images) == len(blocks[0].frames) >= 1  # every frame of the winning clip
    assert all(p["image_url"]["url"].startswith("data:image/jpeg;base64,") for p in images)
    assert out.text == "a hand"
