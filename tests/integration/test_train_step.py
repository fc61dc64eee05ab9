"""A real MiniLM training step on real HotpotQA instances: only LoRA weights move, and the loss goes down."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest
import torch

from canopy_lit.data import load_benchmark, split_questions
from canopy_lit.data.datamodule import PreferenceDataModule
from canopy_lit.encoders import load_encoder
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.supervision import PairKind, add_hard_negatives, training_instances
from canopy_lit.training import NodeEncoderModule, PreferenceBatch


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    bench = load_benchmark("hotpotqa")
    insts = training_instances(split_questions(bench, "train")[:6], bench.items, Hierarchy(2))
    dm = PreferenceDataModule.from_instances({"train": insts}, ["hotpotqa"], batch_size=8)
    enc = load_encoder("minilm", max_seq_length=64)
    module = NodeEncoderModule(enc, optimizer=partial(torch.optim.AdamW, lr=1e-3, weight_decay=0.0), lora_target_modules=["query", "value"])
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
            out = pairwise_ranking_loss(win, lose, batch.mask).item()
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
    return pairwise_ranking_loss(win, lose, batch.mask, module.hparams.scale)


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
    stop = torch.zeros(len(batch), dtype=torch.bool)
    stop[0] = True  # mark one instance as a stop decision
    batch = replace(batch, stop=stop)
    module.eval()
    logged: dict[str, torch.Tensor] = {}
    module.log = lambda name, value, **kw: logged.setdefault(name, value)  # no Trainer attached
    with torch.no_grad():
        win, lose = module.pair_scores(batch)
        per = pairwise_ranking_loss(win, lose, batch.mask, reduction="none")
        module.hparams.stop_weight = 4.0
        weighted = module.training_step(batch, 0)
        module.hparams.stop_weight = 1.0
        plain = module.training_step(batch, 0)
    w = 1.0 + 3.0 * batch.stop.float()
    assert torch.allclose(weighted, (per * w).sum() / w.sum(), atol=1e-6)
    assert torch.allclose(plain, per.mean(), atol=1e-6)
    assert not torch.allclose(weighted, plain)
    with pytest.raises(ValueError, match="stop_weight"):
        NodeEncoderModule(module.encoder, stop_weight=0.0)


def _gold_children(batch: PreferenceBatch) -> torch.Tensor:
    return batch.pairs_of(PairKind.CHILD_OVER_PARENT)  # g ≻ v


def _gold_siblings(batch: PreferenceBatch) -> torch.Tensor:
    return batch.pairs_of(PairKind.GOLD_OVER_SIBLING)  # g ≻ n


@pytest.mark.parametrize(
    ("knob", "pairs_of"), [("gold_child_weight", _gold_children), ("gold_sibling_weight", _gold_siblings)]
)
def test_pair_cost_knob_weights_only_its_pairs_inside_the_loss(setup, knob: str, pairs_of) -> None:
    """model.<knob> = c: each of its pairs (g ≻ v, or g ≻ n) counts c times inside ℓ, no other pair does."""
    from canopy_lit.training import pairwise_ranking_loss

    module, batch = setup
    costed = pairs_of(batch)
    assert costed.any() and (batch.mask & ~costed).any()  # the real batch has both kinds of pair
    module.eval()
    module.log = lambda name, value, **kw: None  # no Trainer attached
    with torch.no_grad():
        win, lose = module.pair_scores(batch)
        module.hparams[knob] = 5.0
        weighted = module.training_step(batch, 0)
        module.hparams[knob] = 1.0
        plain = module.training_step(batch, 0)
    x = (20.0 * (lose - win)).masked_fill(~batch.mask, float("-inf"))
    by_hand = torch.log1p((torch.exp(x) * (1.0 + 4.0 * costed.float())).sum(1)).mean()
    assert torch.allclose(weighted, by_hand, atol=1e-5)
    assert torch.allclose(plain, pairwise_ranking_loss(win, lose, batch.mask), atol=1e-6)
    assert weighted > plain
    with pytest.raises(ValueError, match=knob):
        NodeEncoderModule(module.encoder, **{knob: 0.0})


@pytest.fixture(scope="module")
def mixed():
    """A fresh module (pair costs 3 / 2, stop weight 2) and a real batch holding every pair kind and padding."""
    bench = load_benchmark("hotpotqa")
    questions = split_questions(bench, "train")[:40]
    hier = Hierarchy(2)
    insts = training_instances(questions, bench.items, hier)
    stops, descends = [x for x in insts if x.stop][:2], [x for x in insts if not x.stop][:6]
    add_hard_negatives([*descends[:3], stops[0]], questions, bench.candidates, bench.items, hier, 1)
    dm = PreferenceDataModule.from_instances({"train": [*descends, *stops]}, ["hotpotqa"], batch_size=8)
    torch.manual_seed(0)
    enc = load_encoder("minilm", max_seq_length=64)
    module = NodeEncoderModule(
        enc, lora_target_modules=["query", "value"], gold_child_weight=3.0, gold_sibling_weight=2.0, stop_weight=2.0
    )
    module.log = lambda name, value, **kw: None  # no Trainer attached
    dm.set_tokenizer(enc.tokenize)
    return module, dm.collate(dm.examples["train"])


def test_weighted_training_step_keeps_its_pinned_loss_and_gradient(mixed) -> None:
    """Pinned with the dict batch whose sibling pairs were read off the layout (commit 8c71471): same numbers."""
    module, batch = mixed
    assert {int(k) for k in batch.pair_kind.unique()} == {int(k) for k in PairKind} and batch.stop.any()
    module.eval()  # dropout off: the numbers are deterministic
    module.zero_grad()
    loss = module.training_step(batch, 0)
    loss.backward()
    grad_norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in module.parameters() if p.grad is not None))
    module.zero_grad()
    assert loss.item() == pytest.approx(2.2140088081359863, rel=1e-5)
    assert grad_norm.item() == pytest.approx(1.931608942506231, rel=1e-4)


def test_pair_costs_follow_the_batch_pair_kind_not_its_layout(mixed) -> None:
    """Relabelled kinds are honoured: P(v)'s g ≻ n pairs marked parent-over-child lose the sibling cost, and
    v ≻ n pairs marked siblings gain it, though the layout (v's row in every pair) still says otherwise."""
    from canopy_lit.training import pairwise_ranking_loss

    module, batch = mixed
    kinds = batch.pair_kind.clone()
    sibling = kinds == PairKind.GOLD_OVER_SIBLING
    parent_over_free = (kinds == PairKind.PARENT_OVER_CHILD) & ~batch.stop[:, None]  # v ≻ n of descend instances
    assert sibling.any() and parent_over_free.any()
    kinds[sibling], kinds[parent_over_free] = PairKind.PARENT_OVER_CHILD, PairKind.GOLD_OVER_SIBLING
    relabelled = replace(batch, pair_kind=kinds)
    module.eval()
    with torch.no_grad():
        win, lose = module.pair_scores(batch)
        got = module.training_step(relabelled, 0)
        as_built = module.training_step(batch, 0)
    costs = 1.0 + 2.0 * relabelled.tie_ok.float() + 1.0 * parent_over_free.float()  # child 3, sibling 2
    stop_weight = 1.0 + batch.stop.float()
    want = pairwise_ranking_loss(win, lose, batch.mask, 20.0, weight=stop_weight, pair_weight=costs)
    assert torch.allclose(got, want, atol=1e-6)
    assert not torch.allclose(got, as_built)


def test_a_loaded_adapter_is_tested_as_ftheta_but_not_fitted() -> None:
    """train=false encoder.adapter=DIR: the module keeps the frozen adapter (no fresh one over it) and refuses
    to fit it; canopy_lit/studies/retest_recipe.py tests the committed adapters this way."""
    enc = load_encoder("minilm", adapter="quickstart")  # the max_seq_length it was trained at
    before = enc.adapter_hash()
    module = NodeEncoderModule(enc)  # was: AssertionError("no trainable LoRA parameters") at construction
    assert module.encoder.adapter_hash() == before
    module.setup("test")
    with pytest.raises(AssertionError, match="no trainable LoRA parameters.*train=false"):
        module.setup("fit")
