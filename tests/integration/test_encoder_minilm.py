"""The real MiniLM node encoder: f0 vs fθ, adapter save/reload, deduplicated batched encoding."""

from __future__ import annotations

import json

import pytest
import torch
from hydra import compose
from hydra.utils import instantiate

from canopy_lit.encoders import FINGERPRINT_FILE, TextEncoder, load_encoder

TEXTS = [
    "Lilu (mythology): Lilu or lilu is an Akkadian word related to Lilith.",
    "The Alû is a demon in Babylonian mythology.",
    "Paris is the capital of France.",
    "The Alû is a demon in Babylonian mythology.",  # duplicate on purpose
    "A table row | with | cells",
]


@pytest.fixture(scope="module")
def trained():
    """MiniLM with a LoRA adapter whose weights are moved off their zero init (as after training)."""
    torch.manual_seed(0)
    enc = load_encoder("minilm")
    base_nodes = enc.encode_nodes(TEXTS)
    enc.add_adapter(r=8, alpha=16, dropout=0.05, target_modules=["query", "value"])
    with torch.no_grad():
        for name, p in enc.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    return enc, base_nodes


def test_matches_sentence_transformers() -> None:
    from sentence_transformers import SentenceTransformer

    from canopy_lit.encoders.text import resolve_text_backbone

    enc = load_encoder("minilm")
    ref = SentenceTransformer(str(resolve_text_backbone("minilm")), device="cpu").encode(TEXTS, convert_to_tensor=True)
    assert torch.allclose(enc.encode_nodes(TEXTS), ref, atol=1e-5)
    assert enc.dim == 384 and enc.fingerprint.endswith("adapter=none")
    assert torch.allclose(enc.encode_queries(TEXTS), enc.encode_nodes(TEXTS))  # no adapter: f0 == fθ


def test_f0_is_backbone_and_ftheta_differs(trained) -> None:
    enc, base_nodes = trained
    q = enc.encode_queries(TEXTS)
    nodes = enc.encode_nodes(TEXTS)
    assert torch.allclose(q, base_nodes, atol=1e-6)  # f0 = adapter disabled = the frozen backbone
    assert (nodes - base_nodes).abs().max() > 1e-3
    assert torch.allclose(nodes.norm(dim=1), torch.ones(len(TEXTS)), atol=1e-5)
    only_lora = all("lora_" in n for n, p in enc.model.named_parameters() if p.requires_grad)
    assert only_lora


def test_dedup_and_batch_order_do_not_change_results(trained, monkeypatch) -> None:
    enc, _ = trained
    seen: list[int] = []
    real = enc.embed

    def counting(batch):
        seen.append(batch["input_ids"].shape[0])
        return real(batch)

    monkeypatch.setattr(enc, "embed", counting)
    full = enc.encode_nodes(TEXTS, batch_size=2)
    assert sum(seen) == len(set(TEXTS))  # the duplicate text is encoded once
    assert torch.equal(full[1], full[3])
    single = torch.cat([enc.encode_nodes([t]) for t in TEXTS])
    assert torch.allclose(full, single, atol=1e-5)  # padding inside sorted batches changes nothing


def test_embed_sorted_equals_embed_with_gradients(trained) -> None:
    enc, _ = trained
    enc.model.eval()  # no dropout, so both paths are deterministic
    tokens = enc.tokenize(TEXTS * 4)
    a = enc.embed(tokens)
    b = enc.embed_sorted(tokens, chunk_size=3)
    assert torch.allclose(a, b, atol=1e-5)
    b.sum().backward()
    assert any(p.grad is not None for n, p in enc.model.named_parameters() if "lora_" in n)
    enc.model.zero_grad()


