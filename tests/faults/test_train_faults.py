"""``train.py`` under hostile use: SIGTERM after fit or during the test, a resume on other data, a split with
no questions, a read-only run folder. Each case is a real ``python train.py`` process on the real MiniLM and
bundled HotpotQA (4 train / 2 val / 2 test questions, one epoch of 3 batches, ~10 s a run on 2 cores).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import lightning as L
import pytest
import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[2]

TINY = [
    "experiment=quickstart",
    "debug=limit",  # 3 train batches, 2 val and 2 test batches
    "datamodule.batch_size=4",
    "encoder.max_seq_length=64",
    "datamodule.benchmarks=[hotpotqa]",
    "datamodule.zero_shot=[]",
    *[f"datamodule.options.hotpotqa.max_questions.{s}={n}" for s, n in (("train", 4), ("val", 2), ("test", 2))],
    "callbacks.rich_progress_bar=null",
]


class SigtermAt(L.Callback):
    """Test fixture: sends SIGTERM to its own process at ``hook`` ("train_end": fit has just finished;
    "test_batch": the first test batch starts)."""

    def __init__(self, hook: str) -> None:
        self.hook = hook

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.hook == "train_end":
            os.kill(os.getpid(), signal.SIGTERM)

    def on_test_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: object, batch_idx: int, dataloader_idx: int = 0) -> None:
        if self.hook == "test_batch" and batch_idx == 0:
            os.kill(os.getpid(), signal.SIGTERM)


def _sigterm_at(hook: str) -> list[str]:
    return [f"+callbacks.sigterm._target_={__name__}.SigtermAt", f"+callbacks.sigterm.hook={hook}"]


def _unprivileged() -> list[str]:
    """A command prefix under which folder permissions hold: none for a normal user; for root (whom
    permission bits do not stop) setpriv without CAP_DAC_OVERRIDE."""
    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv (util-linux): a read-only folder cannot be simulated")
    return ["setpriv", "--bounding-set=-dac_override"]


def _train(run_dir: Path, *extra: str, prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    """``python train.py`` on the tiny setup; ``.out`` = stdout + stderr (Hydra logs to stdout)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    cmd = [*(prefix or []), sys.executable, "train.py", *TINY, f"hydra.run.dir={run_dir}", *extra]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    proc.out = proc.stdout + proc.stderr  # type: ignore[attr-defined]
    return proc


