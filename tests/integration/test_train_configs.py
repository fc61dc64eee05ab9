"""Every train experiment and group option composes; the quickstart runs end to end on a tiny real subset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf, open_dict

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"


def _compose(overrides: list[str], out: Path | None = None):
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(CONFIGS), version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.paths.root_dir = str(ROOT)
        cfg.paths.output_dir = str(out or ROOT / "outputs" / "unused")
        cfg.hydra.runtime.output_dir = cfg.paths.output_dir
        cfg.hydra.runtime.cwd = str(ROOT)
    return cfg


# A tiny real subset: 4 train / 2 val / 4 test questions per benchmark.
SMALL = [f"datamodule.options.{b}.max_questions.{s}={n}" for b in ("hotpotqa", "nq") for s, n in (("train", 4), ("val", 2), ("test", 4))]


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIGS / group).glob("*.yaml"))


@pytest.mark.parametrize("experiment", ["quickstart", "shared_lora"])
def test_experiments_compose(experiment: str) -> None:
    cfg = _compose([f"experiment={experiment}"])
    OmegaConf.resolve(cfg)
    assert cfg.model._target_.endswith("NodeEncoderModule")
    assert cfg.datamodule.branching == cfg.tree.branching
    if experiment == "shared_lora":
        assert "Qwen3-VL-Embedding-2B" in cfg.encoder.backbone and cfg.trainer.max_epochs == 2
        assert cfg.model.lr == 5e-5 and cfg.model.lora_r == 8 and "bf16" in cfg.trainer.precision
        assert cfg.trainer.strategy._target_.endswith("DDPStrategy")


@pytest.mark.parametrize("group", ["encoder", "trainer", "logger", "callbacks", "debug"])
def test_every_group_option_composes(group: str) -> None:
    for option in _options(group):
        cfg = _compose([f"{group}={option}"])
        OmegaConf.resolve(cfg)


def test_sweep_file_passes_hydra_overrides() -> None:
    import yaml

    sweep = yaml.safe_load((CONFIGS / "sweep" / "lora_lr.yaml").read_text())
    assert "${args_no_hyphens}" in sweep["command"] and sweep["program"] == "train.py"
    # every swept key is a valid override of the train config
    _compose([f"{k}={v['values'][0] if 'values' in v else v['min']}" for k, v in sweep["parameters"].items()])


def test_quickstart_runs_into_tmp_path(tmp_path: Path) -> None:
    from train import train

    cfg = _compose(
        [
            "experiment=quickstart",
            "debug=limit",
            "trainer.limit_train_batches=2",
            "trainer.limit_val_batches=1",
            "trainer.limit_test_batches=null",  # every test instance: both benchmarks reported
            "datamodule.batch_size=4",
            "encoder.max_seq_length=64",
            *SMALL,
            "callbacks.rich_progress_bar=null",
        ],
        tmp_path,
    )
    metrics = train(cfg)
    saved = json.loads((tmp_path / "metrics.json").read_text())
    for key in ("test/decision_accuracy", "test/decision_accuracy_f0", "val/decision_accuracy_f0"):
        assert 0.0 <= saved[key] <= 1.0, key
    assert any(k.startswith("test/hotpotqa/decision_accuracy") for k in saved)
    assert any(k.startswith("test/nq/decision_accuracy") for k in saved)
    assert saved["test/decision_accuracy"] == metrics["test/decision_accuracy"]
    assert 0 < saved["test/n"] < 60  # max_questions caps reached the datamodule: 4 + 4 test questions
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    assert (tmp_path / "adapter" / "encoder_fingerprint.json").is_file()
    assert (tmp_path / "checkpoints" / "last.ckpt").is_file()

    # resume from last.ckpt: the checkpoint holds only adapter weights and loads back
    cfg2 = _compose(
        ["experiment=quickstart", "debug=limit", "trainer.limit_train_batches=2", "trainer.max_epochs=1",
         "test=false", "ckpt_path=last", "datamodule.batch_size=4", "encoder.max_seq_length=64",
         *SMALL, "callbacks.rich_progress_bar=null"],
        tmp_path,
    )
    train(cfg2)