def test_adapter_round_trip(trained, tmp_path) -> None:
    enc, _ = trained
    path = enc.save_adapter(tmp_path / "adapter")
    files = {p.name for p in path.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", FINGERPRINT_FILE} <= files
    assert (path / "adapter_model.safetensors").stat().st_size < 1_000_000  # adapter only, no backbone
    meta = json.loads((path / FINGERPRINT_FILE).read_text())
    assert meta["fingerprint"] == enc.fingerprint and meta["adapter_hash"] != "none"

    again = load_encoder("minilm", adapter=path)
    assert again.fingerprint == enc.fingerprint
    assert torch.allclose(again.encode_nodes(TEXTS), enc.encode_nodes(TEXTS), atol=1e-6)
    assert torch.allclose(again.encode_queries(TEXTS), enc.encode_queries(TEXTS), atol=1e-6)
    assert not [n for n, p in again.named_parameters() if p.requires_grad]  # loaded for inference


def test_bad_adapter_folder_is_named(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="not a peft adapter folder"):
        load_encoder("minilm", adapter=tmp_path)


def test_token_budget_batches_bound_padded_tokens_and_keep_embeddings() -> None:
    enc = load_encoder("minilm")
    texts = ["short", "a somewhat longer sentence about the Eiffel Tower in Paris, France.", "mid length text"] * 7
    texts += [" ".join(["word"] * 600)]  # truncated to max_seq_length (512)
    reference = enc.encode_nodes(texts)
    enc.max_batch_tokens = 64
    lengths = sorted(enc.token_lengths(texts), reverse=True)
    assert lengths[0] == enc.max_seq_length
    batches = enc.batches(lengths, batch_size=8)
    assert [p for b in batches for p in b] == list(range(len(texts)))  # every input exactly once, in order
    assert all(len(b) <= 8 and (len(b) == 1 or len(b) * lengths[b[0]] <= 64) for b in batches)
    assert torch.allclose(enc.encode_nodes(texts), reference, atol=1e-5)


def test_adapter_scale_interpolates_weights_between_f0_and_ftheta(trained, tmp_path) -> None:
    # WiSE-FT for LoRA: every adapted layer computes W0 x + scale * ΔW x, so scale 0.5 is the midpoint.
    enc, base_nodes = trained
    path = enc.save_adapter(tmp_path / "adapter")
    encs = {s: load_encoder("minilm", adapter=path, adapter_scale=s) for s in (0.0, 0.5, 1.0)}
    x = torch.randn(3, encs[1.0].dim)
    outs = {}
    for s, e in encs.items():
        layer = next(m for n, m in e.model.named_modules() if n.endswith("attention.self.query") and hasattr(m, "lora_B"))
        outs[s] = layer(x)
    assert not torch.allclose(outs[0.0], outs[1.0], atol=1e-4)  # the adapter moves this layer
    assert torch.allclose(outs[0.5], (outs[0.0] + outs[1.0]) / 2, atol=1e-5)
    assert torch.allclose(encs[0.0].encode_nodes(TEXTS), base_nodes, atol=1e-6)  # scale 0 is f0
    assert torch.allclose(encs[1.0].encode_nodes(TEXTS), enc.encode_nodes(TEXTS), atol=1e-6)
    # each scale is its own encoder for the node-embedding cache
    assert len({e.fingerprint for e in encs.values()}) == 3 and encs[1.0].fingerprint == enc.fingerprint
    with pytest.raises(ValueError, match="adapter scale must be a finite number"):
        load_encoder("minilm", adapter=path, adapter_scale=-1)
    with pytest.raises(ValueError, match="needs an adapter"):
        load_encoder("minilm", adapter_scale=0.5)


def test_the_encoder_config_builds_its_class_with_the_adapter_as_train_and_evaluate_do(trained, tmp_path, hydra_ctx) -> None:
    """``instantiate(cfg.encoder, device="cpu")`` (train.py) on configs/encoder/minilm.yaml: the TextEncoder
    with encoder.adapter loaded and scaled, as the library's ``load_encoder`` builds it."""
    enc, _ = trained
    path = enc.save_adapter(tmp_path / "adapter")
    cfg = compose("evaluate", overrides=[f"encoder.adapter={path}", "encoder.adapter_scale=0.5"])
    built = instantiate(cfg.encoder, device="cpu")
    assert type(built) is TextEncoder and built.has_adapter
    assert built.fingerprint == load_encoder("minilm", adapter=path, adapter_scale=0.5).fingerprint != enc.fingerprint
