"""Hard negatives from distractor items (``datamodule.hard_negatives``, issue #20) on real bundled HotpotQA."""

from __future__ import annotations

import hashlib
import json
from functools import partial
from typing import Any

import pytest
import torch

from canopy_lit.data import load_benchmark, split_questions
from canopy_lit.data.batch import PreferenceBatch
from canopy_lit.data.collate import PreferenceCollate
from canopy_lit.data.datamodule import PreferenceDataModule
from canopy_lit.data.examples import render_instance
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.supervision import (
    PairKind,
    add_hard_negatives,
    gold_counts,
    preference_pairs,
    training_instances,
)
from canopy_lit.training.metrics import DecisionAccuracy

OPTIONS = {"hotpotqa": {"max_questions": {"train": 24, "val": 6, "test": 8}}}
# sha256 of every batch of each split's loader, computed with the code before this option existed
# (commit 2af0459) on OPTIONS above, batch_size 8. Re-pin only for an intended change of data or rendering.
PINNED = {
    "train": "367d0a4d04b6c7990e95a946d9388318c8fad9b9bfc5f9f283858227217edff0",
    "val": "fc106f78b6d377991011eb52e4477ef1a720108525a92d7c72dea92dca78f77e",
    "test": "cf02bb62952c6dfbdf69e1ac2c5ace9298548d1a04974f40d704f69cb7501f7f",
}
PINNED_KEYS = (  # the batch content the pins cover: every pair's nodes, kind flags and instance fields
    "node_texts", "query_texts", "query_index", "winner", "loser", "mask", "tie_ok",
    "benchmark", "depth", "stop", "question_ids", "item_ids",
)  # fmt: skip


def _fingerprint(batch: PreferenceBatch) -> str:
    """sha256 over PINNED_KEYS, plus the in-tree flags when the batch holds hard-negative pairs."""
    view = {k: getattr(batch, k) for k in PINNED_KEYS}
    if batch.pairs_of(PairKind.HARD_NEGATIVE).any():
        view["pair_in_tree"] = batch.in_tree
    h = hashlib.sha256()
    for k in sorted(view):
        v = view[k]
        h.update(k.encode())
        if isinstance(v, torch.Tensor):
            h.update(f"{v.dtype}{tuple(v.shape)}".encode())
            h.update(v.numpy().tobytes())
        else:
            h.update(json.dumps(v).encode())
    return h.hexdigest()


def _split_fingerprints(dm: PreferenceDataModule) -> dict[str, str]:
    out = {}
    for split in ("train", "val", "test"):
        h = hashlib.sha256()
        for batch in getattr(dm, f"{split}_dataloader")():
            h.update(_fingerprint(batch).encode())
        out[split] = h.hexdigest()
    return out


@pytest.fixture(scope="module")
def hotpot():
    """Bundled HotpotQA (every question has 2-8 distractor paragraphs) and instances of 8 train questions."""
    bench = load_benchmark("hotpotqa")
    questions = split_questions(bench, "train")[:8]
    hier = Hierarchy(2)
    trees: dict = {}
    plain = training_instances(questions, bench.items, hier, tree_cache=trees)
    hard = training_instances(questions, bench.items, hier, tree_cache=trees)
    add_hard_negatives(hard, questions, bench.candidates, bench.items, hier, 1, trees)
    return bench, questions, hier, plain, hard


def _collate(instances, hier: Hierarchy) -> PreferenceBatch:
    return PreferenceCollate()([render_instance(x, hier, 0) for x in instances])


# ------------------------------------------------------------------ (a) off = today's batches


def test_zero_hard_negatives_gives_todays_batches_bit_for_bit() -> None:
    off = PreferenceDataModule(["hotpotqa"], OPTIONS, batch_size=8, hard_negatives=0)
    off.setup()
    assert _split_fingerprints(off) == PINNED
    assert not any(b.pairs_of(PairKind.HARD_NEGATIVE).any() for b in off.train_dataloader())
    on = PreferenceDataModule(["hotpotqa"], OPTIONS, batch_size=8, hard_negatives=1)
    on.setup()
    got = _split_fingerprints(on)
    # Train only: val / test batches (selection, test numbers) stay exactly as without the option.
    assert got["train"] != PINNED["train"]
    assert got["val"] == PINNED["val"] and got["test"] == PINNED["test"]
    assert any(b.pairs_of(PairKind.HARD_NEGATIVE).any() for b in on.train_dataloader())
    with pytest.raises(ValueError, match="hard_negatives"):
        PreferenceDataModule(["hotpotqa"], hard_negatives=-1)


