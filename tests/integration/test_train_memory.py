"""Activation checkpointing (``model.activation_checkpointing``) keeps a training step's numbers bit for bit:
real MiniLM with dropout on, real HotpotQA instances, the same loss and LoRA gradients as a plain step."""

from __future__ import annotations

import pytest
import torch

from canopy_lit.data import load_benchmark, split_questions
from canopy_lit.data.datamodule import PreferenceDataModule
from canopy_lit.encoders import load_encoder
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.supervision import training_instances
from canopy_lit.training import NodeEncoderModule


def _step(checkpointing: bool, batch) -> tuple[float, dict[str, torch.Tensor], NodeEncoderModule]:
    torch.manual_seed(0)  # the same LoRA init in both modules
    enc = load_encoder("minilm", max_seq_length=48)
    module = NodeEncoderModule(enc, lora_target_modules=["query", "value"], activation_checkpointing=checkpointing)
    module.log = lambda *a, **kw: None  # no Trainer attached
    module.train()  # backbone and LoRA dropout on: the recompute must draw the same masks
    torch.manual_seed(1)
    loss = module.training_step(batch, 0)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in module.named_parameters() if p.requires_grad}
    return loss.item(), grads, module


@pytest.fixture(scope="module")
def batch():
    bench = load_benchmark("hotpotqa")
    insts = training_instances(split_questions(bench, "train")[:4], bench.items, Hierarchy(2))
    dm = PreferenceDataModule.from_instances({"train": insts}, ["hotpotqa"], batch_size=8)
    dm.set_tokenizer(load_encoder("minilm", max_seq_length=48).tokenize)
    return dm.collate(dm.examples["train"][:8])


def test_checkpointed_step_equals_the_plain_step_bit_for_bit(batch) -> None:
    assert batch.node_tokens["input_ids"].shape[0] > 16  # several chunks, as in a real step
    plain_loss, plain, _ = _step(False, batch)
    ckpt_loss, ckpt, module = _step(True, batch)
    layers = [m for m in module.encoder.model.modules() if type(m).__name__ == "BertLayer"]
    assert layers and all(m.gradient_checkpointing for m in layers)  # it is really on
    assert ckpt_loss == plain_loss
    assert plain.keys() == ckpt.keys() and any(g.abs().sum() > 0 for g in plain.values())
    assert all(torch.equal(plain[n], ckpt[n]) for n in plain)


def test_checkpointing_holds_fewer_saved_activations(batch) -> None:
    """What the forward keeps for the backward (bytes of saved tensors) shrinks: the point of the knob."""

    def saved_bytes(checkpointing: bool) -> int:
        torch.manual_seed(0)
        module = NodeEncoderModule(
            load_encoder("minilm", max_seq_length=48), lora_target_modules=["query", "value"],
            activation_checkpointing=checkpointing,
        )
        module.log = lambda *a, **kw: None
        module.train()
        total = 0

        def pack(t: torch.Tensor) -> torch.Tensor:
            nonlocal total
            total += t.numel() * t.element_size()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            module.training_step(batch, 0)
        return total

    assert saved_bytes(True) < saved_bytes(False) / 3
