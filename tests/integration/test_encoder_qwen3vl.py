"""Qwen3-VL-Embedding code path on a tiny randomly initialised Qwen3-VL (its weights cannot be had here).

The architecture is the real transformers ``Qwen3VLModel`` built from a small config with no
download; MiniLM's tokenizer stands in for Qwen's (only token ids matter for random weights).
"""

from __future__ import annotations

import pytest
import torch

from canopy_lit.encoders.qwen3vl import Qwen3VLEncoder

TEXTS = ["Who wrote Hamlet?", "Hamlet is a tragedy by William Shakespeare, written around 1600.", "short"]


def _tiny_random_weights_model(seed: int = 0):
    from transformers import AutoTokenizer, Qwen3VLConfig, Qwen3VLModel

    from canopy_lit.encoders.text import resolve_text_backbone

    tok = AutoTokenizer.from_pretrained(str(resolve_text_backbone("minilm")))
    cfg = Qwen3VLConfig(
        text_config={
            "vocab_size": tok.vocab_size, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 512,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 2]},
        },
        vision_config={
            "depth": 2, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2, "out_hidden_size": 32,
            "deepstack_visual_indexes": [0], "num_position_embeddings": 64,
        },
        image_token_id=tok.vocab_size - 3, video_token_id=tok.vocab_size - 2, vision_start_token_id=tok.vocab_size - 4,
        vision_end_token_id=tok.vocab_size - 5,
    )
    torch.manual_seed(seed)
    return Qwen3VLModel(cfg).eval(), tok


@pytest.fixture()
def tiny():
    model, tok = _tiny_random_weights_model()
    return Qwen3VLEncoder(
        "tiny-random-qwen3vl", model=model, tokenizer=tok, max_seq_length=64, query_instruction="Find evidence for the question."
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
        "tiny-random-qwen3vl", model=model, tokenizer=tok, max_seq_length=64, query_instruction="Find evidence for the question."
    )
    again.load_adapter(path)
    assert torch.allclose(again.encode_nodes(TEXTS), tiny.encode_nodes(TEXTS), atol=1e-5)
    assert again.fingerprint == tiny.fingerprint
