"""Run ``evaluate.py`` / ``train.py`` as a user does and collect the exit status and stderr.

``run_script`` executes the real script in this process (``runpy``, ``sys.argv`` patched: the
same Hydra composition, validation and exit path as a shell run, without a fresh interpreter's
imports); ``script_cmd`` is the argv for a real subprocess where a separate process matters
(locks held by another pid, SIGKILL).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import runpy
import sys
from dataclasses import dataclass
from pathlib import Path

from hydra.core.global_hydra import GlobalHydra

ROOT = Path(__file__).resolve().parents[2]
# A loopback port with no listener: every request is refused at once.
DEAD_SERVER = "http://127.0.0.1:9/v1"
# ``python -c LOCK_HOLDER RUN_DIR``: a live process holding the run folder's lock (prints "held").
LOCK_HOLDER = (
    "import sys, time; from canopy_lit.eval.records import RunLock; RunLock(sys.argv[1]).acquire(); "
    "print('held', flush=True); time.sleep(120)"
)


@dataclass
class Outcome:
    status: int
    stderr: str
    stdout: str


def run_script(script: str, run_dir: Path, *overrides: str) -> Outcome:
    """``python <script> hydra.run.dir=<run_dir> progress=false <overrides>`` in process."""
    argv, root = sys.argv, logging.getLogger()
    handlers, level = list(root.handlers), root.level
    err, out = io.StringIO(), io.StringIO()
    sys.argv = [script, f"hydra.run.dir={run_dir}", *overrides]
    if script == "evaluate.py":
        sys.argv.insert(2, "progress=false")
    status = 0
    GlobalHydra.instance().clear()  # a test's own compose context would make Hydra refuse to start
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            runpy.run_path(str(ROOT / script), run_name="__main__")
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = argv
        GlobalHydra.instance().clear()
        for h in root.handlers:  # Hydra's run-dir log file: close it, give pytest its handlers back
            if h not in handlers:
                h.close()
        root.handlers[:], root.level = handlers, level
    return Outcome(status, err.getvalue(), out.getvalue())


def script_cmd(script: str, run_dir: Path, *overrides: str) -> list[str]:
    return [sys.executable, str(ROOT / script), f"hydra.run.dir={run_dir}", "progress=false", *overrides]


def records(run_dir: Path) -> list[dict]:
    path = run_dir / "predictions.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def metrics(run_dir: Path) -> dict[str, float]:
    return json.loads((run_dir / "metrics.json").read_text())


def folder_state(run_dir: Path, skip: tuple[str, ...] = ()) -> dict[str, tuple[bytes, int]]:
    """Every file under ``run_dir`` (``.hydra/`` too): relative path -> (bytes, mtime in ns)."""
    return {
        p.relative_to(run_dir).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and p.relative_to(run_dir).as_posix() not in skip
    }


def config_problems(config: str, *overrides: str) -> list[str]:
    """The schema's problems with ``config`` (evaluate | train) composed with ``overrides`` ([] = valid);
    needs an active Hydra context over configs/."""
    from hydra import compose

    from canopy_lit.schema import ConfigError, validate_eval_config, validate_train_config

    validate = validate_eval_config if config == "evaluate" else validate_train_config
    try:
        validate(compose(config, overrides=list(overrides)))
    except ConfigError as err:
        return err.problems
    return []
