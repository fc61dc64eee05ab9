"""A study grid through the real submitit launcher (``hydra/launcher=submitit_local``, the ``cluster`` extra):
every grid point is a submitit job in its own process and writes its own run folder, exactly as under
``hydra/launcher=submitit_slurm`` / ``slurm`` on a cluster (there sbatch starts the same job script)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("submitit", reason="needs the cluster extra: pip install -e '.[cluster]'")
pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="needs the cluster extra: pip install -e '.[cluster]'")

ROOT = Path(__file__).resolve().parents[2]
MARGINS = ("0.0", "0.05")  # δ of parent-relative refinement: the grid's one axis


# slow tier (-m slow, run by .ci/run after the default tier): two submitit jobs, ~20 s
@pytest.mark.slow
def test_a_two_point_probe_grid_runs_as_submitit_jobs(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    cmd = [
        sys.executable, str(ROOT / "evaluate.py"), "-m",
        "experiment=probe", "data=hotpotqa", "limit=2", "encoder=minilm", "threads=1", "progress=false",
        f"refine.descend_margin={','.join(MARGINS)}",
        "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10",
        f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=${hydra.job.num}",
        # each job its own node cache: the two run side by side
        f"retrieval.node_cache_dir={tmp_path}/nodes-" + "${hydra:job.num}",
    ]  # fmt: skip
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]

    # The submitit executor ran both, each in its own process (a local job's id is its pid): a folder each with
    # the pickled job, its log and its pickled result.
    jobs = sorted(p for p in (sweep / ".submitit").iterdir() if p.is_dir() and p.name.isdigit())
    assert len(jobs) == 2 and os.getpid() not in {int(j.name) for j in jobs}, jobs
    for job in jobs:
        assert (job / f"{job.name}_submitted.pkl").is_file() and (job / f"{job.name}_0_result.pkl").is_file()
        log = (job / f"{job.name}_0_log.out").read_text()
        assert f"JobEnvironment(job_id={job.name}" in log and "Job completed successfully" in log, log[-2000:]

    metrics = []
    for num, margin in enumerate(MARGINS):
        run = sweep / str(num)
        m = json.loads((run / "metrics.json").read_text())
        assert m["probe/n_questions"] == 2 and 0.0 <= m["probe/decision_accuracy"] <= 1.0, m
        assert len((run / "probe_questions.jsonl").read_text().splitlines()) == 2
        assert json.loads((run / "run.json").read_text())["descend_margin"] == float(margin)
        hydra = yaml.safe_load((run / ".hydra" / "hydra.yaml").read_text())["hydra"]
        assert hydra["runtime"]["choices"]["hydra/launcher"] == "submitit_local"
        assert f"refine.descend_margin={margin}" in hydra["overrides"]["task"]
        assert (run / "evaluate.log").stat().st_size > 0
        metrics.append(m)
    # Each job ran its own grid point: a larger δ descends less, so it prunes less and keeps more tokens.
    assert metrics[1]["probe/pruned_share"] < metrics[0]["probe/pruned_share"]
    assert metrics[1]["probe/kept_token_ratio"] > metrics[0]["probe/kept_token_ratio"]

def test_the_slurm_preset_composes_over_the_plugin_and_a_study(hydra_ctx) -> None:
    """``hydra/launcher=slurm``: the plugin's SLURM launcher with this project's defaults, each overridable,
    into the study's sweep folder; the keys the how-to names are the plugin's."""
    from hydra import compose

    cfg = compose("evaluate", return_hydra_config=True, overrides=[
        "+ablation=main", "hydra/launcher=slurm", "hydra.launcher.partition=gpu", "hydra.launcher.gpus_per_node=0",
        'hydra.launcher.setup=["source .venv/bin/activate","export CANOPY_LIT_HOME=/shared/cache"]',
        "+hydra.launcher.additional_parameters.mail-type=END",
    ])  # fmt: skip
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert (launcher.partition, launcher.gpus_per_node, launcher.timeout_min, launcher.max_num_timeout) == ("gpu", 0, 240, 2)
    assert list(launcher.setup) == ["source .venv/bin/activate", "export CANOPY_LIT_HOME=/shared/cache"]
    assert dict(launcher.additional_parameters) == {"mail-type": "END"}
    assert launcher.submitit_folder == "outputs/ablation/main/.submitit/%j"
    local = compose("evaluate", overrides=["hydra/launcher=submitit_local"], return_hydra_config=True)
    assert local.hydra.launcher._target_.endswith("submitit_launcher.LocalLauncher")


def test_the_slurm_preset_is_the_sbatch_script_submitit_writes(hydra_ctx, tmp_path: Path, monkeypatch) -> None:
    """The preset's values, passed to submitit's own SLURM executor as the launcher passes them (its base keys
    as they are, the others ``slurm_``-prefixed), give the sbatch lines the how-to promises; submitit refuses
    an unknown key, so every key of the preset is one it knows."""
    import stat

    import submitit
    from hydra import compose
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf

    srun = tmp_path / "bin" / "srun"  # the executor looks for srun on PATH before anything else
    srun.parent.mkdir()
    srun.write_text("#!/bin/sh\nexit 0\n")
    srun.chmod(srun.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{srun.parent}:{os.environ['PATH']}")
    cfg = compose("evaluate", return_hydra_config=True, overrides=[
        "hydra/launcher=slurm", "hydra.launcher.partition=gpu", f"hydra.sweep.dir={tmp_path}/sweep",
        "hydra.job.name=evaluate", '+hydra.launcher.setup=["source .venv/bin/activate"]',
    ])  # fmt: skip
    params = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    params.pop("_target_")
    executor = submitit.AutoExecutor(folder=params.pop("submitit_folder"), cluster="slurm",
                                     slurm_max_num_timeout=params.pop("max_num_timeout"))  # fmt: skip
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()})
    text = executor._executor._make_submission_file_text("python -u -m submitit.core._submit X", "uid")
    lines = set(text.splitlines())
    for line in ("--partition=gpu", "--time=240", "--gpus-per-node=1", "--cpus-per-task=8", "--mem=64GB",
                 "--ntasks-per-node=1", "--job-name=evaluate", "--signal=USR2@120"):  # fmt: skip
        assert f"#SBATCH {line}" in lines, text
    assert f"#SBATCH --output={tmp_path}/sweep/.submitit/%j/%j_0_log.out" in lines, text
    assert "source .venv/bin/activate" in lines and executor._executor.max_num_timeout == 2