# ------------------------------------------------------------------ (b) what is added


def test_each_instance_gets_n_distractor_nodes_below_every_gold_node(hotpot) -> None:
    bench, questions, hier, plain, hard = hotpot
    by_id = {q.id: q for q in questions}
    assert len(hard) == len(plain) > 10
    for before, inst in zip(plain, hard, strict=True):
        q = by_id[inst.question_id]
        counts = gold_counts(inst.tree, q.gold[inst.tree.item.id])
        # P(v) itself (the decision, the probe, stop / descend) is untouched.
        assert inst.pairs == before.pairs == preference_pairs(inst.tree, inst.node, counts)
        assert inst.stop == before.stop
        assert len(inst.hard_negatives) == 1
        tree, u = inst.hard_negatives[0]
        assert tree.item.id in bench.candidates[q.id] and tree.item.id not in q.gold
        assert tree.depth[u] == inst.depth or (u == tree.root and inst.depth not in set(tree.depth.tolist()))
        gold = [n for n in [inst.node, *inst.tree.children[inst.node]] if counts[n] > 0]
        assert inst.hard_pairs == [(g, 0) for g in gold]
    # Seeded by (question, item, v): rebuilding gives the same choice.
    again = training_instances(questions, bench.items, hier)
    add_hard_negatives(again, questions, bench.candidates, bench.items, hier, 1)
    assert [(t.item.id, u) for x in again for t, u in x.hard_negatives] == [
        (t.item.id, u) for x in hard for t, u in x.hard_negatives
    ]
    # n = 3: three distinct nodes, three pairs per gold node.
    three = training_instances(questions, bench.items, hier)
    add_hard_negatives(three, questions, bench.candidates, bench.items, hier, 3)
    for inst in three:
        picked = [(t.item.id, u) for t, u in inst.hard_negatives]
        assert len(picked) == len(set(picked)) == 3
        assert len(inst.hard_pairs) == 3 * len(inst.gold_nodes())


def test_questions_without_distractors_get_no_hard_negatives(hotpot) -> None:
    bench, questions, hier, _, _ = hotpot
    insts = training_instances(questions, bench.items, hier)
    only_gold = {q.id: list(q.gold) for q in questions}  # delivered items that are all gold (NQ-like)
    assert add_hard_negatives(insts, questions, only_gold, bench.items, hier, 2) == 0
    assert add_hard_negatives(insts, questions, {}, bench.items, hier, 2) == 0
    assert all(not x.hard_negatives and not x.hard_pairs for x in insts)


def test_batch_renders_hard_pairs_as_gold_over_distractor(hotpot) -> None:
    _, _, hier, plain, hard = hotpot
    batch, base = _collate(hard[:16], hier), _collate(plain[:16], hier)
    texts = batch.node_texts
    for i, inst in enumerate(hard[:16]):
        n_tree, n_hard = len(inst.pairs), len(inst.hard_pairs)
        assert batch.mask[i].sum() == n_tree + n_hard
        assert batch.in_tree[i, :n_tree].all() and not batch.in_tree[i, n_tree:].any()
        assert (batch.pair_kind[i, n_tree : n_tree + n_hard] == PairKind.HARD_NEGATIVE).all()
        assert not batch.tie_ok[i, n_tree:].any()
        # In-tree pairs: the same nodes in the same columns as without hard negatives.
        for k in range(n_tree):
            assert texts[batch.winner[i, k]] == base.node_texts[base.winner[i, k]]
            assert texts[batch.loser[i, k]] == base.node_texts[base.loser[i, k]]
        for k, (g, j) in enumerate(inst.hard_pairs, start=n_tree):
            tree, u = inst.hard_negatives[j]
            assert texts[batch.winner[i, k]] == hier.node_text(inst.tree, g)
            assert texts[batch.loser[i, k]] == hier.node_text(tree, u)  # rendered as any gold node
    # P(v)'s pair kinds (what the pair costs read) keep their columns with or without hard negatives.
    width = base.pair_kind.shape[1]
    in_tree_kinds = batch.pair_kind[:, :width].masked_fill(~batch.in_tree[:, :width], PairKind.PADDING)
    assert torch.equal(in_tree_kinds, base.pair_kind)


