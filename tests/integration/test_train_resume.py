"""Kill-safe training: a run killed (SIGKILL, then SIGTERM) and resumed twice with ``ckpt_path=last`` ends
at the same global step, learning rate and adapter weights as an uninterrupted run, and keeps its logs.

Real MiniLM, real bundled HotpotQA + NQ (4 train questions each), 3 epochs of 3 batches; every run is
``python train.py`` in a subprocess so the kills are real.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

TINY = [
    "experiment=quickstart",
    "debug=limit",  # 3 train batches per epoch, last.ckpt every 2 steps and at each epoch end
    "trainer.max_epochs=3",  # 9 steps; quickstart's max_steps=150 stays set (the case that used to stop at 6)
    "datamodule.batch_size=4",
    "encoder.max_seq_length=64",
    *[f"datamodule.options.{b}.max_questions.{s}={n}" for b in ("hotpotqa", "nq") for s, n in (("train", 4), ("val", 2), ("test", 2))],
    "callbacks.rich_progress_bar=null",
    "test=false",
]


class SignalAtStep(L.Callback):
    """Test fixture: sends ``sig`` to its own process at the start of the batch after global step ``step``."""

    def __init__(self, step: int, sig: int = int(signal.SIGKILL)) -> None:
        self.step, self.sig = step, sig

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: object, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.sig)


def _train(run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    """``python train.py`` on the tiny setup; ``.out`` = stdout + stderr (Hydra logs to stdout)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "HYDRA_FULL_ERROR": "1"}
    cmd = [sys.executable, "train.py", *TINY, f"hydra.run.dir={run_dir}", *extra]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    proc.out = proc.stdout + proc.stderr  # type: ignore[attr-defined]
    return proc


def _kill_at(step: int, sig: signal.Signals) -> list[str]:
    return [f"+callbacks.kill._target_={__name__}.SignalAtStep", f"+callbacks.kill.step={step}", f"+callbacks.kill.sig={int(sig)}"]


def _last(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)


# slow tier (-m slow, run by .ci/run after the default tier): four real training runs, ~60 s
@pytest.mark.slow
def test_killed_and_resumed_run_matches_uninterrupted(tmp_path: Path) -> None:
    ref_dir, run_dir = tmp_path / "uninterrupted", tmp_path / "killed"
    ref = _train(ref_dir)
    assert ref.returncode == 0, ref.out[-3000:]
    assert "weights_only` was not set" not in ref.out  # one log line per periodic save, before it said so

    # 1) SIGKILL at the start of epoch 1: only the epoch-0 end checkpoint (step 3) survives.
    first = _train(run_dir, *_kill_at(3, signal.SIGKILL))
    assert first.returncode == -signal.SIGKILL, first.out[-3000:]
    assert _last(run_dir)["global_step"] == 3

    # 2) resume; SIGTERM during step 5: that step finishes, last.ckpt is written mid-epoch, exit 143.
    second = _train(run_dir, "ckpt_path=last", *_kill_at(4, signal.SIGTERM))
    assert "resumed from" in second.out and "global step 3, epoch 1" in second.out, second.out[-3000:]
    assert second.returncode == 128 + signal.SIGTERM, second.out[-3000:]
    assert _last(run_dir)["global_step"] == 5

    # 3) resume mid-epoch (batch 2 of 3 of epoch 1) to the end.
    third = _train(run_dir, "ckpt_path=last")
    assert third.returncode == 0, third.out[-3000:]
    assert "global step 5, epoch 1, 2 of 3 batches" in third.out, third.out[-3000:]

    a, b = _last(ref_dir), _last(run_dir)
    assert a["global_step"] == b["global_step"] == 9  # the old resume stopped at 6
    assert a["epoch"] == b["epoch"] == 2
    lr = [s["optimizer_states"][0]["param_groups"][0]["lr"] for s in (a, b)]
    assert lr[0] == lr[1]
    assert a["lr_schedulers"][0]["last_epoch"] == b["lr_schedulers"][0]["last_epoch"] == 9
    assert a["state_dict"].keys() == b["state_dict"].keys() and a["state_dict"]
    for k, v in a["state_dict"].items():
        torch.testing.assert_close(b["state_dict"][k], v, rtol=1e-4, atol=1e-5, msg=k)
    # the saved adapters agree too (written atomically at the end of each finished run)
    from safetensors.torch import load_file

    wa, wb = (load_file(d / "adapter" / "adapter_model.safetensors") for d in (ref_dir, run_dir))
    for k, v in wa.items():
        torch.testing.assert_close(wb[k], v, rtol=1e-4, atol=1e-5, msg=k)

    # every attempt kept its own CSV log: the killed runs' rows are still there
    versions = sorted((run_dir / "csv").glob("version_*/metrics.csv"))
    assert len(versions) == 3
    steps = [{int(r["step"]) for r in csv.DictReader(v.open()) if r.get("train/loss")} for v in versions]
    assert steps[0] and max(steps[0]) < 3 <= min(steps[1])  # attempt 1 logged epoch 0, attempt 2 continued


