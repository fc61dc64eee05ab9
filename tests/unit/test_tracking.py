"""W&B without a key runs offline (one line); the W&B sweep's trials, as ``wandb agent`` builds their command
line, validate early; the Optuna search preset composes into a sweep of validation scores (issue 36 items
2 and 3). Seconds: configs and wandb's own agent code, nothing trains here."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml
from hydra import compose
from omegaconf import OmegaConf
from wandb_offline import agent_argv, no_key

from canopy_lit.schema import ConfigError, validate_train_config

ROOT = Path(__file__).resolve().parents[2]
WANDB_BLOCK = {
    "_target_": "lightning.pytorch.loggers.WandbLogger",
    "project": "p",
    "save_dir": "/runs/r1",
    "offline": False,
}


def test_wandb_logger_without_a_key_runs_offline_and_says_so(monkeypatch, tmp_path: Path) -> None:
    from canopy_lit.tracking import offline_unless_configured

    pytest.importorskip("wandb")
    no_key(monkeypatch, tmp_path)
    line = offline_unless_configured({"logger": {"wandb": WANDB_BLOCK}})
    assert os.environ["WANDB_MODE"] == "offline"
    assert line == (
        "W&B: no API key (WANDB_API_KEY or `wandb login`), logging offline to /runs/r1/wandb; "
        "upload later with `wandb sync /runs/r1/wandb/offline-run-*`"
    )


@pytest.mark.parametrize(
    "configured", ["api key", "netrc", "WANDB_MODE", "wandb disabled", "logger offline", "csv"]
)
def test_a_key_or_a_chosen_mode_is_left_alone(configured: str, monkeypatch, tmp_path: Path) -> None:
    from canopy_lit.tracking import offline_unless_configured

    no_key(monkeypatch, tmp_path)
    block = dict(WANDB_BLOCK)
    if configured == "api key":
        monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    elif configured == "netrc":  # what `wandb login` writes
        Path(os.environ["NETRC"]).write_text(
            "machine api.wandb.ai\n  login user\n  password " + "x" * 40 + "\n"
        )
    elif configured == "WANDB_MODE":
        monkeypatch.setenv("WANDB_MODE", "online")
    elif configured == "wandb disabled":  # `wandb disabled` writes the mode into W&B's settings
        settings = Path(os.environ["WANDB_CONFIG_DIR"]) / "settings"
        settings.parent.mkdir()
        settings.write_text("[default]\nmode = disabled\n")
    elif configured == "logger offline":
        block["offline"] = True
    else:
        block = {"_target_": "lightning.pytorch.loggers.CSVLogger", "save_dir": "/runs/r1"}
    assert offline_unless_configured({"logger": {"wandb": block}}) is None
    assert os.environ.get("WANDB_MODE") == ("online" if configured == "WANDB_MODE" else None)


SWEEP = yaml.safe_load((ROOT / "configs" / "sweep" / "lora_lr.yaml").read_text())


def _sampled(parameters: dict) -> dict:
    """One value per swept key, as the sweep controller sends them (the smallest of each range)."""
    return {k: spec["values"][0] if "values" in spec else spec["min"] for k, spec in parameters.items()}


def test_sweep_trial_command_validates_within_ten_steps(monkeypatch, tmp_path: Path, hydra_ctx) -> None:
    """The trial's argv as wandb's agent builds it; composed, the run logs the sweep metric every 10 steps
    (a trial cut short reports it too), skips the test passes and is a valid train config."""
    values = _sampled(SWEEP["parameters"])
    argv, env = agent_argv(SWEEP, values, monkeypatch, tmp_path)
    assert argv == [
        "/usr/bin/env",
        "python",
        "train.py",
        "experiment=quickstart",
        "logger=wandb",
        "test=false",
        "trainer.val_check_interval=10",
        *(f"{k}={v}" for k, v in values.items()),
    ]
    assert env["WANDB_SWEEP_ID"] == "testsweep" and env["WANDB_RUN_ID"] == "trial0"
    cfg = compose("train", overrides=argv[3:])
    validate_train_config(cfg)
    assert cfg.trainer.val_check_interval == 10 and cfg.test is False
    assert list(cfg.model.lora_target_modules) == [
        "query",
        "value",
    ]  # "[query,value]" reached Hydra as a list
    assert SWEEP["metric"]["name"] == cfg.callbacks.model_checkpoint.monitor  # logged at every validation


def test_optuna_search_preset_maximises_the_validation_score(hydra_ctx) -> None:
    cfg = compose(
        "train", overrides=["hparams_search=lora_optuna", "experiment=quickstart"], return_hydra_config=True
    )
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper") and sweeper.direction == "maximize"
    assert cfg.hydra.mode.name == "MULTIRUN" and cfg.optimized_metric == "val/best_decision_accuracy"
    assert set(sweeper.params) == set(SWEEP["parameters"])  # the W&B sweep's search space
    assert cfg.test is False
    validate_train_config(cfg)


def test_train_returns_the_optimized_metric_and_refuses_a_test_score(monkeypatch, hydra_ctx) -> None:
    import train as train_mod

    fake = {"test/decision_accuracy": 0.9, "val/decision_accuracy": 0.4, "val/best_decision_accuracy": 0.5}
    monkeypatch.setattr(train_mod, "run", lambda cfg: fake)
    for key, value in (("val/best_decision_accuracy", 0.5), ("val/decision_accuracy", 0.4)):
        assert train_mod.main.__wrapped__(OmegaConf.create({"optimized_metric": key})) == value
    with pytest.raises(ConfigError, match="optimized_metric must be one of"):
        validate_train_config(compose("train", overrides=["optimized_metric=test/decision_accuracy"]))


def test_setup_installs_the_wandb_and_optuna_extras() -> None:
    """scripts/setup.sh (also .ci/run's set-up) installs the extras behind logger=wandb, the W&B sweep and
    hparams_search=lora_optuna, and pyproject.toml declares them."""
    (extras,) = re.findall(
        r'pip install -q (?:--[a-z-]+ )*-e "\.\[([a-z,-]+)\]"', (ROOT / "scripts" / "setup.sh").read_text()
    )
    assert {"wandb", "optuna"} <= set(extras.split(","))
    pyproject = (ROOT / "pyproject.toml").read_text()  # tomllib is Python 3.11+, the package supports 3.10
    assert re.search(r'^wandb = \["wandb>=', pyproject, re.M)
    assert re.search(r'^optuna = \["hydra-optuna-sweeper>=', pyproject, re.M)


def test_the_wandb_logger_passes_no_retired_anonymous_setting(tmp_path: Path) -> None:
    """Lightning's WandbLogger always hands wandb.init ``anonymous`` (None), which wandb answers with "The
    anonymous setting has no effect" on every run; logger=wandb builds canopy_lit's, which leaves it out."""
    pytest.importorskip("wandb")
    from hydra.utils import instantiate
    from lightning.pytorch.loggers import WandbLogger as Lightning

    from canopy_lit.loggers import WandbLogger

    block = OmegaConf.load(ROOT / "configs" / "logger" / "wandb.yaml").wandb
    assert block._target_ == "canopy_lit.loggers.WandbLogger"
    kwargs = {"project": "p", "save_dir": str(tmp_path), "offline": True}
    assert "anonymous" in Lightning(**kwargs)._wandb_init  # why the subclass exists
    ours = instantiate({"_target_": block._target_, **kwargs})
    assert isinstance(ours, (WandbLogger, Lightning)) and "anonymous" not in ours._wandb_init
    assert WandbLogger(anonymous=True, **kwargs)._wandb_init["anonymous"] == "allow"  # asked for: kept
