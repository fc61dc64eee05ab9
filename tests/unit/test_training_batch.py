"""The typed training batch on real bundled HotpotQA: pair kinds set where pairs are built, device transfer."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from canopy_lit.data import load_benchmark, split_questions
from canopy_lit.data.collate import PreferenceCollate
from canopy_lit.data.examples import Example, render_instance
from canopy_lit.hierarchy import Hierarchy, NodeInput
from canopy_lit.supervision import PairKind, add_hard_negatives, pair_kind, training_instances
from canopy_lit.training import PreferenceBatch


@pytest.fixture(scope="module")
def instances():
    """Stop and descend instances of real HotpotQA questions, hard negatives on some only (so slots pad)."""
    bench = load_benchmark("hotpotqa")
    questions = split_questions(bench, "train")[:40]
    hier = Hierarchy(2)
    insts = training_instances(questions, bench.items, hier)
    stops, descends = [x for x in insts if x.stop][:2], [x for x in insts if not x.stop][:6]
    add_hard_negatives([*descends[:3], stops[0]], questions, bench.candidates, bench.items, hier, 1)
    return hier, [*descends, *stops]


def test_collate_returns_a_typed_batch_with_each_pairs_kind(instances) -> None:
    hier, insts = instances
    batch = PreferenceCollate()([render_instance(x, hier, 0) for x in insts])
    assert isinstance(batch, PreferenceBatch)
    assert batch.pair_kind.shape == batch.winner.shape and batch.pair_kind.dtype == torch.long
    for i, inst in enumerate(insts):
        n_tree, n_hard = len(inst.pairs), len(inst.hard_pairs)
        want = [*inst.pair_kinds, *[PairKind.HARD_NEGATIVE] * n_hard]
        want += [PairKind.PADDING] * (batch.pair_kind.shape[1] - len(want))
        assert batch.pair_kind[i].tolist() == want
        if inst.stop:  # v fully gold: v ≻ every child
            assert inst.pair_kinds == [PairKind.PARENT_OVER_CHILD] * n_tree
    assert {int(k) for k in batch.pair_kind.unique()} == {int(k) for k in PairKind}  # every kind occurs
    assert torch.equal(batch.mask, batch.pair_kind != PairKind.PADDING)
    assert torch.equal(batch.tie_ok, batch.pair_kind == PairKind.CHILD_OVER_PARENT)
    assert torch.equal(batch.in_tree, batch.mask & (batch.pair_kind != PairKind.HARD_NEGATIVE))
    assert len(batch) == len(insts) and batch.node_tokens is None  # no tokenizer given


def test_pair_kind_names_the_tree_relation_and_refuses_other_pairs(instances) -> None:
    _, insts = instances
    inst = next(x for x in insts if not x.stop)
    tree, v = inst.tree, inst.node
    a, b = tree.children[v][:2]
    assert pair_kind(tree, a, v) == PairKind.CHILD_OVER_PARENT
    assert pair_kind(tree, v, a) == PairKind.PARENT_OVER_CHILD
    assert pair_kind(tree, a, b) == PairKind.GOLD_OVER_SIBLING
    grandchild = next(c for c in tree.children[a] + tree.children[b])
    with pytest.raises(ValueError, match=rf"item {tree.item.id!r}: pair {grandchild} ≻ {v} is neither"):
        pair_kind(tree, grandchild, v)


def test_collate_refuses_a_pair_without_a_kind() -> None:
    example = Example("q?", [NodeInput("v"), NodeInput("c")], [(0, 1)], [PairKind.PADDING], 0, 0, "q1", "item1")
    with pytest.raises(ValueError, match="question 'q1', item 'item1': pair 0 has kind"):
        PreferenceCollate()([example])


def test_lightning_moves_every_tensor_and_keeps_the_batch_type(instances) -> None:
    """``transfer_batch_to_device`` (what Lightning calls on every batch) to the meta device: a real move."""
    hier, insts = instances
    batch = PreferenceCollate(lambda texts: {"input_ids": torch.ones(len(texts), 3, dtype=torch.long)})(
        [render_instance(x, hier, 0) for x in insts]
    )
    moved = L.LightningModule().transfer_batch_to_device(batch, torch.device("meta"), 0)
    assert isinstance(moved, PreferenceBatch)
    tensors = [moved.query_index, moved.winner, moved.loser, moved.pair_kind, moved.benchmark, moved.depth,
               moved.stop, moved.node_tokens["input_ids"], moved.query_tokens["input_ids"]]  # fmt: skip
    assert all(t.device.type == "meta" for t in tensors)
    assert moved.node_texts == batch.node_texts and moved.question_ids == batch.question_ids
    assert batch.winner.device.type == "cpu"  # the collate's batch is left as it was


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory needs CUDA")
def test_pinned_loader_and_cuda_transfer_keep_the_batch_type(instances) -> None:
    hier, insts = instances
    batch = PreferenceCollate()([render_instance(x, hier, 0) for x in insts])
    pinned = batch.pin_memory()
    assert isinstance(pinned, PreferenceBatch) and pinned.pair_kind.is_pinned() and pinned.winner.is_pinned()
    moved = L.LightningModule().transfer_batch_to_device(pinned, torch.device("cuda", 0), 0)
    assert moved.pair_kind.is_cuda and torch.equal(moved.mask.cpu(), batch.mask)
