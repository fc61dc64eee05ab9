"""Every train experiment and group option composes; the quickstart runs end to end on a tiny real subset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
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
    HydraConfig.instance().set_config(cfg.copy())  # ${hydra:...} interpolations resolve as in a real run
    return cfg


# A tiny real subset: 4 train / 2 val / 4 test questions per benchmark (TAT-QA, zero-shot: test only).
SMALL = [
    f"datamodule.options.{b}.max_questions.{s}={n}"
    for b in ("hotpotqa", "nq", "ottqa", "tatqa")
    for s, n in (("train", 4), ("val", 2), ("test", 4))
]


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIGS / group).glob("*.yaml"))


@pytest.mark.parametrize("experiment", ["quickstart", "quickstart_mpnet", "shared_lora"])
def test_experiments_compose(experiment: str) -> None:
    cfg = _compose([f"experiment={experiment}"])
    OmegaConf.resolve(cfg)
    assert cfg.model._target_.endswith("NodeEncoderModule")
    assert cfg.datamodule.branching == cfg.tree.branching
    # The paper's protocol: TAT-QA is evaluated zero-shot, never trained on; OTT-QA tables are in-domain.
    assert "tatqa" not in cfg.datamodule.benchmarks and "tatqa" in cfg.datamodule.zero_shot
    assert "ottqa" in cfg.datamodule.benchmarks
    if experiment == "shared_lora":
        assert "Qwen3-VL-Embedding-2B" in cfg.encoder.backbone and cfg.trainer.max_epochs == 2
        assert cfg.model.optimizer.lr == 5e-5 and cfg.model.lora_r == 8 and "bf16" in cfg.trainer.precision
        assert cfg.trainer.strategy._target_.endswith("DDPStrategy")
    if experiment == "quickstart_mpnet":  # the quickstart, with only the encoder and LoRA placement changed
        base = _compose(["experiment=quickstart"])
        OmegaConf.resolve(base)
        assert cfg.encoder.backbone == "mpnet" and list(cfg.model.lora_layers) == [9, 10, 11]
        assert cfg.datamodule == base.datamodule and cfg.trainer == base.trainer
        assert {k: v for k, v in cfg.model.items() if not k.startswith("lora_")} == {
            k: v for k, v in base.model.items() if not k.startswith("lora_")
        }


@pytest.mark.parametrize("group", ["encoder", "trainer", "logger", "callbacks", "debug"])
def test_every_group_option_composes(group: str) -> None:
    for option in _options(group):
        cfg = _compose([f"{group}={option}"])
        OmegaConf.resolve(cfg)


@pytest.mark.parametrize("experiment", ["quickstart", "shared_lora"])
@pytest.mark.parametrize("debug", [None, *_options("debug")])
def test_experiment_trainer_debug_matrix(experiment: str, debug: str | None) -> None:
    """Every experiment x trainer x debug option composes, validates, and builds its callbacks; on CPU
    the Trainer itself is built (debug=fdr used to die: enable_checkpointing=False with a ModelCheckpoint)."""
    from hydra.utils import instantiate
    from lightning.pytorch.callbacks import ModelCheckpoint

    from canopy_lit.schema import validate_train_config

    for trainer in _options("trainer"):
        overrides = [f"experiment={experiment}", f"trainer={trainer}", *([f"debug={debug}"] if debug else [])]
        cfg = _compose(overrides)
        OmegaConf.resolve(cfg)
        validate_train_config(cfg)
        callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c and "_target_" in c]
        if debug == "fdr":
            assert not any(isinstance(c, ModelCheckpoint) for c in callbacks), overrides
        vci = cfg.trainer.val_check_interval
        limit = cfg.trainer.limit_train_batches
        if isinstance(vci, int) and isinstance(limit, int):
            assert vci <= limit, f"{overrides}: val_check_interval {vci} > limit_train_batches {limit}"
        if cfg.trainer.accelerator == "cpu":
            instantiate(cfg.trainer, callbacks=callbacks, logger=False)


def test_quickstart_validates_inside_its_step_budget() -> None:
    """The quickstart's 80 steps are a fraction of an epoch: validation must run inside them on the key that the
    checkpoint monitor, the W&B sweep and Hydra's return value use."""
    import yaml

    cfg = _compose(["experiment=quickstart"])
    OmegaConf.resolve(cfg)
    vci, steps = cfg.trainer.val_check_interval, cfg.trainer.max_steps
    assert isinstance(vci, int) and 0 < vci <= steps and steps % vci == 0  # the last step is validated too
    assert cfg.callbacks.model_checkpoint.monitor == "val/decision_accuracy"
    sweep = yaml.safe_load((CONFIGS / "sweep" / "lora_lr.yaml").read_text())
    assert sweep["metric"]["name"] == "val/decision_accuracy"
    assert cfg.callbacks.last_checkpoint.every_n_train_steps <= vci  # a kill loses at most N steps


