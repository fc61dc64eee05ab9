"""Repository rules: code, not artifacts, in git; no machine path in a tracked path, a tracked text file, a
committed run record or a run folder's name, from any entry point."""

from __future__ import annotations

import re
import shutil
import subprocess
import zipfile
from functools import cache
from pathlib import Path

import pytest
from hydra import compose
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[2]
MAX_TRACKED_FILES = 1500
# A checkout root, a temporary folder or a home directory inside a tracked path or a run-folder name
MACHINE_PATH = re.compile(r"(^|[=/])(work|tmp|root|home|Users)/")
# ... and as an absolute path inside a file ("/home/x", "=/tmp/x", '"/work/x'; not "data/home/", not a URL)
MACHINE_PATH_IN_TEXT = re.compile(r"(?<![\w.~:/-])/(work|tmp|root|home|Users)/")
# tests name made-up machine paths on purpose (fixtures of the path rules themselves)
TEXT_EXEMPT = ("tests/",)
# what a study archive holds that records the run (its per-question rows are data: a passage may say /home/)
RECORD_NAMES = ("run.json", "config.yaml", "metrics.json", "question_ids.json")
needs_git = pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")


@cache
def tracked() -> tuple[str, ...]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return tuple(out.splitlines())


@needs_git
def test_at_most_1500_tracked_files() -> None:
    by_top = {}
    for path in tracked():
        top = "/".join(path.split("/")[:3 if path.startswith("experiments/runs/") else 1])
        by_top[top] = by_top.get(top, 0) + 1
    largest = sorted(by_top.items(), key=lambda kv: -kv[1])[:3]
    assert len(tracked()) <= MAX_TRACKED_FILES, f"{len(tracked())} tracked files; most under {largest}"


@needs_git
def test_committed_runs_are_archives_and_adapters_only() -> None:
    """A study is one experiments/runs/<study>.zip; only adapters (which commands and tables name) are files."""
    loose = [p for p in tracked() if p.startswith("experiments/runs/") and not p.endswith(".zip")
             and not re.match(r"experiments/runs/[^/]+/[^/]+/adapter[^/]*/[^/]+$", p)]  # fmt: skip
    assert not loose, f"{len(loose)} loose run files tracked (pack them: python -m canopy_lit.report pack), e.g. {loose[:2]}"
    assert "experiments/runs/recipe/base/adapter/adapter_model.safetensors" in tracked()  # the quickstart adapter


@needs_git
def test_no_tracked_path_contains_a_machine_path() -> None:
    offenders = [p for p in tracked() if MACHINE_PATH.search(p)]
    assert not offenders, f"{len(offenders)} tracked paths name a machine folder, e.g. {offenders[:2]}"


@needs_git
def test_no_tracked_text_file_contains_a_machine_path() -> None:
    offenders = []
    for path in tracked():
        file = ROOT / path
        if path.startswith(TEXT_EXEMPT) or not file.is_file():
            continue
        data = file.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary: weights, images, archives (their records are checked below)
        if m := MACHINE_PATH_IN_TEXT.search(data.decode("utf-8", "replace")):
            offenders.append(f"{path}: ...{m.string[max(0, m.start() - 30):m.end() + 20]!r}")
    assert not offenders, f"{len(offenders)} tracked files hold an absolute machine path: {offenders[:3]}"


@pytest.mark.parametrize("archive", sorted(p.name for p in (ROOT / "experiments" / "runs").glob("*.zip")))
def test_committed_run_records_name_no_machine_path(archive: str) -> None:
    offenders = []
    with zipfile.ZipFile(ROOT / "experiments" / "runs" / archive) as zf:
        for name in zf.namelist():
            if MACHINE_PATH.search(name):
                offenders.append(name)
            elif name.rsplit("/", 1)[-1] in RECORD_NAMES and (m := MACHINE_PATH_IN_TEXT.search(zf.read(name).decode())):
                offenders.append(f"{name}: {m.group(0)}")
    assert not offenders, f"{archive}: {offenders[:3]}"


def path_valued_keys(cfg) -> set[str]:
    """Keys of a composed config whose value is a path: named so (``*_dir``, ``*_path``, ``path``,
    ``adapter``, ``dirpath``) or interpolated from ``paths.*`` / Hydra's run folder."""
    plain = OmegaConf.to_container(cfg, resolve=False)
    plain.pop("hydra", None)
    keys = set()

    def walk(node, prefix: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}.{k}" if prefix else str(k))
            return
        leaf = prefix.rsplit(".", 1)[-1]
        named = re.search(r"(_dir|_path|^path|^adapter|dirpath)$", leaf)
        if named or (isinstance(node, str) and re.search(r"\$\{(paths\.|hydra:runtime)", node)):
            keys.add(prefix)

    walk(plain, "")
    return keys


@pytest.mark.parametrize("config", ["evaluate", "train"])
def test_path_valued_overrides_never_name_a_run_folder(hydra_ctx, config: str) -> None:
    cfg = compose(config, return_hydra_config=True)
    excluded = set(cfg.hydra.job.config.override_dirname.exclude_keys)
    wanted = path_valued_keys(cfg) | {"adapter", "encoder.adapter", "data.path"}
    assert {"paths.root_dir", "paths.cache_dir", "encoder.adapter"} <= wanted  # the rule sees paths
    assert not wanted - excluded, f"path-valued keys that would name a sweep subfolder: {sorted(wanted - excluded)}"


@pytest.mark.parametrize("study", sorted(p.stem for p in (ROOT / "configs" / "ablation").glob("[!_]*.yaml")))
def test_study_presets_keep_path_keys_out_of_subdir_names(hydra_ctx, study: str) -> None:
    cfg = compose("evaluate", overrides=[f"+ablation={study}"], return_hydra_config=True)
    wanted = path_valued_keys(cfg) | {"adapter", "encoder.adapter", "data.path"}
    missing = wanted - set(cfg.hydra.job.config.override_dirname.exclude_keys)
    assert not missing, f"{study}: {sorted(missing)}"


@pytest.mark.parametrize("study", sorted(p.stem for p in (ROOT / "configs" / "ablation").glob("[!_]*.yaml")))
def test_study_presets_name_no_subdir_after_how_a_run_resumes(hydra_ctx, study: str) -> None:
    """scripts/frontier.sh passes resume=$RESUME to every sweep: a subfolder named after it would never be
    the folder the study resumes."""
    cfg = compose("evaluate", overrides=[f"+ablation={study}"], return_hydra_config=True)
    excluded = set(cfg.hydra.job.config.override_dirname.exclude_keys)
    assert {"resume", "progress", "threads", "limit", "concurrency"} <= excluded, study


@pytest.mark.parametrize("config", ["evaluate", "train"])
def test_a_sweep_subfolder_name_holds_no_machine_path(hydra_ctx, config: str) -> None:
    """Hydra's name for a multirun job folder, with every path-valued key set to a machine path."""
    keys = sorted(path_valued_keys(compose(config, return_hydra_config=True)))
    overrides = [f"{k}=/work/main/x" for k in keys] + ["+adapter=/home/me/adapter", "seed=3"]
    cfg = compose(config, overrides=overrides, return_hydra_config=True)
    assert cfg.hydra.job.override_dirname == "seed=3"
