"""Repository rules: no machine path in a tracked path or in a run folder's name, from any entry point."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hydra import compose

ROOT = Path(__file__).resolve().parents[2]
# A checkout root, a temporary folder or a home directory inside a tracked path or a run-folder name
MACHINE_PATH = re.compile(r"(^|[=/])(work|tmp|root|home|Users)/")
PATH_KEYS = ("adapter", "encoder.adapter", "data.path")


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_no_tracked_path_contains_a_machine_path() -> None:
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    offenders = [p for p in tracked.splitlines() if MACHINE_PATH.search(p)]
    assert not offenders, f"{len(offenders)} tracked paths name a machine folder, e.g. {offenders[:2]}"


@pytest.mark.parametrize("config", ["evaluate", "train"])
def test_path_valued_overrides_never_name_a_run_folder(hydra_ctx, config: str) -> None:
    cfg = compose(config, return_hydra_config=True)
    assert set(PATH_KEYS) <= set(cfg.hydra.job.config.override_dirname.exclude_keys)


@pytest.mark.parametrize("study", sorted(p.stem for p in (ROOT / "configs" / "ablation").glob("*.yaml")))
def test_study_presets_keep_path_keys_out_of_subdir_names(hydra_ctx, study: str) -> None:
    cfg = compose("evaluate", overrides=[f"+ablation={study}"], return_hydra_config=True)
    assert set(PATH_KEYS) <= set(cfg.hydra.job.config.override_dirname.exclude_keys), study
