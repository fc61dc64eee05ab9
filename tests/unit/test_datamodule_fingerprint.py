"""The datamodule's fingerprint in checkpoints (a resume on other data is refused) and its split-size check."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest
import torch

from canopy_lit.data.datamodule import PreferenceDataModule
from canopy_lit.schema import ConfigError
from canopy_lit.supervision import InstanceStats


def _dm(**kwargs: object) -> PreferenceDataModule:
    args = {"benchmarks": ["hotpotqa"], "options": {"hotpotqa": {"max_questions": {"train": 4, "test": 2}}}, "batch_size": 4}
    return PreferenceDataModule(**{**args, **kwargs})


def _through_checkpoint(state: dict) -> dict:
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)  # as Lightning loads a checkpoint


def test_same_settings_resume_and_the_state_loads_weights_only() -> None:
    dm = _dm(options={"hotpotqa": {"path": Path("data/hotpotqa"), "max_questions": 4}})
    state = _through_checkpoint(dm.state_dict())
    assert state["fingerprint"]["options.hotpotqa.path"] == "data/hotpotqa"
    again = _dm(options={"hotpotqa": {"path": "data/hotpotqa", "max_questions": 4}}, num_workers=2, pin_memory=True)
    again.load_state_dict(state)  # loader mechanics never change a batch: they may differ


def test_resume_on_other_data_names_each_difference() -> None:
    state = _through_checkpoint(_dm().state_dict())
    other = _dm(benchmarks=["hotpotqa", "nq"], batch_size=8, options={"hotpotqa": {"max_questions": {"train": 3, "test": 2}}})
    with pytest.raises(ConfigError) as err:
        other.load_state_dict(state)
    [line] = err.value.problems
    assert line.startswith("the checkpoint was trained on other data than this run's datamodule")
    assert "datamodule.benchmarks ['hotpotqa'] there, ['hotpotqa', 'nq'] here" in line
    assert "datamodule.batch_size 4 there, 8 here" in line
    assert "datamodule.options.hotpotqa.max_questions.train 4 there, 3 here" in line
    assert "options.nq" not in line  # an added benchmark is named once, by the list
    with pytest.raises(ConfigError, match=r"datamodule.seed 0 there, 1 here"):
        _dm(seed=1).load_state_dict(state)
    with pytest.raises(ConfigError, match=r"datamodule.zero_shot \[\] there, \['tatqa'\] here"):
        _dm(zero_shot=["tatqa"]).load_state_dict(state)


def test_checkpoint_without_fingerprint_is_resumed_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    dm = _dm()
    with caplog.at_level(logging.WARNING):
        dm.load_state_dict({"train_sampler": {"epoch": 2, "seed": 0}})
    assert "no datamodule fingerprint" in caplog.text and dm._train_epoch == 2


def _stats(**questions: tuple[int, int, int]) -> dict[str, dict[str, InstanceStats]]:
    return {
        name: {s: InstanceStats(questions=n, instances=2 * n) for s, n in zip(("train", "val", "test"), counts, strict=True)}
        for name, counts in questions.items()
    }


def test_check_splits_names_the_benchmark_and_split() -> None:
    dm = _dm(benchmarks=["hotpotqa", "mine"], zero_shot=["tatqa"])
    dm.stats = _stats(hotpotqa=(4, 2, 2), mine=(5, 1, 0), tatqa=(0, 0, 3))
    with pytest.raises(ConfigError) as err:
        dm.check_splits(test=True)
    assert err.value.problems == [
        "datamodule: benchmark mine has no test instances (questions per split: train 5, val 1, test 0): "
        "add questions, or set test=false"
    ]
    dm.check_splits(test=False)

    dm.stats = _stats(hotpotqa=(0, 1, 2), mine=(5, 1, 1), tatqa=(0, 0, 0))
    with pytest.raises(ConfigError) as err:
        dm.check_splits(test=True)
    assert [p.split(" (")[0] for p in err.value.problems] == [
        "datamodule: benchmark hotpotqa has no train instances",
        "datamodule: benchmark tatqa has no test instances",
    ]
    assert "list it under datamodule.zero_shot" in err.value.problems[0]