def test_resume_last_without_checkpoint_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    sys.path.insert(0, str(ROOT))
    from canopy_lit.train import _resolve_ckpt

    with caplog.at_level("WARNING", logger="train"):
        assert _resolve_ckpt("last", tmp_path) is None
    assert "nothing to resume" in caplog.text and str(tmp_path / "checkpoints" / "last.ckpt") in caplog.text
    with pytest.raises(FileNotFoundError, match="ckpt_path=.*missing.ckpt"):
        _resolve_ckpt(str(tmp_path / "missing.ckpt"), tmp_path)


# slow tier (-m slow, run by .ci/run after the default tier): three real training runs, ~40 s
@pytest.mark.slow
def test_resume_after_a_periodic_checkpoint_is_bit_identical(tmp_path: Path) -> None:
    """last.ckpt at step 2, a step that also validates (and picks the best checkpoint), during LR warm-up;
    SIGKILL at the start of step 3, resume: the same adapter bit for bit and one best checkpoint, as uninterrupted.
    Before, the save came before the step's validation, which the resume then skipped (two "best" files with
    save_top_k=1), and questions encoded before the kill were re-encoded in other batches (LoRA off by ~1e-8)."""
    from safetensors.torch import load_file

    extra = ["trainer.max_epochs=2", "trainer.val_check_interval=2", "model.scheduler.warmup_ratio=0.5"]
    ref_dir, run_dir = tmp_path / "uninterrupted", tmp_path / "killed"
    ref = _train(ref_dir, *extra)
    assert ref.returncode == 0, ref.out[-3000:]
    first = _train(run_dir, *extra, *_kill_at(2, signal.SIGKILL))
    assert first.returncode == -signal.SIGKILL, first.out[-3000:]
    assert _last(run_dir)["global_step"] == 2
    resumed = _train(run_dir, *extra, "ckpt_path=last")
    assert resumed.returncode == 0, resumed.out[-3000:]

    a, b = _last(ref_dir), _last(run_dir)
    assert a["global_step"] == b["global_step"] == 6
    assert a["state_dict"].keys() == b["state_dict"].keys() and a["state_dict"]
    assert [k for k, v in a["state_dict"].items() if not torch.equal(v, b["state_dict"][k])] == []
    wa, wb = (load_file(d / "adapter" / "adapter_model.safetensors") for d in (ref_dir, run_dir))
    assert wa.keys() == wb.keys() and [k for k in wa if not torch.equal(wa[k], wb[k])] == []
    names = [sorted(p.name for p in (d / "checkpoints").glob("*.ckpt")) for d in (ref_dir, run_dir)]
    assert names[0] == names[1] and len(names[0]) == 2, names  # save_top_k=1: one best + last.ckpt
