"""Training fθ through the late-chunked forward (``encoder.node_pooling=late``): the training batch carries
items and node spans, the module pools each node from its item's forward (the inference path's maths), and
gradients reach the LoRA weights; the adapter records its pooling. Real bundled HotpotQA, real MiniLM."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import lightning as L
import pytest
import torch

from canopy_lit.data import load_benchmark, split_questions
from canopy_lit.data.datamodule import PreferenceDataModule
from canopy_lit.encoders.base import FINGERPRINT_FILE
from canopy_lit.encoders.text import TextEncoder
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.supervision import add_hard_negatives, training_instances
from canopy_lit.training import NodeEncoderModule, PreferenceBatch
from canopy_lit.training.losses import pairwise_ranking_loss


@pytest.fixture(scope="module")
def setting():
    """Instances of two real HotpotQA training questions (hard negatives on some: a distractor item's nodes
    join the batch), a late datamodule over them and its trees by item key."""
    torch.manual_seed(0)
    bench = load_benchmark("hotpotqa")
    questions = split_questions(bench, "train")[:2]
    hier = Hierarchy(2)
    insts = training_instances(questions, bench.items, hier)
    add_hard_negatives(insts[:3], questions, bench.candidates, bench.items, hier, 1)
    dm = PreferenceDataModule.from_instances({"train": insts}, ["hotpotqa"], node_pooling="late")
    trees = {f"0:{x.tree.item.id}": x.tree for x in insts}
    trees |= {f"0:{t.item.id}": t for x in insts for t, _ in x.hard_negatives}
    return hier, insts, dm, trees


def _module(pooling: str = "late") -> NodeEncoderModule:
    torch.manual_seed(0)
    enc = TextEncoder("minilm", node_pooling=pooling)
    module = NodeEncoderModule(enc, lora_target_modules=["query", "key", "value", "dense"], lora_layers=[3, 4, 5])
    with torch.no_grad():  # a trained-looking adapter: fθ differs from f0
        for name, p in enc.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    return module


def _batch(dm: PreferenceDataModule, module: NodeEncoderModule) -> PreferenceBatch:
    dm.set_tokenizer(module.encoder.tokenize, late=module.encoder.late_tokenize)
    return dm.collate(dm.examples["train"])


def test_the_late_batch_carries_items_and_each_nodes_ranges(setting) -> None:
    hier, insts, dm, trees = setting
    assert dm.fingerprint["node_pooling"] == "late"
    assert "node_pooling" not in PreferenceDataModule(["hotpotqa"]).fingerprint  # per-node: as before
    module = _module()
    batch = _batch(dm, module)
    late = batch.late
    assert late is not None and batch.node_tokens is None and batch.query_tokens is not None
    items = {k for k, _ in batch.node_keys}
    assert len(late.items) == len(items) >= 3  # the gold items and a hard negative's
    for u, (key, node) in enumerate(batch.node_keys):
        text, spans = hier.node_spans(trees[key])
        assert late.node_spans[u] == [tuple(r) for r in spans[node]]
        assert "".join(text[s:e] for s, e in late.node_spans[u]) == batch.node_texts[u]
    moved = L.LightningModule().transfer_batch_to_device(batch, torch.device("meta"), 0)
    assert moved.late.node_item.device.type == "meta" and moved.late.items[0].index.device.type == "meta"


@pytest.mark.parametrize("pooling", ["late", "late_region"])
def test_the_training_embedding_is_the_inference_late_embedding_with_grad(setting, pooling: str) -> None:
    hier, _, dm, trees = setting
    module = _module(pooling)
    batch = _batch(dm, module)
    module.eval()  # no dropout: the same numbers as inference
    emb = module.node_embeddings(batch)
    f0 = module.node_embeddings(batch, f0=True)
    assert emb.requires_grad and emb.shape == (len(batch.node_texts), module.encoder.dim)
    enc = module.encoder
    keys = list(dict.fromkeys(k for k, _ in batch.node_keys))
    want = dict(zip(keys, enc.encode_spans([hier.node_spans(trees[k]) for k in keys]), strict=True))
    with enc.adapter_disabled():
        want_f0 = dict(zip(keys, enc.encode_spans([hier.node_spans(trees[k]) for k in keys]), strict=True))
    for u, (key, node) in enumerate(batch.node_keys):
        assert torch.allclose(emb[u].detach(), want[key][node], atol=1e-5), (key, node)
        assert torch.allclose(f0[u], want_f0[key][node], atol=1e-5), (key, node)
    assert float((emb.detach() - f0).abs().max()) > 1e-3  # the adapter takes part
    # the eval cache path gives the same vectors, each node pooled once
    cache: dict = {}
    with torch.no_grad():
        cached = module.node_embeddings(batch, cache=cache)
    assert len(cache) == len(batch.node_keys) and torch.allclose(cached, emb.detach(), atol=1e-6)


def test_a_gradient_reaches_the_lora_weights_through_the_late_forward(setting) -> None:
    _, _, dm, _ = setting
    module = _module()
    batch = _batch(dm, module)
    module.train()
    module.on_train_batch_start(batch, 0)
    win, lose = module.pair_scores(batch)
    loss = pairwise_ranking_loss(win, lose, batch.mask, module.hparams.scale)
    loss.backward()
    grads = {n: p.grad for n, p in module.named_parameters() if p.requires_grad}
    assert grads and all(g is not None for g in grads.values())
    for layer in (3, 4, 5):
        assert any(float(g.abs().sum()) > 0 for n, g in grads.items() if f"layer.{layer}." in n and "lora_" in n)


def test_the_encoder_and_the_batch_must_agree_on_the_pooling(setting) -> None:
    _, insts, dm, _ = setting
    module = _module()
    batch = _batch(dm, module)
    per_node = NodeEncoderModule(TextEncoder("minilm"))
    with pytest.raises(ValueError, match="node_pooling=node but the batch carries items"):
        per_node.node_embeddings(batch)
    plain = PreferenceDataModule.from_instances({"train": insts[:2]}, ["hotpotqa"])
    plain.set_tokenizer(module.encoder.tokenize)
    with pytest.raises(ValueError, match="node_pooling=late but the batch does not carry"):
        module.node_embeddings(plain.collate(plain.examples["train"]))
    with pytest.raises(ValueError, match="needs the encoder's late_tokenize"):
        PreferenceDataModule.from_instances({"train": insts[:1]}, ["hotpotqa"], node_pooling="late").set_tokenizer(
            module.encoder.tokenize
        )


def test_the_adapter_records_its_pooling_and_another_pooling_warns(tmp_path: Path, caplog) -> None:
    module = _module()
    module.encoder.save_adapter(tmp_path / "late")
    meta = json.loads((tmp_path / "late" / FINGERPRINT_FILE).read_text())
    assert meta["node_pooling"] == "late" and ":nodes=late:" in meta["fingerprint"]
    with caplog.at_level(logging.WARNING, logger="canopy_lit.encoders.base"):
        TextEncoder("minilm", adapter=tmp_path / "late", node_pooling="late")
        assert "trained with encoder.node_pooling" not in caplog.text
        TextEncoder("minilm", adapter=tmp_path / "late")
    assert "trained with encoder.node_pooling=late but is loaded with node_pooling=node" in caplog.text
    # an adapter saved before the key existed was trained per node
    del meta["node_pooling"]
    (tmp_path / "late" / FINGERPRINT_FILE).write_text(json.dumps(meta))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="canopy_lit.encoders.base"):
        TextEncoder("minilm", adapter=tmp_path / "late", node_pooling="late_region")
    assert "trained with encoder.node_pooling=node but is loaded with node_pooling=late_region" in caplog.text
