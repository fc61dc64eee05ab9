"""A real MiniLM training step on real HotpotQA instances: only LoRA weights move, and the loss goes down."""

from __future__ import annotations

import pytest
import torch

from canopy_lit.data import load_benchmark, split_questions, training_instances
from canopy_lit.data.datamodule import PreferenceDataModule
from canopy_lit.encoders import load_encoder
from canopy_lit.training import NodeEncoderModule


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    bench = load_benchmark("hotpotqa")
    insts = training_instances(bench, split_questions(bench, "train")[:6])
    dm = PreferenceDataModule.from_instances({"train": insts}, ["hotpotqa"], batch_size=8)
    enc = load_encoder("minilm", max_seq_length=64)
    module = NodeEncoderModule(enc, lr=1e-3, lora_target_modules=["query", "value"])
    dm.set_tokenizer(enc.tokenize)
    batch = dm.collate(dm.examples["train"][:6])
    return module, batch


def test_only_lora_weights_change_and_loss_decreases(setup) -> None:
    module, batch = setup
    module.train()
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    trainable = {n for n, p in module.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    opt = torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=1e-3)

    def loss_eval() -> float:
        module.eval()  # dropout off, so the before/after comparison is deterministic
        with torch.no_grad():
            from canopy_lit.training import pairwise_ranking_loss

            win, lose = module.pair_scores(batch)
            out = pairwise_ranking_loss(win, lose, batch["mask"]).item()
        module.train()
        return out

    start = loss_eval()
    for _ in range(5):
        loss = _step(module, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    end = loss_eval()
    assert end < start - 0.05, (start, end)
    changed = {n for n, p in module.named_parameters() if not torch.equal(p.detach(), before[n])}
    assert changed and changed <= trainable
    assert any("lora_B" in n for n in changed)


def _step(module: NodeEncoderModule, batch) -> torch.Tensor:
    from canopy_lit.training import pairwise_ranking_loss

    win, lose = module.pair_scores(batch)
    return pairwise_ranking_loss(win, lose, batch["mask"], module.hparams.scale)


def test_checkpoint_keeps_adapter_only(setup) -> None:
    module, _ = setup
    ckpt = {"state_dict": module.state_dict()}
    module.on_save_checkpoint(ckpt)
    assert ckpt["state_dict"] and all("lora_" in k for k in ckpt["state_dict"])
    assert ckpt["encoder_fingerprint"] == module.encoder.fingerprint
