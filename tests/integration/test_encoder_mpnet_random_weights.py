"""The MPNet backbone option (all-mpnet-base-v2's architecture) on a tiny random-weight MPNet folder: the real
weights are an optional 386 MB asset the test suite does not fetch. MPNet names its attention projections
q, k, v, o, not BERT's query, key, value, so LoRA's defaults and placement must follow the model type."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from canopy_lit.encoders import load_encoder
from canopy_lit.encoders.text import MPNET, default_lora_targets, resolve_text_backbone


def _tiny_random_mpnet_folder(root: Path) -> Path:
    """A 4-layer, 32-d MPNet with random weights; MiniLM's (BERT) tokenizer, whose ids fit MPNet's vocabulary."""
    from transformers import AutoTokenizer, MPNetConfig, MPNetModel

    torch.manual_seed(0)
    cfg = MPNetConfig(hidden_size=32, num_hidden_layers=4, num_attention_heads=2, intermediate_size=64)
    MPNetModel(cfg).save_pretrained(root)
    AutoTokenizer.from_pretrained(str(resolve_text_backbone("minilm"))).save_pretrained(root)
    return root


def test_default_lora_targets_follow_the_model_type() -> None:
    assert default_lora_targets("bert") == ["query", "value"]  # peft's own table
    assert default_lora_targets("mpnet") == ["q", "v"]  # absent from peft's table
    with pytest.raises(ValueError, match="model.lora_target_modules"):
        default_lora_targets("no-such-model-type")


def test_tiny_random_mpnet_gets_lora_on_its_own_attention_names(tmp_path: Path) -> None:
    enc = load_encoder(str(_tiny_random_mpnet_folder(tmp_path / "tiny-random-mpnet")), max_seq_length=64)
    f0 = enc.encode_nodes(["Paris is the capital of France.", "a | table | row"])
    enc.add_adapter(r=4, alpha=8, dropout=0.0)  # no targets given: MPNet's q, v
    trainable = {n for n, p in enc.model.named_parameters() if p.requires_grad}
    adapted = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in trainable}
    assert adapted == {"q", "v"} and len(trainable) == 4 * 2 * 2  # 4 layers x (q, v) x (A, B)
    assert torch.allclose(enc.encode_nodes(["Paris is the capital of France.", "a | table | row"]), f0, atol=1e-6)


def test_tiny_random_mpnet_quickstart_placement(tmp_path: Path) -> None:
    # experiment=quickstart_mpnet: every linear layer of the top layers only (q, k, v, o and both dense)
    enc = load_encoder(str(_tiny_random_mpnet_folder(tmp_path / "tiny-random-mpnet")), max_seq_length=64)
    enc.add_adapter(r=4, alpha=8, dropout=0.0, target_modules=["q", "k", "v", "o", "dense"], layers=[2, 3])
    trainable = [n for n, p in enc.model.named_parameters() if p.requires_grad]
    layers = {int(n.split("layer.")[1].split(".")[0]) for n in trainable}
    assert layers == {2, 3} and len(trainable) == 2 * 6 * 2  # 2 layers x 6 linear layers x (A, B)


def test_mpnet_alias_names_the_pinned_asset(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import canopy_lit.assets as assets

    asked: list[str] = []
    monkeypatch.setattr(assets, "resolve", lambda spec, **kw: asked.append(spec) or tmp_path)
    for alias in ("mpnet", MPNET, f"sentence-transformers/{MPNET}"):
        assert resolve_text_backbone(alias) == tmp_path
    assert asked == ["mpnet"] * 3  # the sha256-pinned registry entry, never a hub download
