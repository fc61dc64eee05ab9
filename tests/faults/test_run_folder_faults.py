"""Issue "Runs that never lie" 1, 2 and 7 (evaluation): a run folder is never relabelled, never touched
before it is locked and checked, and an unwritable or full one is one line naming the path, nothing lost.

Real runs of ``evaluate.py`` (in process, as ``run_script`` does; the lock holder is another process): the
simulated LLM where the answers do not matter (no model to load), SmolLM2-135M where a run must last long
enough to fill the disk under it. Read-only and full disks are
real tmpfs mounts when this process may mount (root); else a read-only folder is a chmod and the full
disk is skipped.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from evaluate_runner import LOCK_HOLDER, folder_state, metrics, records, run_script

QUICK = ("method=no_retrieval", "llm=simulated", "data=hotpotqa", "data.split=test")
OTHER = ("method=vanilla", "retriever=candidates", "retrieval.k=3", "llm=simulated", "data=hotpotqa", "data.split=test")
SMOL = ("method=no_retrieval", "llm=llamacpp_smollm2", "llm.n_threads=1", "data=hotpotqa", "data.split=test")


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("evaluate.py: error:")]


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` (skips the test where this process may not mount)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


# --- 1. a rerun with other settings never relabels a folder's results ----------------------------------


def test_rerun_with_other_settings_refuses_naming_them_and_changes_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert run_script("evaluate.py", run_dir, *QUICK, "limit=2").status == 0
    before = folder_state(run_dir)

    out = run_script("evaluate.py", run_dir, *OTHER, "limit=2")
    assert out.status == 2, out.stderr[-2000:]
    [line] = error_lines(out.stderr)
    assert f"{run_dir}: its results were made with other settings" in line
    assert 'method.name "no_retrieval" (now "vanilla")' in line and "retrieval.k 10 (now 3)" in line
    assert "resume=force" in line and "Traceback" not in out.stderr
    assert folder_state(run_dir) == before  # run.json, table.md, metrics.json, .hydra/ and the log as they were

    # Results without settings.json record no settings to continue under: refused the same way, never continued.
    (run_dir / "settings.json").unlink()
    out = run_script("evaluate.py", run_dir, *QUICK, "limit=2")
    assert out.status == 2 and "settings.json <absent> (now <this run's settings>)" in error_lines(out.stderr)[0]
    assert json.loads((run_dir / "run.json").read_text())["method"] == "no_retrieval"


def test_answer_neutral_settings_may_differ_and_resume_force_continues(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert run_script("evaluate.py", run_dir, *QUICK, "limit=2").status == 0
    first = records(run_dir)

    out = run_script(
        "evaluate.py", run_dir, *QUICK, "limit=3", "threads=1", "concurrency=2", "max_consecutive_failures=3",
        "retry_failed=true", "judge.max_tokens=8",
    )  # fmt: skip
    assert out.status == 0, out.stderr[-2000:]
    assert records(run_dir)[:2] == first and len(records(run_dir)) == 3  # resumed: one more question

    out = run_script("evaluate.py", run_dir, *OTHER, "limit=3", "resume=force")
    assert out.status == 0, out.stderr[-2000:]
    assert records(run_dir) == records(run_dir)[:3] and len(records(run_dir)) == 3  # nothing rerun
    assert json.loads((run_dir / "run.json").read_text())["method"] == "vanilla"
    assert json.loads((run_dir / "settings.json").read_text())["settings"]["retrieval.k"] == 3
    assert "resume=force" in (run_dir / "evaluate.log").read_text()

    out = run_script("evaluate.py", run_dir, *OTHER, "limit=3", "resume=maybe")
    assert out.status == 2 and "resume" in error_lines(out.stderr)[0]


def test_settings_are_the_config_less_speed_count_and_location() -> None:
    from canopy_lit.eval.records import run_settings

    def config(root: str, **top: object) -> dict:
        return {
            "paths": {"root_dir": root, "data_dir": f"{root}/data", "output_dir": f"/runs{root}"},
            "data": {"name": "hotpotqa", "path": f"{root}/data/hotpotqa"},
            "llm": {"model": "smollm2-135m", "n_threads": 1, "base_url": "http://u:secret@host/v1"},
            **top,
        }

    here = run_settings(config("/work/a", limit=2, threads=1, concurrency=1, study="x"))
    assert here == run_settings(config("/home/b/canopy", limit=9, threads=4, concurrency=8, study="y"))
    assert here == {"data.name": "hotpotqa", "data.path": "${paths.data_dir}/hotpotqa", "llm.model": "smollm2-135m"}
    assert run_settings(config("/work/a", seed=1)) != run_settings(config("/work/a", seed=0))


# --- 2. nothing in a run folder changes before it is locked and checked ----------------------------


def test_refused_concurrent_run_leaves_the_winners_files_untouched(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert run_script("evaluate.py", run_dir, *QUICK, "limit=2").status == 0
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(run_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        before = folder_state(run_dir)
        out = run_script("evaluate.py", run_dir, *OTHER, "limit=3")
        assert out.status == 1 and f"in use by pid {holder.pid}" in error_lines(out.stderr)[0]
        assert folder_state(run_dir) == before  # .hydra/config.yaml, overrides.yaml and evaluate.log included
    finally:
        holder.kill()
        holder.wait()


def test_garbled_middle_line_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert run_script("evaluate.py", run_dir, *QUICK, "limit=3").status == 0
    preds = run_dir / "predictions.jsonl"
    lines = preds.read_text().splitlines()
    preds.write_text("\n".join([lines[0], "{garbage", lines[2]]) + "\n")
    before = folder_state(run_dir)

    out = run_script("evaluate.py", run_dir, *QUICK, "limit=3")
    assert out.status == 1, out.stderr[-2000:]
    [line] = error_lines(out.stderr)
    assert f"{preds}: line 2 is not valid JSON" in line and "fix or remove that line" in line
    assert "Traceback" not in out.stderr
    assert folder_state(run_dir) == before  # run.json and .hydra/ not rewritten


# --- 7. a read-only or full run folder: one line naming the path, nothing lost ----------------------


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A folder holding a finished run (``run``), then made read-only: a remounted tmpfs as root, else chmod."""
    if os.geteuid() != 0:
        base = tmp_path / "ro"
        assert run_script("evaluate.py", base / "run", *QUICK, "limit=2").status == 0
        for d in (base, base / "run"):
            d.chmod(0o555)
        yield base
        for d in (base, base / "run"):
            d.chmod(0o755)
        return
    with tmpfs(tmp_path / "ro", "4m") as base:
        assert run_script("evaluate.py", base / "run", *QUICK, "limit=2").status == 0
        subprocess.run(["mount", "-o", "remount,ro", str(base)], check=True)
        yield base


