"""DecisionAccuracy by decision type (stop / descend) and by depth per benchmark, on hand-made tensors."""

from __future__ import annotations

import pytest
import torch

from canopy_lit.training.metrics import DecisionAccuracy


def _hand_made():
    """Six instances with one pair each; ``ok`` says which decisions are right (winner scores higher)."""
    ok = torch.tensor([1, 0, 1, 1, 0, 1], dtype=torch.bool)
    win = torch.where(ok, 1.0, 0.0).unsqueeze(1)
    lose = torch.full((6, 1), 0.5)
    mask = torch.ones(6, 1, dtype=torch.bool)
    tie = torch.zeros(6, 1, dtype=torch.bool)
    bench = torch.tensor([0, 0, 0, 1, 1, 1])
    depth = torch.tensor([0, 1, 1, 0, 1, 2])
    stop = torch.tensor([1, 1, 0, 0, 0, 1], dtype=torch.bool)
    return win, lose, mask, tie, bench, depth, stop


def test_stop_descend_and_bench_depth_groups() -> None:
    win, lose, mask, tie, bench, depth, stop = _hand_made()
    m = DecisionAccuracy(["nq", "hotpotqa"], max_depth=4)
    m.update(win[:3], lose[:3], mask[:3], tie[:3], bench[:3], depth[:3], stop[:3])
    m.update(win[3:], lose[3:], mask[3:], tie[3:], bench[3:], depth[3:], stop[3:])
    out = {k: float(v) for k, v in m.compute().items()}
    assert out["decision_accuracy"] == pytest.approx(4 / 6)
    assert out["decision_accuracy/stop"] == pytest.approx(2 / 3)  # instances 0, 1, 5
    assert out["decision_accuracy/descend"] == pytest.approx(2 / 3)  # instances 2, 3, 4
    assert out["nq/decision_accuracy/stop"] == pytest.approx(1 / 2)
    assert out["nq/decision_accuracy/descend"] == pytest.approx(1.0)
    assert out["hotpotqa/decision_accuracy/stop"] == pytest.approx(1.0)
    assert out["hotpotqa/decision_accuracy/descend"] == pytest.approx(1 / 2)
    assert out["nq/depth1/decision_accuracy"] == pytest.approx(1 / 2)
    assert out["hotpotqa/depth2/decision_accuracy"] == pytest.approx(1.0)
    assert "nq/depth2/decision_accuracy" not in out  # empty groups are not reported
    counts = m.counts()
    assert counts["n"] == 6 and counts["n/stop"] == 3 and counts["n/descend"] == 3
    assert counts["nq/n/stop"] == 2 and counts["hotpotqa/n/descend"] == 2
    assert counts["hotpotqa/depth0/n"] == 1 and counts["depth1/n"] == 3


def test_without_stop_the_previous_keys_are_unchanged() -> None:
    win, lose, mask, tie, bench, depth, _ = _hand_made()
    m = DecisionAccuracy(["nq", "hotpotqa"])
    m.update(win, lose, mask, tie, bench, depth)
    out = m.compute()
    assert not any("stop" in k or "descend" in k for k in out)
    assert {
        "decision_accuracy",
        "nq/decision_accuracy",
        "hotpotqa/decision_accuracy",
        "depth0/decision_accuracy",
    } <= set(out)


def test_collate_marks_stop_instances(data_dir) -> None:
    """A fully gold v (pairs v ≻ every child) is "stop", a partly gold one "descend", on a real HotpotQA tree."""
    import json

    from canopy_lit.data.collate import PreferenceCollate
    from canopy_lit.data.examples import render_instance
    from canopy_lit.hierarchy import Hierarchy
    from canopy_lit.supervision import instances_for
    from canopy_lit.types import Item, Modality

    rec = json.loads((data_dir / "hotpotqa" / "hotpot_train_100.json").read_text())[0]
    title, sentences = rec["context"][0]
    hier = Hierarchy(2)
    tree = hier.build(Item(f"hotpotqa:{title}", Modality.TEXT, title=title, sentences=sentences))
    assert len(sentences) >= 3
    insts = instances_for("q", "question?", tree, [0, 1])  # the first two sentences: one fully gold child
    batch = PreferenceCollate()([render_instance(i, hier, 0) for i in insts])
    for i, inst in enumerate(insts):
        fully_gold = all(0 <= s < 2 for s in range(int(tree.starts[inst.node]), int(tree.ends[inst.node])))
        assert bool(batch.stop[i]) == fully_gold == inst.stop
    assert batch.stop.any() and not batch.stop.all()