def test_main_returns_validation_not_test_score(monkeypatch: pytest.MonkeyPatch) -> None:
    import train as train_mod

    fake = {"test/decision_accuracy": 0.9, "val/decision_accuracy": 0.4, "val/best_decision_accuracy": 0.5}
    monkeypatch.setattr(train_mod, "run", lambda cfg: fake)
    assert train_mod.main.__wrapped__(OmegaConf.create({"optimized_metric": "val/best_decision_accuracy"})) == 0.5


def test_wandb_run_names_differ_per_override_set() -> None:
    names = []
    for lr in ("1e-4", "3e-4"):
        cfg = _compose(["experiment=quickstart", "logger=wandb", f"model.optimizer.lr={lr}"])
        names.append(OmegaConf.to_container(cfg.logger, resolve=True)["wandb"]["name"])
    assert names[0] != names[1] and all(n.startswith("quickstart/") for n in names)


def test_debug_fdr_runs_end_to_end(tmp_path: Path) -> None:
    from canopy_lit.train import run as train

    cfg = _compose(["experiment=quickstart", "debug=fdr", "datamodule.batch_size=4", "encoder.max_seq_length=64", *SMALL], tmp_path)
    metrics = train(cfg)
    assert 0.0 <= metrics["test/decision_accuracy"] <= 1.0
    assert (tmp_path / "metrics.json").is_file() and (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    assert not (tmp_path / "checkpoints").exists()


def test_sweep_file_passes_hydra_overrides() -> None:
    import yaml

    sweep = yaml.safe_load((CONFIGS / "sweep" / "lora_lr.yaml").read_text())
    assert "${args_no_hyphens}" in sweep["command"] and sweep["program"] == "train.py"
    # every swept key is a valid override of the train config
    _compose([f"{k}={v['values'][0] if 'values' in v else v['min']}" for k, v in sweep["parameters"].items()])


def test_quickstart_runs_into_tmp_path(tmp_path: Path) -> None:
    from canopy_lit.train import run as train

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
    for key in ("test/decision_accuracy", "test/decision_accuracy_f0", "val/decision_accuracy_f0",
                "val/decision_accuracy", "val/best_decision_accuracy"):
        assert 0.0 <= saved[key] <= 1.0, key
    assert any(k.startswith("test/hotpotqa/decision_accuracy") for k in saved)
    assert any(k.startswith("test/nq/decision_accuracy") for k in saved)
    assert saved["test/decision_accuracy"] == metrics["test/decision_accuracy"]
    assert 0 < saved["test/n"] < 120  # max_questions caps reached the datamodule: 4 test questions each
    # in-domain (hotpotqa, nq, ottqa) and zero-shot (tatqa) pooled apart; their counts add up to the total
    assert saved["test/in_domain/n"] + saved["test/zero_shot/n"] == saved["test/n"]
    assert saved["test/zero_shot/n"] == saved["test/tatqa/n"] > 0
    assert 0.0 <= saved["test/zero_shot/decision_accuracy_f0"] <= 1.0
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


@pytest.mark.slow  # two real MiniLM runs, ~1 min (the slow tier, run by .ci/run)
def test_debug_overfit_learns_its_batches_and_debug_profiler_reports(tmp_path: Path) -> None:
    """``debug=overfit``: the loss on the same 2 batches falls and their decision accuracy rises; ``debug=profiler``:
    the simple profiler's report lands in the run folder."""
    import csv

    from canopy_lit.train import run as train

    tiny = ["experiment=quickstart", "datamodule.batch_size=4", "encoder.max_seq_length=64", *SMALL,
            "callbacks.rich_progress_bar=null"]  # fmt: skip
    train(_compose([*tiny, "debug=overfit", "trainer.max_epochs=10"], tmp_path / "overfit"))
    rows = [r for f in (tmp_path / "overfit" / "csv").rglob("metrics.csv") for r in csv.DictReader(f.open())]
    losses = [float(r["train/loss"]) for r in rows if r.get("train/loss")]
    accs = [float(r["val/decision_accuracy"]) for r in rows if r.get("val/decision_accuracy")]
    assert len(losses) >= 10 and sum(losses[-2:]) < 0.5 * sum(losses[:2]), losses
    assert len(accs) == 2 and accs[-1] >= accs[0], accs

    train(_compose([*tiny, "debug=profiler"], tmp_path / "profiler"))
    report = next((tmp_path / "profiler").glob("fit-profile*.txt")).read_text()
    assert "run_training_batch" in report and "optimizer_step" in report


@pytest.mark.slow  # a real MiniLM run through the late forward, ~1 min
def test_quickstart_trains_through_the_late_forward(tmp_path: Path) -> None:
    """encoder.node_pooling=late: training, validation and test pool nodes from whole-item forwards, and the
    adapter's fingerprint says so (evaluate.py warns when it is loaded per node)."""
    from canopy_lit.train import run as train

    cfg = _compose(
        ["experiment=quickstart", "debug=smoke", "encoder.node_pooling=late", "datamodule.batch_size=4",
         *SMALL, "callbacks.rich_progress_bar=null"],
        tmp_path,
    )
    train(cfg)
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["train/global_step"] == 4
    for key in ("val/decision_accuracy", "val/decision_accuracy_f0", "test/decision_accuracy", "test/decision_accuracy_f0"):
        assert 0.0 <= saved[key] <= 1.0, key
    meta = json.loads((tmp_path / "adapter" / "encoder_fingerprint.json").read_text())
    assert meta["node_pooling"] == "late" and ":nodes=late:" in meta["fingerprint"]
    ckpt = __import__("torch").load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["PreferenceDataModule"]["fingerprint"]["node_pooling"] == "late"


@pytest.mark.slow  # a real MiniLM run reading every node after its question, ~1-2 min
def test_quickstart_trains_the_cross_scorer(tmp_path: Path) -> None:
    """encoder.node_pooling=cross: training, validation and test score (question, node) pairs in one forward on
    the per-node batches (the datamodule's fingerprint is the per-node one), and the adapter says cross."""
    from canopy_lit.train import run as train

    cfg = _compose(
        ["experiment=quickstart", "debug=smoke", "encoder.node_pooling=cross", "datamodule.batch_size=4",
         *SMALL, "callbacks.rich_progress_bar=null"],
        tmp_path,
    )
    train(cfg)
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["train/global_step"] == 4
    for key in ("val/decision_accuracy", "val/decision_accuracy_f0", "test/decision_accuracy", "test/decision_accuracy_f0"):
        assert 0.0 <= saved[key] <= 1.0, key
    meta = json.loads((tmp_path / "adapter" / "encoder_fingerprint.json").read_text())
    assert meta["node_pooling"] == "cross" and ":nodes=cross:" in meta["fingerprint"]
    ckpt = __import__("torch").load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert "node_pooling" not in ckpt["PreferenceDataModule"]["fingerprint"]
