"""Decision-accuracy metric vs the reference rule in canopy_lit.supervision, on real HotpotQA trees."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from canopy_lit.data.collate import PreferenceCollate
from canopy_lit.data.examples import render_instance
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.supervision import PairKind, decision_correct, instances_for
from canopy_lit.training.metrics import DecisionAccuracy, pairs_hold
from canopy_lit.types import Item, Modality


@pytest.fixture(scope="module")
def instances(data_dir: Path):
    """Instances of the first 15 real HotpotQA train questions (parsed directly: a pure unit test)."""
    hier = Hierarchy(2)
    out = []
    for rec in json.loads((data_dir / "hotpotqa" / "hotpot_train_100.json").read_text())[:15]:
        ctx = dict((t, s) for t, s in rec["context"])
        gold: dict[str, set[int]] = {}
        for title, sid in rec["supporting_facts"]:
            if title in ctx and sid < len(ctx[title]):
                gold.setdefault(title, set()).add(sid)
        for title, g in gold.items():
            tree = hier.build(Item(f"hotpotqa:{title}", Modality.TEXT, title=title, sentences=ctx[title]))
            bench = "hotpotqa" if len(out) % 2 else "nq"  # two groups, to exercise per-benchmark counts
            out += instances_for(rec["_id"], rec["question"], tree, sorted(g), bench)
    assert len(out) > 20
    return out


def _batch_scores(instances, seed: int, ties: bool):
    """Random node scores per tree (rounded to force ties) and the matching tensors for the metric."""
    rng = np.random.default_rng(seed)
    scores = {}
    for inst in instances:
        if inst.tree.item.id not in scores:
            s = rng.normal(size=len(inst.tree))
            scores[inst.tree.item.id] = np.round(s, 0) if ties else s
    n, p = len(instances), max(len(i.pairs) for i in instances)
    win, lose = torch.zeros(n, p), torch.zeros(n, p)
    mask, tie = torch.zeros(n, p, dtype=torch.bool), torch.zeros(n, p, dtype=torch.bool)
    for i, inst in enumerate(instances):
        s = scores[inst.tree.item.id]
        for k, (a, b) in enumerate(inst.pairs):
            win[i, k], lose[i, k], mask[i, k] = float(s[a]), float(s[b]), True
            tie[i, k] = bool(inst.tree.parent[a] == b)
    expected = [decision_correct(inst.tree, scores[inst.tree.item.id], inst.pairs) for inst in instances]
    return win, lose, mask, tie, expected


@pytest.mark.parametrize("ties", [False, True])
def test_pairs_hold_matches_supervision_rule(instances, ties: bool) -> None:
    for seed in range(5):
        win, lose, mask, tie, expected = _batch_scores(instances, seed, ties)
        assert pairs_hold(win, lose, mask, tie).tolist() == expected


def test_metric_overall_per_benchmark_per_depth(instances) -> None:
    win, lose, mask, tie, expected = _batch_scores(instances, 7, ties=True)
    bench = torch.tensor([0 if i.benchmark == "nq" else 1 for i in instances])
    depth = torch.tensor([i.depth for i in instances])
    metric = DecisionAccuracy(["nq", "hotpotqa"])
    half = len(instances) // 2  # two updates accumulate like one
    metric.update(win[:half], lose[:half], mask[:half], tie[:half], bench[:half], depth[:half])
    metric.update(win[half:], lose[half:], mask[half:], tie[half:], bench[half:], depth[half:])
    out = metric.compute()
    ok = np.array(expected)
    assert out["decision_accuracy"].item() == pytest.approx(ok.mean())
    for b_id, name in enumerate(["nq", "hotpotqa"]):
        sel = bench.numpy() == b_id
        assert out[f"{name}/decision_accuracy"].item() == pytest.approx(ok[sel].mean())
    for d in set(depth.tolist()):
        sel = depth.numpy() == d
        assert out[f"depth{d}/decision_accuracy"].item() == pytest.approx(ok[sel].mean())
    assert metric.counts()["n"] == len(instances)
    assert "depth9/decision_accuracy" not in out  # empty groups are not reported


def test_collate_renders_each_node_once_and_keeps_pair_semantics(instances) -> None:
    hier = Hierarchy(2)
    examples = [render_instance(i, hier, 0) for i in instances[:16]]
    batch = PreferenceCollate()(examples)
    texts = batch.node_texts
    assert len(texts) == len(set(texts)) < sum(len(e.texts) for e in examples)  # shared nodes deduplicated
    for i, inst in enumerate(instances[:16]):
        for k, (a, b) in enumerate(inst.pairs):
            assert texts[batch.winner[i, k]] == hier.node_text(inst.tree, a)
            assert texts[batch.loser[i, k]] == hier.node_text(inst.tree, b)
            assert bool(batch.tie_ok[i, k]) == (inst.tree.parent[a] == b)
        assert int(batch.mask[i].sum()) == len(inst.pairs)
        assert batch.query_texts[batch.query_index[i]] == inst.question


def test_batch_pair_kinds_are_p_v_kinds_by_tree_relation(instances) -> None:
    """Each real pair's code names its relation in the tree: g ≻ v, v ≻ child, or g ≻ n between v's children."""
    batch = PreferenceCollate()([render_instance(i, Hierarchy(2), 0) for i in instances])
    expected = torch.full_like(batch.pair_kind, PairKind.PADDING)
    for i, inst in enumerate(instances):
        parent = inst.tree.parent
        for k, (a, b) in enumerate(inst.pairs):
            if parent[a] == b == inst.node:
                expected[i, k] = PairKind.CHILD_OVER_PARENT
            elif parent[b] == a == inst.node:
                expected[i, k] = PairKind.PARENT_OVER_CHILD
            elif parent[a] == parent[b] == inst.node:
                expected[i, k] = PairKind.GOLD_OVER_SIBLING
    assert torch.equal(batch.pair_kind, expected)
    assert {int(k) for k in batch.pair_kind.unique()} == {int(k) for k in PairKind} - {PairKind.HARD_NEGATIVE}
    assert torch.equal(batch.mask, expected != PairKind.PADDING)
