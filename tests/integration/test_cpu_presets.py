"""CPU runs of the GPU preset: ``trainer=cpu`` / ``trainer=ddp trainer.accelerator=cpu`` win over
``experiment=shared_lora`` for precision, loader workers and pinned memory; ``debug=smoke`` bounds a run
to minutes with validation and test metrics; epoch-level logs do not warn per key under DDP; the entry
points hide third-party notices unless CANOPY_LIT_VERBOSE=1.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

import canopy_lit  # noqa: F401  registers the configs' resolvers
from canopy_lit.quiet import _DropMessages

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ["experiment=shared_lora", "trainer=cpu", "encoder=minilm", "debug=smoke"]


def _compose(overrides: list[str]) -> DictConfig:
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(ROOT / "configs"), version_base="1.3"):
        return compose("train", overrides=overrides)


def _hardware(cfg: DictConfig) -> tuple[str, int, bool, bool]:
    dm = cfg.datamodule
    return cfg.trainer.precision, dm.num_workers, dm.pin_memory, dm.persistent_workers


@pytest.mark.parametrize(
    "overrides",
    [SMOKE, ["experiment=shared_lora", "trainer=cpu"], ["experiment=shared_lora", "trainer=ddp", "trainer.accelerator=cpu"],
     ["experiment=shared_lora", "trainer=gpu", "trainer.accelerator=cpu"]],
)  # fmt: skip
def test_cpu_trainer_wins_over_the_gpu_preset(overrides: list[str]) -> None:
    cfg = _compose(overrides)
    assert cfg.trainer.accelerator == "cpu"
    assert _hardware(cfg) == ("32-true", 0, False, False), overrides
    if "trainer=ddp" in overrides:
        assert cfg.trainer.devices == 2  # -1 ("all GPUs") is no CPU device count


def test_gpu_trainers_keep_the_paper_recipe() -> None:
    for trainer in ("ddp", "gpu"):
        assert _hardware(_compose(["experiment=shared_lora", f"trainer={trainer}"])) == ("bf16-mixed", 4, True, True)
    # An explicit value still wins over the trainer-dependent default.
    cfg = _compose([*SMOKE, "datamodule.num_workers=2", "trainer.precision=bf16-mixed"])
    assert _hardware(cfg)[:2] == ("bf16-mixed", 2)


def test_smoke_bounds_steps_validation_and_test() -> None:
    for experiment in ("shared_lora", "quickstart"):
        trainer = _compose([f"experiment={experiment}", "trainer=cpu", "debug=smoke"]).trainer
        assert trainer.max_steps == 4 and trainer.max_epochs == 1
        # Validation runs inside the step budget (shared_lora alone validates at epoch ends only).
        assert trainer.val_check_interval <= min(trainer.max_steps, trainer.limit_train_batches)
        assert trainer.limit_val_batches == 2 and trainer.limit_test_batches == 4
    options = _compose(SMOKE).datamodule.options
    assert all(options[b].max_questions.test <= 2 for b in ("hotpotqa", "nq", "ottqa", "tatqa"))


def test_debug_options_are_documented() -> None:
    """Each debug option says in its own header what it is for."""
    for path in sorted((ROOT / "configs" / "debug").glob("*.yaml")):
        lines = path.read_text(encoding="utf-8").splitlines()
        assert lines[0] == "# @package _global_" and lines[1].startswith("# "), path.name


# --------------------------------------------------------------------------- logging under DDP
def test_epoch_level_logs_do_not_warn_per_key_under_ddp(monkeypatch: pytest.MonkeyPatch) -> None:
    import lightning as L
    import torch
    from lightning.pytorch.trainer.connectors.logger_connector import result

    from canopy_lit.data import load_benchmark, split_questions
    from canopy_lit.data.datamodule import PreferenceDataModule
    from canopy_lit.encoders import load_encoder
    from canopy_lit.hierarchy import Hierarchy
    from canopy_lit.supervision import training_instances
    from canopy_lit.training import NodeEncoderModule

    torch.manual_seed(0)
    bench = load_benchmark("hotpotqa")
    insts = training_instances(split_questions(bench, "train")[:3], bench.items, Hierarchy(2))
    dm = PreferenceDataModule.from_instances({"val": insts, "test": insts}, ["hotpotqa"], batch_size=8)
    enc = load_encoder("minilm", max_seq_length=64)
    dm.set_tokenizer(enc.tokenize)
    module = NodeEncoderModule(enc, optimizer=partial(torch.optim.AdamW, lr=1e-3, weight_decay=0.0), lora_target_modules=["query", "value"])
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=1, limit_test_batches=1, use_distributed_sampler=False)
    # What Lightning reads to keep sync_dist and to warn without it: a DDP run as far as logging can tell. The
    # reduction itself stays single-process (fabric's all-reduce checks its own, unpatched, process group).
    monkeypatch.setattr(type(trainer._accelerator_connector), "is_distributed", property(lambda self: True))
    monkeypatch.setattr(result, "_distributed_is_initialized", lambda: True)
    result.warning_cache.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.validate(module, dataloaders=dm.val_dataloader(), verbose=False)
        trainer.test(module, dataloaders=dm.test_dataloader(), verbose=False)
    assert "test/decision_accuracy" in trainer.callback_metrics
    nagging = [str(w.message) for w in caught if "sync_dist=True" in str(w.message)]
    assert not nagging, f"{len(nagging)} keys warned, e.g. {nagging[0][:120]}"


# --------------------------------------------------------------------------- quiet entry points
@pytest.fixture
def restored_warning_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from transformers.utils import logging as hf_logging

    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    loggers = [logging.getLogger(n) for n in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")]
    filters = [list(lg.filters) for lg in loggers]
    for lg in loggers:  # an entry point run in-process by an earlier test leaves its filters behind
        lg.filters[:] = [f for f in lg.filters if not isinstance(f, _DropMessages)]
    bars = hf_logging.is_progress_bar_enabled()
    with warnings.catch_warnings():
        yield
    for lg, kept in zip(loggers, filters, strict=True):
        lg.filters[:] = kept
    (hf_logging.enable_progress_bar if bars else hf_logging.disable_progress_bar)()


def _emitted(monkeypatch: pytest.MonkeyPatch, verbose: str) -> tuple[list[str], list[str], bool]:
    from transformers.utils import logging as hf_logging

    from canopy_lit.quiet import quiet_third_party

    monkeypatch.setenv("CANOPY_LIT_VERBOSE", verbose)
    warnings.simplefilter("always")
    hf_logging.enable_progress_bar()
    quiet_third_party()
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    tip_logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    tip_logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.warn_explicit("`x` is deprecated", FutureWarning, "modeling_utils.py", 1, module="transformers.modeling_utils")
            warnings.warn("Found 120 module(s) in eval mode at the start of training.", UserWarning, stacklevel=1)
            warnings.warn("a warning of the user's own code", UserWarning, stacklevel=1)
        tip_logger.warning("💡 Tip: try installing [litlogger](https://pypi.org/project/litlogger/)")
    finally:
        tip_logger.removeHandler(handler)
    return [str(w.message) for w in caught], records, hf_logging.is_progress_bar_enabled()


def test_entry_points_quiet_third_party_first() -> None:
    """Only the entry points filter (library code leaves a caller's warnings alone), before any work."""
    import ast

    for script in ("train.py", "evaluate.py"):
        tree = ast.parse((ROOT / script).read_text(encoding="utf-8"))
        main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
        first = main.body[0]
        called = first.value.func if isinstance(first, ast.Expr) and isinstance(first.value, ast.Call) else None
        assert isinstance(called, ast.Name) and called.id == "quiet_third_party", script
    # A package's __main__.py is an entry point too (python -m canopy_lit.serve): it may filter.
    library = [p.name for p in (ROOT / "canopy_lit").rglob("*.py")
               if p.name not in ("quiet.py", "__main__.py") and "quiet_third_party()" in p.read_text(encoding="utf-8")]
    assert not library, library


def test_entry_points_hide_third_party_notices(monkeypatch: pytest.MonkeyPatch, restored_warning_state: None) -> None:
    shown, logged, bars = _emitted(monkeypatch, verbose="")
    assert shown == ["a warning of the user's own code"] and not logged and not bars


def test_verbose_env_shows_them(monkeypatch: pytest.MonkeyPatch, restored_warning_state: None) -> None:
    shown, logged, bars = _emitted(monkeypatch, verbose="1")
    assert len(shown) == 3 and len(logged) == 1 and bars


# --------------------------------------------------------------------------- the smoke lane itself
@pytest.mark.slow
def test_smoke_run_ends_with_val_and_test_metrics(tmp_path: Path) -> None:
    """The command the issue names, in a subprocess: minutes, exit 0, val/ and test/ keys, few warnings."""
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    proc = subprocess.run(
        [sys.executable, "train.py", *SMOKE, f"hydra.run.dir={out}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert "val/best_decision_accuracy" in metrics and "test/decision_accuracy" in metrics
    assert metrics["train/global_step"] == 4
    text = proc.stdout + proc.stderr
    assert "Warning" not in text and "litlogger" not in text and "Loading weights" not in text, text[-3000:]
