"""A real MiniLM training step on real HotpotQA instances: only LoRA weights move, and the loss goes down."""

from __future__ import annotations

import pytest
import torch

from canopy_lit.data import load_benchmark, split_questions
from canopy_lit.data.datamodule import PreferenceDataModule
from canopy_lit.encoders import load_encoder
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.supervision import training_instances
from canopy_lit.training import NodeEncoderModule


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    bench = load_benchmark("hotpotqa")
    insts = training_instances(split_questions(bench, "train")[:6], bench.items, Hierarchy(2))
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


def test_stop_weight_reweights_stop_instances_in_the_training_loss(setup) -> None:
    """model.stop_weight = w: the step's loss is the weighted mean with stop instances counted w times."""
    from canopy_lit.training import pairwise_ranking_loss

    module, batch = setup
    batch = dict(batch)
    batch["stop"] = torch.zeros(len(batch["query_index"]), dtype=torch.bool)
    batch["stop"][0] = True  # mark one instance as a stop decision
    module.eval()
    logged: dict[str, torch.Tensor] = {}
    module.log = lambda name, value, **kw: logged.setdefault(name, value)  # no Trainer attached
    with torch.no_grad():
        win, lose = module.pair_scores(batch)
        per = pairwise_ranking_loss(win, lose, batch["mask"], reduction="none")
        module.hparams.stop_weight = 4.0
        weighted = module.training_step(batch, 0)
        module.hparams.stop_weight = 1.0
        plain = module.training_step(batch, 0)
    w = 1.0 + 3.0 * batch["stop"].float()
    assert torch.allclose(weighted, (per * w).sum() / w.sum(), atol=1e-6)
    assert torch.allclose(plain, per.mean(), atol=1e-6)
    assert not torch.allclose(weighted, plain)
    with pytest.raises(ValueError, match="stop_weight"):
        NodeEncoderModule(module.encoder, stop_weight=0.0)


def _gold_children(batch) -> torch.Tensor:
    return batch["tie_ok"] & batch["mask"]  # child ≻ parent pairs: in P(v), the g ≻ v pairs


def _gold_siblings(batch) -> torch.Tensor:
    from canopy_lit.training.module import sibling_pairs

    return sibling_pairs(batch)


@pytest.mark.parametrize(
    ("knob", "pairs_of"), [("gold_child_weight", _gold_children), ("gold_sibling_weight", _gold_siblings)]
)
def test_pair_cost_knob_weights_only_its_pairs_inside_the_loss(setup, knob: str, pairs_of) -> None:
    """model.<knob> = c: each of its pairs (g ≻ v, or g ≻ n) counts c times inside ℓ, no other pair does."""
    from canopy_lit.training import pairwise_ranking_loss

    module, batch = setup
    costed = pairs_of(batch)
    assert costed.any() and (batch["mask"] & ~costed).any()  # the real batch has both kinds of pair
    module.eval()
    module.log = lambda name, value, **kw: None  # no Trainer attached
    with torch.no_grad():
        win, lose = module.pair_scores(batch)
        module.hparams[knob] = 5.0
        weighted = module.training_step(batch, 0)
        module.hparams[knob] = 1.0
        plain = module.training_step(batch, 0)
    x = (20.0 * (lose - win)).masked_fill(~batch["mask"], float("-inf"))
    by_hand = torch.log1p((torch.exp(x) * (1.0 + 4.0 * costed.float())).sum(1)).mean()
    assert torch.allclose(weighted, by_hand, atol=1e-5)
    assert torch.allclose(plain, pairwise_ranking_loss(win, lose, batch["mask"]), atol=1e-6)
    assert weighted > plain
    with pytest.raises(ValueError, match=knob):
        NodeEncoderModule(module.encoder, **{knob: 0.0})