def test_read_only_run_folder_is_one_line_naming_it(read_only: Path) -> None:
    run_dir = read_only / "run"
    before = folder_state(run_dir)
    out = run_script("evaluate.py", run_dir, *QUICK, "limit=3")
    assert out.status == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    [line] = error_lines(out.stderr)
    assert line.startswith(f"evaluate.py: error: {run_dir}/.lock: ") and "use a writable hydra.run.dir" in line
    assert folder_state(run_dir) == before

    out = run_script("evaluate.py", read_only / "new" / "run", *QUICK, "limit=3")  # cannot even be made
    assert out.status == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    [line] = error_lines(out.stderr)
    assert line.startswith(f"evaluate.py: error: {read_only}/new: ") and "use a writable hydra.run.dir" in line


def fill(disk: Path) -> Path:
    """Take every free byte of ``disk`` (a file that grows until ENOSPC); returns that file."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as fh:
        for chunk in (1 << 16, 512):
            with contextlib.suppress(OSError):
                while True:
                    fh.write(b"\0" * chunk)
    return filler


def test_disk_full_mid_run_is_one_line_then_the_resume_completes(tmp_path: Path) -> None:
    from canopy_lit.assets import AssetError, resolve

    try:
        resolve("smollm2-135m")
    except AssetError as err:
        pytest.skip(f"smollm2-135m asset unavailable: {err}")
    with tmpfs(tmp_path / "disk", "2m") as disk:
        run_dir = disk / "run"
        assert run_script("evaluate.py", run_dir, *SMOL, "limit=1").status == 0
        preds = run_dir / "predictions.jsonl"
        # tmpfs allocates 4 KiB pages: end the file on a page (a blank line, which readers skip) so that
        # the next record needs a new page, as every 7th or so record does.
        preds.write_text(preds.read_text() + " " * (-(preds.stat().st_size + 1) % 4096) + "\n")
        kept = preds.read_bytes()
        started = (run_dir / "run.json").stat().st_mtime_ns

        def fill_once_claimed() -> None:  # the run has locked and checked its folder: fill the disk under it
            deadline = time.time() + 120
            while (run_dir / "run.json").stat().st_mtime_ns == started and time.time() < deadline:
                time.sleep(0.01)
            filled.append(fill(disk))
            try:
                (disk / "probe").write_bytes(b"x" * 4096)
            except OSError as err:
                filled.append(err.errno)

        filled: list[Any] = []
        watcher = threading.Thread(target=fill_once_claimed)
        watcher.start()
        out = run_script("evaluate.py", run_dir, *SMOL, "limit=2")
        watcher.join()
        assert filled[1:] == [errno.ENOSPC]  # the disk was full while the run went on

        assert out.status == 1, out.stderr[-3000:]
        assert "Traceback" not in out.stderr and "Logging error" not in out.stderr, out.stderr[-3000:]
        [line] = error_lines(out.stderr)
        # the first write after the disk filled names its file: the next record, or the run folder's record of
        # the reader cap lowered to SmolLM2's context (rewritten once the loop is built)
        written = {preds, run_dir / "run.json", run_dir / "settings.json"}
        assert any(line == f"evaluate.py: error: {f}: No space left on device; free space and rerun the same "
                           "command to resume (finished questions are kept)" for f in written), line  # fmt: skip
        assert preds.read_bytes() == kept  # the finished record kept, no part of the failed one

        filled[0].unlink()
        out = run_script("evaluate.py", run_dir, *SMOL, "limit=2")
        assert out.status == 0, out.stderr[-3000:]
        ids = [r["id"] for r in records(run_dir)]
        assert len(ids) == len(set(ids)) == 2 and preds.read_bytes().startswith(kept)
        assert metrics(run_dir)["eval/n"] == 2