def _errors(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")]


def _snapshot(run_dir: Path) -> dict[str, str]:
    """Every file of a run folder -> sha256 of its bytes."""
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(run_dir.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    proc = _train(run_dir)
    assert proc.returncode == 0, proc.out[-3000:]
    return run_dir


@pytest.fixture
def run_copy(finished_run: Path, tmp_path: Path) -> Iterator[Path]:
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    yield run_dir
    for p in [run_dir, *run_dir.rglob("*")]:  # undo a test's chmod so the folder can be removed
        if p.is_dir():
            p.chmod(0o755)


# ----------------------------------------------------------------------------------------- SIGTERM (34.3)


def test_sigterm_during_test_exits_143_with_adapter_and_resumes(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    stopped = _train(run_dir, *_sigterm_at("test_batch"))
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.out[-3000:]  # was 0, with nothing written
    assert "stopped by SIGTERM during test" in stopped.out
    assert (run_dir / "adapter" / "adapter_config.json").is_file()  # saved when fit ended
    assert not (run_dir / "metrics.json").exists()  # no test numbers: the run is not finished
    adapter = load_file(run_dir / "adapter" / "adapter_model.safetensors")

    resumed = _train(run_dir, "ckpt_path=last")
    assert resumed.returncode == 0, resumed.out[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["train/global_step"] == 3 and "test/decision_accuracy" in metrics
    assert "val/best_decision_accuracy" in metrics
    resaved = load_file(run_dir / "adapter" / "adapter_model.safetensors")  # the same best checkpoint's adapter
    assert resaved.keys() == adapter.keys() and all(torch.equal(resaved[k], v) for k, v in adapter.items())


@pytest.mark.slow  # ~20 s of CPU; the default tier covers SIGTERM after fit with the test-phase case
def test_sigterm_between_fit_and_test_stops_before_testing(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    stopped = _train(run_dir, *_sigterm_at("train_end"))
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.out[-3000:]  # was 0: the test ran anyway
    assert (run_dir / "adapter" / "adapter_config.json").is_file()
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert not (run_dir / "metrics.json").exists()


# ----------------------------------------------------------------------------- resume on other data (34.4)


def test_resume_on_other_data_is_refused(run_copy: Path) -> None:
    """A resume on another mix used to train 0 steps from last.ckpt (max_epochs reached) and overwrite adapter/
    and metrics.json under the new config (every other setting: tests/unit). A finished run (metrics.json) is
    now left as it is by any resume (test_resuming_a_finished_run_says_so_and_changes_nothing); without metrics.json (stopped during its test) the
    checkpoint's data fingerprint refuses the other mix."""
    (run_copy / "metrics.json").unlink()
    before = _snapshot(run_copy)
    proc = _train(run_copy, "ckpt_path=last", "datamodule.benchmarks=[hotpotqa,nq]")
    assert proc.returncode == 2, proc.out[-3000:]
    errors = _errors(proc)
    named = "datamodule.benchmarks ['hotpotqa'] there, ['hotpotqa', 'nq'] here"
    assert len(errors) == 1 and named in errors[0] and "last.ckpt" in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.out
    after = _snapshot(run_copy)
    # Hydra records every attempt's command in .hydra/ and train.log; the run's results are untouched.
    assert {k: v for k, v in after.items() if not k.startswith(".hydra") and k != "train.log"} == {
        k: v for k, v in before.items() if not k.startswith(".hydra") and k != "train.log"
    }


# ---------------------------------------------------------------------------------- empty split (34.12)


def test_benchmark_without_test_questions_is_refused_before_fit(tmp_path: Path) -> None:
    """A custom HotpotQA-format file named *train*: every question is train (val is carved from it), none test."""
    records = json.loads((ROOT / "data" / "hotpotqa" / "hotpot_train_100.json").read_text())[:6]
    data = tmp_path / "tiny_train.json"
    data.write_text(json.dumps(records))
    run_dir = tmp_path / "run"
    proc = _train(run_dir, f"+datamodule.options.hotpotqa.path={data}")
    assert proc.returncode == 2, proc.out[-3000:]  # was 1, with a traceback after fitting
    errors = _errors(proc)
    assert len(errors) == 1 and "benchmark hotpotqa has no test instances" in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.out
    assert not (run_dir / "checkpoints").exists()  # refused before fit


# ------------------------------------------------------------------------------ read-only run folder (34.7)


def _read_only(*folders: Path) -> None:
    for folder in folders:
        folder.chmod(0o555)


def test_read_only_run_folder_is_one_line_and_changes_nothing(run_copy: Path) -> None:
    prefix = _unprivileged()
    (run_copy / "metrics.json").unlink()  # a run with work left: a finished one is left as it is (exit 0)
    before = _snapshot(run_copy)
    _read_only(*(p for p in [run_copy, *run_copy.rglob("*")] if p.is_dir()))
    proc = _train(run_copy, "ckpt_path=last", prefix=prefix)
    assert proc.returncode == 1, proc.out[-3000:]
    assert _errors(proc) == [
        f"error: run folder {run_copy} is not writable (Permission denied): make it writable or choose another hydra.run.dir"
    ], proc.stderr[-2000:]
    assert "Traceback" not in proc.out  # was a PermissionError from the CSV logger, after loading the model
    assert _snapshot(run_copy) == before


@pytest.mark.slow  # two more processes (~20 s of CPU) through the same check as the test above
def test_read_only_checkpoints_or_parent_folder_is_one_line(run_copy: Path, tmp_path: Path) -> None:
    prefix = _unprivileged()
    # Only checkpoints/ read-only, a resume for one more epoch: refused before training (it used to train,
    # then fail at the first checkpoint save with a traceback). A run with work left: a finished one is left
    # as it is (exit 0).
    (run_copy / "metrics.json").unlink()
    _read_only(run_copy / "checkpoints")
    proc = _train(run_copy, "ckpt_path=last", "trainer.max_epochs=2", prefix=prefix)
    assert proc.returncode == 1, proc.out[-3000:]
    errors = _errors(proc)
    assert len(errors) == 1 and f"{run_copy / 'checkpoints'} in run folder {run_copy} is not writable" in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.out

    # A new run folder under a read-only parent.
    parent = tmp_path / "read_only_parent"
    parent.mkdir(mode=0o555)
    proc = _train(parent / "run", prefix=prefix)
    assert proc.returncode == 1, proc.out[-3000:]
    assert _errors(proc) and f"run folder {parent / 'run'} cannot be created: {parent} is not writable" in _errors(proc)[0]
    assert "Traceback" not in proc.out and not any(parent.iterdir())
    parent.chmod(0o755)


# ------------------------------------------------------------------------------ a finished run (issue 44.18)


@pytest.mark.parametrize("debug", ["limit", "fdr"])
def test_resuming_a_finished_run_says_so_and_changes_nothing(run_copy: Path, debug: str) -> None:
    before = _snapshot(run_copy)
    proc = _train(run_copy, "ckpt_path=last", f"debug={debug}")
    assert proc.returncode == 0, proc.out[-3000:]
    assert f"{run_copy} holds a finished run (metrics.json, global step 3): nothing to resume" in proc.stderr
    assert _snapshot(run_copy) == before  # metrics.json, adapter/, checkpoints/, .hydra/ and the log untouched


@pytest.mark.parametrize("debug", ["fdr", "smoke"])
def test_a_debug_mode_never_writes_into_a_finished_run(run_copy: Path, debug: str) -> None:
    before = _snapshot(run_copy)
    proc = _train(run_copy, f"debug={debug}")  # a fresh debug run aimed at the finished folder
    assert proc.returncode == 2, proc.out[-3000:]
    assert _errors(proc) == [f"error: {run_copy} holds a finished run (metrics.json): debug={debug} does not write "
                             "into it; choose another hydra.run.dir"]
    assert "Traceback" not in proc.stderr and _snapshot(run_copy) == before


def test_resume_force_reruns_the_test_and_keeps_every_key(run_copy: Path) -> None:
    before = json.loads((run_copy / "metrics.json").read_text())
    # debug=limit's settings spelled out: a debug mode never writes into a finished run, even with force
    plain = [a for a in TINY if a != "debug=limit"] + [
        "trainer.max_epochs=1", "trainer.limit_train_batches=3", "trainer.limit_val_batches=2",
        "trainer.limit_test_batches=2", "trainer.log_every_n_steps=1", "trainer.val_check_interval=null",
        "callbacks.last_checkpoint.every_n_train_steps=2",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "train.py", *plain, f"hydra.run.dir={run_copy}", "ckpt_path=last", "resume=force"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    proc.out = proc.stdout + proc.stderr  # type: ignore[attr-defined]
    assert proc.returncode == 0, proc.out[-3000:]
    after = json.loads((run_copy / "metrics.json").read_text())
    assert set(after) == set(before) and "val/best_decision_accuracy" in after  # the rerun alone gave fewer keys
    assert after["val/best_decision_accuracy"] == before["val/best_decision_accuracy"]
    assert after["test/decision_accuracy"] == before["test/decision_accuracy"]  # the same adapter tested again


def test_train_false_measures_f0_alone_as_the_training_run_did(finished_run: Path, tmp_path: Path) -> None:
    """``train=false model.test_scorers=[f0]`` (the quickstart's f0 half, beside training): no fit, no adapter,
    only ``*_f0`` decision accuracies, and the same f0 numbers the training run's own test pass measured."""
    run_dir = tmp_path / "f0"
    proc = _train(run_dir, "train=false", "model.test_scorers=[f0]")
    assert proc.returncode == 0, proc.out[-3000:]
    assert not (run_dir / "adapter").exists() and not (run_dir / "checkpoints").exists()
    alone = json.loads((run_dir / "metrics.json").read_text())
    trained = json.loads((finished_run / "metrics.json").read_text())
    accuracies = [k for k in alone if "decision_accuracy" in k]
    assert accuracies and all(k.endswith("_f0") for k in accuracies), accuracies
    assert {k: alone[k] for k in accuracies} == {k: trained[k] for k in accuracies}
    assert "train/global_step" not in alone
