"""Qwen3-VL-Embedding code path on a tiny randomly initialised Qwen3-VL (its weights cannot be had here).

The architecture is the real transformers ``Qwen3VLModel`` built from a small config with no
download; MiniLM's tokenizer stands in for Qwen's (only token ids matter for random weights), with
Qwen's chat / vision special tokens added. The visual path runs through a real ``Qwen3VLProcessor``
assembled offline: the Qwen2-VL image processor (PIL backend) at a tiny resolution, that tokenizer and
a minimal chat template rendering an image part as ``<|vision_start|><|image_pad|><|vision_end|>``.
"""

from __future__ import annotations

import pytest
import torch

from canopy_lit.encoders.qwen3vl import Qwen3VLEncoder, thin_frames
from canopy_lit.hierarchy import Hierarchy, NodeInput, VideoTreeBuilder
from canopy_lit.types import Item, Modality, VideoRef

TEXTS = ["Who wrote Hamlet?", "Hamlet is a tragedy by William Shakespeare, written around 1600.", "short"]

QWEN_SPECIAL_TOKENS = [
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
# Qwen's chat format cut to what the encoder sends: system + user content parts + generation prompt.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
PATCH, MERGE, TEMPORAL = 16, 2, 2  # Qwen3-VL's vision geometry: image processor and vision config must agree


def _tiny_random_weights_model(seed: int = 0):
    from transformers import AutoTokenizer, Qwen3VLConfig, Qwen3VLModel

    from canopy_lit.encoders.text import resolve_text_backbone

    tok = AutoTokenizer.from_pretrained(str(resolve_text_backbone("minilm")))
    tok.add_special_tokens({"additional_special_tokens": QWEN_SPECIAL_TOKENS})
    ids = dict(zip(QWEN_SPECIAL_TOKENS, tok.convert_tokens_to_ids(QWEN_SPECIAL_TOKENS)))
    cfg = Qwen3VLConfig(
        text_config={
            "vocab_size": len(tok),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "max_position_embeddings": 512,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 2]},
        },
        vision_config={
            "depth": 2,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_heads": 2,
            "out_hidden_size": 32,
            "deepstack_visual_indexes": [0],
            "num_position_embeddings": 64,
            "patch_size": PATCH,
            "spatial_merge_size": MERGE,
            "temporal_patch_size": TEMPORAL,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    torch.manual_seed(seed)
    return Qwen3VLModel(cfg).eval(), tok


def _tiny_processor(tok, max_pixels: int = 96 * 96):
    """A real ``Qwen3VLProcessor`` from parts, no download.

    transformers 5 requires a video processor object and type-checks it against
    ``VideoProcessorMixin``, which it only exports with torchvision installed (``Qwen3VLVideoProcessor``
    itself needs torchvision). The encoder sends video frames as images, so that slot is never
    called: without torchvision a bare ``VideoProcessorMixin`` fills it and only that type check is relaxed.
    """
    import transformers
    from transformers import Qwen3VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.video_processing_utils import VideoProcessorMixin

    class Qwen3VLProcessorWithoutTorchvision(Qwen3VLProcessor):
        def check_argument_for_proper_class(self, argument_name, argument):
            if argument_name == "video_processor" and isinstance(argument, VideoProcessorMixin):
                return type(argument)
            return super().check_argument_for_proper_class(argument_name, argument)

    cls = (
        Qwen3VLProcessor
        if hasattr(transformers, "VideoProcessorMixin")
        else Qwen3VLProcessorWithoutTorchvision
    )
    # <= 96x96 pixels: an image is a handful of 16-px patches, i.e. 2-9 visual tokens after the 2x2 merge.
    images = Qwen2VLImageProcessorPil(
        patch_size=PATCH,
        merge_size=MERGE,
        temporal_patch_size=TEMPORAL,
        min_pixels=32 * 32,
        max_pixels=max_pixels,
    )
    tok.chat_template = CHAT_TEMPLATE  # text-only nodes then share the visual nodes' prompt format
    return cls(
        image_processor=images,
        tokenizer=tok,
        video_processor=VideoProcessorMixin(),
        chat_template=CHAT_TEMPLATE,
    )


def _visual_encoder(seed: int = 0, **kwargs) -> Qwen3VLEncoder:
    model, tok = _tiny_random_weights_model(seed)
    return Qwen3VLEncoder("tiny-random-qwen3vl", model=model, processor=_tiny_processor(tok), **kwargs)


def _image_node(media_dir) -> NodeInput:
    item = Item(
        "chelsea", Modality.IMAGE, title="chelsea the cat", image=str(media_dir / "images" / "chelsea.png")
    )
    h = Hierarchy()
    return h.node_input(h.build(item), 0)


def _video_tree(media_dir, end: float | None = 4.0):
    """bikes.mp4 (10 s): 2-s leaves, one frame per second, so the root of the whole clip has 10 frames."""
    h = Hierarchy(builders=[VideoTreeBuilder(clip_seconds=2.0, frame_interval=1.0)])
    item = Item(
        "bikes",
        Modality.VIDEO,
        title="bikes",
        video=VideoRef(str(media_dir / "video" / "bikes.mp4"), 0.0, end),
    )
    return h, h.build(item)


@pytest.fixture()
def tiny():
    model, tok = _tiny_random_weights_model()
    return Qwen3VLEncoder(
        "tiny-random-qwen3vl",
        model=model,
        tokenizer=tok,
        max_seq_length=64,
        query_instruction="Find evidence for the question.",
    )


def test_random_weights_encodes_normalised_last_token_embeddings(tiny) -> None:
    q = tiny.encode_queries(TEXTS)
    n = tiny.encode_nodes(TEXTS)
    assert q.shape == (3, 32) and torch.allclose(n.norm(dim=1), torch.ones(3), atol=1e-5)
    single = torch.cat([tiny.encode_nodes([t]) for t in TEXTS])
    assert torch.allclose(n, single, atol=1e-5)  # right padding never reaches the pooled last token
    assert not torch.allclose(q, n)  # queries carry their own instruction here


def test_random_weights_lora_only_on_language_tower(tiny, tmp_path) -> None:
    before_q = tiny.encode_queries(TEXTS)
    before_n = tiny.encode_nodes(TEXTS)
    tiny.add_adapter(r=4, alpha=8, dropout=0.0)
    trainable = [n for n, p in tiny.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n and "language_model" in n for n in trainable)
    assert not any("lora_" in n for n, _ in tiny.model.named_parameters() if ".visual." in n)
    with torch.no_grad():
        for name, p in tiny.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    assert torch.allclose(tiny.encode_queries(TEXTS), before_q, atol=1e-6)  # f0 = adapter off
    assert (tiny.encode_nodes(TEXTS) - before_n).abs().max() > 1e-3  # fθ moved
    emb = tiny.embed_sorted(tiny.tokenize(TEXTS), chunk_size=2)
    emb.sum().backward()
    assert all(p.grad is not None for n, p in tiny.model.named_parameters() if p.requires_grad)

    path = tiny.save_adapter(tmp_path / "adapter")
    model, tok = _tiny_random_weights_model()
    again = Qwen3VLEncoder(
        "tiny-random-qwen3vl",
        model=model,
        tokenizer=tok,
        max_seq_length=64,
        query_instruction="Find evidence for the question.",
    )
    again.load_adapter(path)
    assert torch.allclose(again.encode_nodes(TEXTS), tiny.encode_nodes(TEXTS), atol=1e-5)
    assert again.fingerprint == tiny.fingerprint


@pytest.fixture()
def visual():
    return _visual_encoder()


def test_random_weights_image_and_video_nodes_embed_through_the_vision_tower(visual, media_dir) -> None:
    image = _image_node(media_dir)
    h, tree = _video_tree(media_dir)
    video = h.node_input(tree, 0)  # root of 0-4 s: 4 frames
    assert len(image.frames) == 1 and len(video.frames) == 4
    batch = visual.tokenize([image, video])
    assert batch["image_grid_thw"].shape[0] == 5  # one grid per image / frame
    n_visual = int((batch["input_ids"] == visual.model.config.image_token_id).sum())
    assert (
        n_visual
        == int(batch["image_grid_thw"].prod(1).sum()) // MERGE**2
        == batch["pixel_values"].shape[0] // MERGE**2
    )

    nodes = [image, video, NodeInput(image.text), NodeInput(video.text)]
    emb = visual.encode_nodes(nodes)
    assert emb.shape == (4, 32) and torch.allclose(emb.norm(dim=1), torch.ones(4), atol=1e-5)
    assert (emb[0] - emb[2]).abs().max() > 1e-3  # the image changes the node embedding ...
    assert (emb[1] - emb[3]).abs().max() > 1e-3  # ... and so do the frames
    single = torch.cat([visual.encode_nodes([x]) for x in nodes])
    assert torch.allclose(emb, single, atol=1e-5)  # mixed visual / text batches pool the right last token


def test_random_weights_lora_on_image_nodes_leaves_the_vision_tower_frozen(visual, media_dir) -> None:
    image = _image_node(media_dir)
    before = visual.encode_nodes([image])
    visual.add_adapter(r=4, alpha=8, dropout=0.0)
    named = dict(visual.model.named_parameters())
    trainable = [n for n, p in named.items() if p.requires_grad]
    assert trainable and all("lora_" in n and "language_model" in n for n in trainable)
    vision = {n: p for n, p in named.items() if ".visual." in n}
    assert vision and not any("lora_" in n or p.requires_grad for n, p in vision.items())
    with torch.no_grad():
        for name, p in named.items():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    with visual.adapter_disabled():
        assert torch.allclose(visual.encode_nodes([image]), before, atol=1e-6)  # f0 = the pre-adapter encoder
    assert (visual.encode_nodes([image]) - before).abs().max() > 1e-3  # fθ moved

    visual.model.train()
    emb = visual.embed_sorted(visual.tokenize([image]))
    emb.sum().backward()
    assert all(named[n].grad is not None and named[n].grad.abs().sum() > 0 for n in trainable)
    assert all(p.grad is None for p in vision.values())


def test_random_weights_max_frames_per_node_thins_long_video_parents(media_dir, monkeypatch) -> None:
    assert thin_frames(list(range(32)), 8) == [0, 4, 9, 13, 18, 22, 27, 31]  # first and last kept, even steps
    assert thin_frames(list(range(5)), 8) == [0, 1, 2, 3, 4] and thin_frames(list(range(5)), 1) == [2]
    with pytest.raises(ValueError, match="max_frames_per_node"):
        _visual_encoder(max_frames_per_node=0)

    enc = _visual_encoder(max_frames_per_node=3)
    h, tree = _video_tree(media_dir, end=None)
    root, leaf = h.node_input(tree, 0), h.node_input(tree, len(tree) - 1)
    assert len(root.frames) == 10 and len(leaf.frames) == 2
    kept = enc.node_frames(root)
    assert kept == [root.frames[0], root.frames[4], root.frames[9]] and enc.node_frames(leaf) == leaf.frames
    assert enc.input_length(root) == len(root.text) + 3 * 10_000  # the batching proxy sees the capped count

    import canopy_lit.hierarchy.video as video_mod

    decoded: list[float] = []
    real = video_mod.decode_frames
    monkeypatch.setattr(
        video_mod, "decode_frames", lambda path, times: decoded.extend(times) or real(path, times)
    )
    batch = enc.tokenize([root])
    assert decoded == [f.t for f in kept]  # thinned before decoding: the dropped frames are never read
    assert batch["image_grid_thw"].shape[0] == 3
    emb = enc.encode_nodes([root])
    assert emb.shape == (1, 32) and torch.isfinite(emb).all()
    uncapped = _visual_encoder(max_frames_per_node=None)
    assert (
        uncapped.node_frames(root) == root.frames
        and uncapped.input_length(root) == len(root.text) + 10 * 10_000
    )


def test_random_weights_fingerprint_names_image_resolution_and_dtype(media_dir) -> None:
    """Node and corpus caches are keyed by ``fingerprint``: another ``max_pixels`` (other image patches) or
    another dtype (other vectors) must not reuse the vectors of the first."""
    from canopy_lit.retrieval.encode import f0_fingerprint
    from canopy_lit.scoring.scorers import QuerySideEncoder

    model, tok = _tiny_random_weights_model()
    base = Qwen3VLEncoder("tiny-random-qwen3vl", model=model, processor=_tiny_processor(tok))
    node = _image_node(media_dir)
    small = Qwen3VLEncoder("tiny-random-qwen3vl", model=model, processor=_tiny_processor(tok, max_pixels=32 * 32))
    with torch.no_grad():  # the resolution is not cosmetic: the same image embeds differently
        assert not torch.allclose(base.encode_nodes([node]), small.encode_nodes([node]))
    half_model, half_tok = _tiny_random_weights_model()
    half = Qwen3VLEncoder("tiny-random-qwen3vl", model=half_model.to(torch.bfloat16),
                          processor=_tiny_processor(half_tok))  # fmt: skip
    keys = {enc.fingerprint for enc in (base, small, half)}
    assert len(keys) == 3
    assert len({f0_fingerprint(enc) for enc in (base, small, half)}) == 3  # the corpus embeddings' key
    assert len({QuerySideEncoder(enc).fingerprint for enc in (base, small, half)}) == 3
    assert (base.max_pixels, small.max_pixels) == (96 * 96, 32 * 32)
    assert (base.torch_dtype, half.torch_dtype) == ("float32", "bfloat16")
    same = Qwen3VLEncoder("tiny-random-qwen3vl", model=_tiny_random_weights_model()[0], processor=_tiny_processor(tok))
    assert same.fingerprint == base.fingerprint  # equal settings, equal key
