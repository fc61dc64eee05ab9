"""CARVE on hand-made inputs: pool, reranking, interleaving, RRF, stage metrics (all values hand-computed)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from canopy_lit.carve import (
    CONFIGS,
    CarvePipeline,
    Clip,
    ClipAdaptiveReranker,
    ClipCorpus,
    ConfigScore,
    ConfigView,
    FusionRanking,
    Hit,
    MinMax,
    NoNormalisation,
    ParallelRetriever,
    SingleConfigRanking,
    Window,
    ZScore,
    build_pool,
    evidence_blocks,
    fused_ranking,
    is_hit,
    rank_clips,
    recall_at_k,
    retrieve_config,
    single_config_ranking,
    stage_metrics,
    temporal_iou,
    top1_tiou,
    video_clips,
)
from canopy_lit.carve.metrics import answer_contained
from canopy_lit.carve.representations import CaptionSummariser, check_config
from canopy_lit.eval.carve import run_pipeline
from canopy_lit.hierarchy.base import Frame
from canopy_lit.llm.base import BaseLLM, LLMResponse
from canopy_lit.types import Item, Modality, Question, VideoRef

VF, VC, TF, TC = CONFIGS


# --------------------------------------------------------------------------- a hand-made corpus
# 3 clips of video "v" (0-30, 30-60, 60-90), 2 frames each, 2-d unit vectors chosen so the
# winners are known: the query embeds to e0 = (1, 0).


def _unit(deg: float) -> list[float]:
    return [math.cos(math.radians(deg)), math.sin(math.radians(deg))]


def _corpus() -> ClipCorpus:
    clips = [
        Clip(f"v@{i}", "vid:v", "v", "/videos/v.mp4", i, 30.0 * i, 30.0 * (i + 1),
             (Frame("/videos/v.mp4", 30.0 * i + 5), Frame("/videos/v.mp4", 30.0 * i + 15)))
        for i in range(3)
    ]  # fmt: skip
    q = torch.tensor([1.0, 0.0])
    frame_owner = np.array([0, 0, 1, 1, 2, 2])
    frames = [(f,) for c in clips for f in c.frames]

    def view(config: str, degs: list[float], owner: np.ndarray, units: list) -> ConfigView:
        texts = [f"{config} unit {u}" for u in range(len(degs))]
        return ConfigView(config, torch.tensor([_unit(d) for d in degs]), owner, texts, units, lambda _q: q)

    views = {
        # frame-level: clip 1 wins by its second frame (10 deg), clip 0 best frame 30 deg, clip 2 best 60 deg
        VF: view(VF, [80, 30, 70, 10, 60, 89], frame_owner, frames),
        VC: view(VC, [20, 40, 5], np.arange(3), [c.frames for c in clips]),
        TF: view(TF, [50, 45, 85, 88, 0, 70], frame_owner, frames),
        TC: view(TC, [15, 25, 35], np.arange(3), [c.frames for c in clips]),
    }
    return ClipCorpus(clips, views, {"clips": 3})


class TableCrossEncoder:
    """Scores from a {(clip, config, unit): score} table; counts calls."""

    kind = "table"

    def __init__(self, table: dict[tuple[int, str, int], float], default: float = 0.0) -> None:
        self.table, self.default, self.seen = table, default, []

    def score(self, query, cand) -> float:
        self.seen.append((cand.clip, cand.config, cand.unit))
        return self.table.get((cand.clip, cand.config, cand.unit), self.default)


# --------------------------------------------------------------------------- representations


def test_video_clips_are_tree_leaves_with_frames_every_10s():
    item = Item("vid:a", Modality.VIDEO, video=VideoRef("/x/a.mp4", 0.0, 75.0), meta={"video_id": "a"})
    clips = video_clips([item, Item("t", Modality.TEXT, text="not a video")])
    assert [(c.start, c.end) for c in clips] == [(0, 30), (30, 60), (60, 75)]
    assert [f.t for f in clips[0].frames] == [5.0, 15.0, 25.0]
    assert [f.t for f in clips[2].frames] == [65.0, 72.5]  # last window 70-75 has its midpoint
    assert clips[1].id == "vid:a@1" and clips[1].video_id == "a"


def test_check_config_spellings():
    assert check_config("visual/frame") == VF and check_config("Text-Clip") == TC
    with pytest.raises(ValueError, match="unknown CARVE configuration"):
        check_config("audio_frame")
    assert SingleConfigRanking("text/clip").name == f"single:{TC}"
    with pytest.raises(ValueError):
        SingleConfigRanking("oracle")  # type: ignore[arg-type]


def test_caption_summariser_frame_and_clip_texts(tmp_path):
    caps = tmp_path / "caps.jsonl"
    caps.write_text(
        '{"video": "v.mp4", "start": 0, "end": 10, "text": "a dog runs"}\n'
        '{"video": "v", "start": 12, "end": 40, "text": "a cat sleeps"}\n'
    )
    s = CaptionSummariser(caps)
    clip = _corpus().clips[0]  # frames at 5 and 15
    assert s.frame_texts(clip) == ["a dog runs", "a cat sleeps"]
    assert s.clip_text(clip) == "00:00 a dog runs 00:12 a cat sleeps"
    assert s.frame_texts(_corpus().clips[2]) == ["(no caption)", "(no caption)"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"video": "v", "start": 0}\n')
    with pytest.raises(ValueError, match="bad.jsonl: line 1"):
        CaptionSummariser(bad)


# --------------------------------------------------------------------------- stage 1


def test_frame_level_clip_scores_by_best_frame():
    corpus = _corpus()
    hits = retrieve_config(corpus, VF, "q", k=3)
    assert [h.clip for h in hits] == [1, 0, 2]  # best frames 10, 30, 60 degrees
    assert [h.unit for h in hits] == [3, 1, 4]
    assert hits[0].score == pytest.approx(math.cos(math.radians(10)))
    assert [h.rank for h in hits] == [1, 2, 3]
    only_clip2 = retrieve_config(corpus, VF, "q", k=3, allowed=np.array([False, False, True]))
    assert [h.clip for h in only_clip2] == [2]


def test_pool_keeps_every_retrieving_configuration():
    corpus = _corpus()
    pool, lists = ParallelRetriever(corpus, k=1, workers=4)("q")
    # top-1 per config: VF clip 1 (10°), VC clip 2 (5°), TF clip 2 (0°), TC clip 0 (15°)
    assert {c: [h.clip for h in hs] for c, hs in lists.items()} == {VF: [1], VC: [2], TF: [2], TC: [0]}
    by_clip = {c.clip: c.configs for c in pool}
    assert by_clip == {1: [VF], 2: [VC, TF], 0: [TC]}
    assert len(pool) == 3  # a clip retrieved twice appears once
    seq, _ = ParallelRetriever(corpus, k=1, workers=1)("q")
    assert [(c.clip, c.configs) for c in seq] == [(c.clip, c.configs) for c in pool]


def test_build_pool_order_and_hits():
    lists = {
        VF: [Hit(4, VF, 1, 0.9, 0), Hit(2, VF, 2, 0.8, 1)],
        TC: [Hit(2, TC, 1, 0.7, 2), Hit(7, TC, 2, 0.6, 7)],
    }
    pool = build_pool(lists)
    assert [c.clip for c in pool] == [4, 2, 7]  # rank 1 VF, rank 1 TC, rank 2 TC
    assert pool[1].hits[VF].rank == 2 and pool[1].hits[TC].rank == 1


# --------------------------------------------------------------------------- stage 2


def test_normalise_hand_computed():
    assert ZScore()([1.0, 2.0, 3.0]) == pytest.approx([-math.sqrt(1.5), 0.0, math.sqrt(1.5)])
    assert MinMax()([2.0, 4.0, 3.0]) == pytest.approx([0.0, 1.0, 0.5])
    assert ZScore()([0.3]) == [0.0] and MinMax()([0.3, 0.3]) == [0.5, 0.5]
    assert NoNormalisation()([0.2, 0.9]) == [0.2, 0.9]
    assert [n.name for n in (ZScore(), MinMax(), NoNormalisation())] == ["zscore", "minmax", "none"]


def test_winner_is_argmax_and_topk_interleaves():
    scores = [
        ConfigScore(0, VF, 0.1, 0.2, 0), ConfigScore(0, TC, 0.9, 1.5, 0),   # clip 0 won by text_clip
        ConfigScore(1, VF, 0.8, 1.2, 3), ConfigScore(1, TF, 0.2, -0.4, 2),  # clip 1 won by visual_frame
        ConfigScore(2, VC, 0.5, 0.7, 2),                                     # clip 2 only visual_clip
        ConfigScore(3, TF, 0.4, 1.2, 6), ConfigScore(3, VC, 0.4, 1.2, 3),   # tie -> CONFIGS order (VC before TF)
    ]  # fmt: skip
    ranked = rank_clips(scores, k=3)
    assert [(r.clip, r.winner) for r in ranked] == [(0, TC), (1, VF), (3, VC)]
    assert ranked[0].per_config == {VF: 0.2, TC: 1.5} and ranked[0].raw == {VF: 0.1, TC: 0.9}
    for r in ranked:
        assert r.winner == max(r.per_config, key=lambda c: (r.per_config[c], -CONFIGS.index(c)))
    assert len({r.winner for r in ranked}) == 3  # configurations interleave in the final list
    assert [r.clip for r in rank_clips(scores, k=10)] == [0, 1, 3, 2]


def test_reranker_scores_each_candidate_under_its_retrieving_configs_only():
    corpus = _corpus()
    pool, _ = ParallelRetriever(corpus, k=1)("q")  # {1: [VF], 2: [VC, TF], 0: [TC]}
    table = {
        (1, VF, 2): 0.3, (1, VF, 3): 0.6,   # both frames of clip 1 scored; best = unit 3
        (2, VC, 2): 0.9, (2, TF, 4): 0.1, (2, TF, 5): 0.5,
        (0, TC, 0): 0.2,
    }  # fmt: skip
    cross = TableCrossEncoder(table)
    rr = ClipAdaptiveReranker(cross, normalisation=NoNormalisation(), frame_units="all")
    scored = rr.score_pool("q", pool, corpus)
    got = {(s.clip, s.config): (s.raw, s.unit) for s in scored}
    assert got == {(1, VF): (0.6, 3), (2, VC): (0.9, 2), (2, TF): (0.5, 5), (0, TC): (0.2, 0)}
    assert sorted(set(cross.seen)) == sorted(table)  # no configuration that did not retrieve the clip
    assert rr.calls == 6
    ranked = rr("q", pool, corpus, k=2)
    assert [(r.clip, r.winner) for r in ranked] == [(2, VC), (1, VF)]
    best_only = ClipAdaptiveReranker(TableCrossEncoder(table), normalisation=NoNormalisation(), frame_units="best")
    assert {(s.clip, s.config): s.unit for s in best_only.score_pool("q", pool, corpus)}[(2, TF)] == 4  # retrieved frame
    assert best_only.calls == 4


def test_zscore_is_within_configuration():
    corpus = _corpus()
    pool, _ = ParallelRetriever(corpus, k=3)("q")  # every clip under every configuration
    # text_clip scores are uniformly higher than visual_clip's; z-scores put them on one scale
    table = {(c, VC, c): 0.1 + 0.01 * c for c in range(3)} | {(c, TC, c): 0.8 + 0.01 * (2 - c) for c in range(3)}
    rr = ClipAdaptiveReranker(TableCrossEncoder(table, default=0.0), normalisation=ZScore())
    scored = {(s.clip, s.config): s.norm for s in rr.score_pool("q", pool, corpus)}
    z = math.sqrt(1.5)
    assert [scored[(c, VC)] for c in range(3)] == pytest.approx([-z, 0, z])
    assert [scored[(c, TC)] for c in range(3)] == pytest.approx([z, 0, -z])
    assert scored[(0, VF)] == 0.0  # constant scores -> 0
    ranked = rr("q", pool, corpus, k=3)
    assert [(r.clip, r.winner) for r in ranked[:2]] in ([(0, TC), (2, VC)], [(2, VC), (0, TC)])


# --------------------------------------------------------------------------- baselines


def test_rrf_hand_computed():
    lists = {
        VF: [Hit(0, VF, 1, 0.9, 0), Hit(1, VF, 2, 0.8, 2)],
        VC: [Hit(1, VC, 1, 0.7, 1)],
        TC: [Hit(2, TC, 1, 0.6, 2), Hit(0, TC, 2, 0.5, 0)],
    }
    fused = fused_ranking(lists, k=3, rrf_k=60)
    # clip 0: 1/61 + 1/62; clip 1: 1/62 + 1/61; clip 2: 1/61 -> tie 0/1 broken by clip index
    assert [r.clip for r in fused] == [0, 1, 2]
    assert fused[0].score == pytest.approx(1 / 61 + 1 / 62)
    assert fused[2].score == pytest.approx(1 / 61)
    assert [r.winner for r in fused] == [VF, VC, TC]  # best rank; VC's rank 1 beats VF's rank 2 for clip 1
    single = single_config_ranking(lists[TC], k=1)
    assert [(r.clip, r.winner, r.score) for r in single] == [(2, TC, 0.6)]
    # the carve/method rankings: the same lists, no stage-2 scores
    assert FusionRanking(60).rank("q", [], lists, _corpus(), 3) == (fused, [])
    assert SingleConfigRanking(TC).rank("q", [], lists, _corpus(), 1) == (single, [])


# --------------------------------------------------------------------------- stage metrics


def test_temporal_metrics_hand_computed():
    ev = Window("v", 52.0, 58.0)
    assert temporal_iou(Window("v", 30, 60), ev) == pytest.approx(6 / 30)
    assert temporal_iou(Window("v", 55, 65), ev) == pytest.approx(3 / 13)
    assert temporal_iou(Window("w", 30, 60), ev) == 0.0
    assert is_hit(Window("v", 30, 60), ev) and not is_hit(Window("v", 58, 88), ev)  # touching is no overlap
    assert not is_hit(Window("v", 30, 60), ev, min_iou=0.25)
    assert is_hit(Window("v", 0, 30), Window("v", 30, 30))  # a point on the boundary
    ranking = [Window("v", 0, 30), Window("w", 30, 60), Window("v", 30, 60)]
    assert recall_at_k(ranking, ev, 1) == 0.0 and recall_at_k(ranking, ev, 2) == 0.0 and recall_at_k(ranking, ev, 3) == 1.0
    assert top1_tiou(ranking, ev) == 0.0 and top1_tiou([], ev) == 0.0
    assert Window.of("/a/b/vtest.avi", 1, 2) == Window("vtest", 1.0, 2.0)


def test_answer_containment():
    assert answer_contained("It is a white van.", ["white van"]) == 1.0
    assert answer_contained("vanilla", ["van"]) == 0.0  # whole tokens only
    assert answer_contained("The rabbit", ["a bunny", "rabbit"]) == 1.0


def test_stage_metrics_means_and_winner_shares():
    recs = [
        {"status": "ok", "stage": {"recall@1": 1.0, "recall@3": 1.0, "top1_tiou": 0.2, "accuracy": 1.0, "pool_recall": 1.0},
         "ranking": [{"winner": VF}, {"winner": TC}], "rerank_calls": 6},
        {"status": "ok", "stage": {"recall@1": 0.0, "recall@3": 1.0, "top1_tiou": 0.0, "accuracy": 0.0, "pool_recall": 1.0},
         "ranking": [{"winner": TC}, {"winner": TC}], "rerank_calls": 4},
        {"status": "failed"},
    ]  # fmt: skip
    m = stage_metrics(recs, ks=(1, 3))
    assert m["carve/retrieval_recall@1"] == pytest.approx(1 / 3)
    assert m["carve/retrieval_recall@3"] == pytest.approx(2 / 3)
    assert m["carve/top1_tiou"] == pytest.approx(0.2 / 3)
    assert m["carve/winner_share/text_clip"] == pytest.approx(3 / 4)
    assert m["carve/winner_share/visual_frame"] == pytest.approx(1 / 4)
    assert m["carve/top1_winner_share/text_clip"] == pytest.approx(1 / 2)
    assert m["carve/rerank_calls"] == pytest.approx(5.0)


# --------------------------------------------------------------------------- generation + run folder


def test_evidence_blocks_use_winning_representation():
    corpus = _corpus()
    ranked = rank_clips([ConfigScore(1, VF, 1, 1, 3), ConfigScore(0, VC, 1, 0.5, 0), ConfigScore(2, TC, 1, 0.1, 2)], 3)
    blocks = evidence_blocks(ranked, corpus)
    assert [(b.clip_id, b.config) for b in blocks] == [("v@1", VF), ("v@0", VC), ("v@2", TC)]
    assert [len(b.frames) for b in blocks] == [1, 2, 0]  # winning frame / all clip frames / text only
    assert blocks[0].frames[0].t == 45.0 and blocks[2].text == "text_clip unit 2"


class CannedLLM(BaseLLM):
    """A real BaseLLM subclass whose completion is canned: P(yes) from a keyword, a fixed reader answer."""

    name = "canned"

    def _complete(self, messages, *, json_mode, logprobs, max_tokens, temperature, stop):
        prompt = messages[-1]["content"]
        if logprobs:
            lp = math.log(0.9) if "unit 3" in prompt or "unit 2" in prompt else math.log(0.2)
            return LLMResponse("Yes", 10, 1, top_logprobs=[{"Yes": lp, "No": math.log(1 - math.exp(lp))}])
        return LLMResponse("two", 20, 1)

    def count_tokens(self, text: str) -> int:
        return len(text.split())


def test_pipeline_writes_run_folder_and_resumes(tmp_path):
    from canopy_lit.carve import CarveReader, LLMYesNoCrossEncoder

    corpus = _corpus()
    llm = CannedLLM()
    qs = [
        Question("q1", "how many?", ["two", "2"], "vragbench", meta={"evidence": {"video": "v.mp4", "start": 40, "end": 50}}),
        Question("q2", "which?", ["three"], "vragbench", meta={"evidence": {"video": "v.mp4", "start": 61, "end": 62}}),
    ]
    pipe = CarvePipeline(
        corpus, ClipAdaptiveReranker(LLMYesNoCrossEncoder(llm)), k=2, pool_k=2, reader=CarveReader(llm), recall_ks=(1, 2)
    )
    m = run_pipeline(pipe, qs, tmp_path)
    recs = [json.loads(x) for x in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert [r["id"] for r in recs] == ["q1", "q2"] and all(r["status"] == "ok" for r in recs)
    for r in recs:
        assert len(r["ranking"]) == 2 and all(c["winner"] == max(c["per_config"], key=c["per_config"].get) for c in r["ranking"])
        assert {k for p in r["pool"] for k in p["configs"]} <= set(CONFIGS)
        assert len(r["scored"]) == sum(len(p["configs"]) for p in r["pool"])  # one stage-2 score per (clip, config)
        assert r["llm_calls"]["reader"] == 1 and r["llm_calls"]["relevance"] == r["rerank_calls"]
    saved = json.loads((tmp_path / "metrics.json").read_text())
    for key in ("carve/retrieval_recall@1", "carve/retrieval_recall@2", "carve/top1_tiou", "carve/accuracy", "eval/em"):
        assert key in saved and saved[key] == m[key]
    assert saved["eval/em"] == pytest.approx(0.5)  # "two" right for q1, wrong for q2
    assert sum(saved[f"carve/winner_share/{c}"] for c in CONFIGS) == pytest.approx(1.0)
    assert (tmp_path / "table.md").read_text().count("| carve |") == 1
    n_calls = len(llm.log)
    run_pipeline(pipe, qs, tmp_path)  # resumed: nothing to do
    assert len(llm.log) == n_calls