# ------------------------------------------------------------------ (c) decisions ignore them


@pytest.fixture(scope="module")
def module():
    from canopy_lit.encoders import load_encoder
    from canopy_lit.training import NodeEncoderModule

    torch.manual_seed(0)
    enc = load_encoder("minilm", max_seq_length=64)
    return NodeEncoderModule(enc, optimizer=partial(torch.optim.AdamW, lr=1e-3, weight_decay=0.0), lora_target_modules=["query", "value"])


def _adversarial(plain: PreferenceBatch, hard: PreferenceBatch):
    """Scorer of a batch: a fixed random score per node text, hard-negative losers above every node,
    so every hard pair fails and a decision that read one would flip to wrong."""
    gen = torch.Generator().manual_seed(0)
    texts = list(dict.fromkeys(plain.node_texts + hard.node_texts))
    by_text = dict(zip(texts, torch.rand(len(texts), generator=gen).tolist(), strict=True))
    losers = hard.loser[hard.pairs_of(PairKind.HARD_NEGATIVE)].tolist()
    by_text |= {hard.node_texts[r]: 2.0 for r in losers}

    def scores(b: PreferenceBatch, *_: Any, **__: Any) -> tuple[torch.Tensor, torch.Tensor]:
        s = torch.tensor([by_text[t] for t in b.node_texts])
        return s[b.winner], s[b.loser]  # (N, P) each

    return scores


def test_decision_accuracy_ignores_hard_negative_pairs(hotpot) -> None:
    from canopy_lit.training.metrics import pairs_hold

    _, _, hier, plain, hard = hotpot
    base, batch = _collate(plain, hier), _collate(hard, hier)
    scores = _adversarial(base, batch)
    win, lose = scores(batch)
    assert pairs_hold(win, lose, batch.mask, batch.tie_ok).sum() == 0  # the hard pairs would matter
    results = []
    for b in (base, batch):
        metric = DecisionAccuracy(["hotpotqa"])
        w, lo = scores(b)
        metric.update(w, lo, b.mask, b.tie_ok, b.benchmark, b.depth, b.stop, b.in_tree)
        results.append({k: float(v) for k, v in metric.compute().items()})
    assert results[0] == results[1] and results[0]["decision_accuracy"] > 0


def test_validation_step_scores_hard_negative_batch_like_plain_one(hotpot, module, monkeypatch) -> None:
    """NodeEncoderModule._update (validation / test steps) hands the in-tree mask to the metric."""
    _, _, hier, plain, hard = hotpot
    base, batch = _collate(plain, hier), _collate(hard, hier)
    monkeypatch.setattr(module, "pair_scores", _adversarial(base, batch))
    results = []
    for b in (base, batch):
        metric = DecisionAccuracy(["hotpotqa"])
        module._update(metric, b, f0=False)
        results.append({k: float(v) for k, v in metric.compute().items()})
    assert results[0] == results[1] and results[0]["decision_accuracy"] > 0


# ------------------------------------------------------------------ (d) one real training step


def test_training_step_with_hard_negatives_has_finite_loss_and_lora_gradient(hotpot, module) -> None:
    from canopy_lit.training import pairwise_ranking_loss

    _, _, _, _, hard = hotpot
    dm = PreferenceDataModule.from_instances({"train": hard[:6]}, ["hotpotqa"], batch_size=6)
    dm.set_tokenizer(module.encoder.tokenize)
    batch = dm.collate(dm.examples["train"])
    hard_mask = batch.pairs_of(PairKind.HARD_NEGATIVE)
    assert hard_mask.any()
    module.log = lambda *a, **k: None  # no Trainer attached
    module.train()
    module.on_train_batch_start(batch, 0)
    loss = module.training_step(batch, 0)
    assert torch.isfinite(loss)
    lora = [p for n, p in module.named_parameters() if "lora_" in n]
    # The hard-negative pairs alone reach the LoRA weights: distractor nodes go through fθ in this pass.
    win, lose = module.pair_scores(batch)
    only_hard = pairwise_ranking_loss(win, lose, hard_mask, module.hparams.scale)
    grads = torch.autograd.grad(only_hard, lora, allow_unused=True)
    assert any(g is not None and g.abs().sum() > 0 for g in grads)
    loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in lora)
