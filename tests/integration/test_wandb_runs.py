"""W&B and hyper-parameter search end to end on the real quickstart (MiniLM, bundled data), offline and
without a key (issue 36 items 2 and 3): train.py and evaluate.py with ``logger=wandb`` each write a W&B run
under their run folder; a W&B sweep trial, started as ``wandb agent`` starts it, logs the sweep metric in a
few steps; the Optuna preset runs two trials and records the best value."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from wandb_offline import agent_argv, no_key, no_key_env, offline_runs

pytest.importorskip("wandb")

ROOT = Path(__file__).resolve().parents[2]
SWEEP = yaml.safe_load((ROOT / "configs" / "sweep" / "lora_lr.yaml").read_text())
# A few questions per split (setup pre-tokenises every question it reads) and short inputs.
CAPS = {
    **{
        f"datamodule.options.{b}.max_questions.{split}": n
        for b in ("hotpotqa", "nq", "ottqa", "tatqa")
        for split, n in (("train", 24), ("val", 2), ("test", 2))
    },
    "datamodule.batch_size": 4,
    "encoder.max_seq_length": 64,
}
OFFLINE_LINE = "W&B: no API key (WANDB_API_KEY or `wandb login`), logging offline to "


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**env, "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}"}  # `python` = this venv's
    out = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    return out


# slow tier (-m slow, run by .ci/run after the default tier): a real training run with W&B offline, ~20 s
@pytest.mark.slow
def test_train_logger_wandb_writes_an_offline_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    out = _run(
        [
            sys.executable,
            "train.py",
            "experiment=quickstart",
            "debug=smoke",
            "logger=wandb",
            "test=false",
            f"hydra.run.dir={run_dir}",
            *(f"{k}={v}" for k, v in CAPS.items()),
        ],
        no_key_env(tmp_path),
    )
    assert f"{OFFLINE_LINE}{run_dir}/wandb; upload later" in out.stdout
    assert "anonymous setting has no effect" not in out.stdout + out.stderr  # Lightning's retired argument
    (run,) = offline_runs(run_dir)
    assert run.name.startswith("quickstart/") and "logger=wandb" in run.name and run.project == "canopy-lit"
    assert len(run.logged("val/decision_accuracy")) == 2  # debug=smoke validates at steps 2 and 4
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert run.summary["val/best_decision_accuracy"] == metrics["val/best_decision_accuracy"]


def test_evaluate_logger_wandb_writes_an_offline_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    out = _run(
        [
            sys.executable,
            "evaluate.py",
            "experiment=probe",
            "data=hotpotqa",
            "limit=2",
            "logger=wandb",
            f"hydra.run.dir={run_dir}",
        ],
        no_key_env(tmp_path),
    )
    assert f"{OFFLINE_LINE}{run_dir}/wandb; upload later" in out.stdout
    assert "anonymous setting has no effect" not in out.stdout + out.stderr  # Lightning's retired argument
    (run,) = offline_runs(run_dir)
    # named as training runs are (logger/wandb.yaml: the task, then the run's command-line overrides)
    assert (run.name, run.project, run.job_type) == (
        "evaluate/data=hotpotqa,logger=wandb",
        "canopy-lit",
        "evaluate",
    )
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert run.summary["probe/decision_accuracy"] == metrics["probe/decision_accuracy"]
    (logged,) = run.history
    assert logged["tables/probe"]["_type"] == logged["probe_questions"]["_type"] == "table-file"
    assert logged["probe_questions"]["nrows"] == 2


@pytest.mark.slow
def test_sweep_trial_started_as_the_agent_starts_it_logs_the_metric(monkeypatch, tmp_path: Path) -> None:
    """10 steps (the sweep validates every 10) of the trial argv that wandb's agent code builds from
    configs/sweep/lora_lr.yaml; the small-run keys are fixed sweep parameters, as a user would add them."""
    no_key(monkeypatch, tmp_path)
    run_dir = tmp_path / "run"
    values = {
        k: spec["values"][0] if "values" in spec else spec["min"] for k, spec in SWEEP["parameters"].items()
    }
    values.update(
        {**CAPS, "trainer.max_steps": 10, "trainer.limit_val_batches": 2, "hydra.run.dir": str(run_dir)}
    )
    argv, env = agent_argv(SWEEP, values, monkeypatch, tmp_path)
    _run(argv, env)
    (run,) = offline_runs(run_dir)
    assert len(run.logged(SWEEP["metric"]["name"])) == 1 and run.logged("trainer/global_step")[-1] >= 9
    assert not (run_dir / "metrics.json").read_text().count('"test/')  # trials skip the test passes


@pytest.mark.slow
def test_optuna_search_runs_two_trials_each_its_own_wandb_run(tmp_path: Path) -> None:
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    out = _run(
        [
            sys.executable,
            "train.py",
            "hparams_search=lora_optuna",
            "experiment=quickstart",
            "debug=smoke",
            "hydra.sweeper.n_trials=2",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
            "logger=wandb",
            "datamodule.batch_size=4",
            "encoder.max_seq_length=64",
        ],
        no_key_env(tmp_path),
    )
    assert "setup plugin" not in out.stdout + out.stderr  # alembic's INFO lines (the sweeper's storage)
    result = yaml.safe_load((tmp_path / "sweep" / "optimization_results.yaml").read_text())
    trials = [tmp_path / "sweep" / str(n) for n in range(2)]  # numbered trial folders
    best = [json.loads((t / "metrics.json").read_text())["val/best_decision_accuracy"] for t in trials]
    assert len(trials) == 2 and result["best_value"] == max(best)
    assert set(result["best_params"]) == set(SWEEP["parameters"])
    runs = [r for t in trials for r in offline_runs(t)]
    assert len(runs) == 2 and runs[0].name != runs[1].name  # each trial is a W&B run of its own
    assert [r.summary["val/best_decision_accuracy"] for r in runs] == best
