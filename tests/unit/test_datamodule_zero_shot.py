"""Zero-shot benchmarks (the paper's protocol): test split only, pooled apart in the test metrics."""

from __future__ import annotations

import pytest
import torch

from canopy_lit.data.datamodule import PreferenceDataModule
from canopy_lit.training.metrics import DecisionAccuracy


def test_zero_shot_benchmark_is_test_only_on_real_data() -> None:
    dm = PreferenceDataModule(
        benchmarks=["hotpotqa"],
        zero_shot=["tatqa"],
        options={"hotpotqa": {"max_questions": 6}, "tatqa": {"max_questions": 6}},
    )
    dm.setup()
    assert dm.benchmark_names == ["hotpotqa", "tatqa"] and dm.zero_shot_names == ["tatqa"]
    tat = dm.benchmark_names.index("tatqa")
    for split in ("train", "val"):  # never trained or validated on
        assert not any(e.benchmark == tat for e in dm.examples[split])
        assert dm.stats["tatqa"][split].questions == 0
    assert any(e.benchmark == tat for e in dm.examples["test"])
    assert any(e.benchmark == 0 for e in dm.examples["train"])


def test_zero_shot_questions_are_the_held_out_test_split() -> None:
    """The zero-shot test questions are the same ones an in-domain run would test on (comparable numbers)."""
    zero = PreferenceDataModule(benchmarks=["hotpotqa"], zero_shot=["tatqa"], options={"tatqa": {"max_questions": 5}})
    inside = PreferenceDataModule(benchmarks=["tatqa"], options={"tatqa": {"max_questions": 5}})
    zero.setup()
    inside.setup()
    ids = lambda dm, split, b: {e.question_id for e in dm.examples[split] if dm.benchmark_names[e.benchmark] == b}  # noqa: E731
    assert ids(zero, "test", "tatqa") == ids(inside, "test", "tatqa") != set()


def test_benchmark_both_in_domain_and_zero_shot_is_an_error() -> None:
    with pytest.raises(ValueError, match="both in benchmarks"):
        PreferenceDataModule(benchmarks=["hotpotqa", "tatqa"], zero_shot=["tatqa"])
    with pytest.raises(ValueError, match="nothing to train on"):
        PreferenceDataModule(benchmarks=[], zero_shot=["tatqa"])


def test_group_pools_instances_not_benchmark_means() -> None:
    m = DecisionAccuracy(["a", "b", "c"], groups={"in_domain": ["a", "b"], "zero_shot": ["c"]})
    # a: 3/4 correct, b: 0/1, c: 1/2 -> in-domain 3/5 (not the mean of 0.75 and 0), zero-shot 1/2
    ok = torch.tensor([1, 1, 1, 0, 0, 1, 0], dtype=torch.float)
    win = ok.unsqueeze(1)
    lose = torch.full_like(win, 0.5)
    bench = torch.tensor([0, 0, 0, 0, 1, 2, 2])
    m.update(win, lose, torch.ones_like(win, dtype=torch.bool), torch.zeros_like(win, dtype=torch.bool), bench, torch.zeros(7, dtype=torch.long))
    res = m.compute()
    assert res["in_domain/decision_accuracy"] == pytest.approx(3 / 5)
    assert res["zero_shot/decision_accuracy"] == pytest.approx(1 / 2)
    assert m.counts()["in_domain/n"] == 5 and m.counts()["zero_shot/n"] == 2
    with pytest.raises(ValueError, match="unknown benchmarks"):
        DecisionAccuracy(["a"], groups={"zero_shot": ["z"]})
