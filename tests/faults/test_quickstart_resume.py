"""scripts/quickstart.sh resumes: a rerun skips training, both probes and the evidence study once finished.

The script runs against a hand-made stand-in for the venv's ``python`` that records each call and writes
the outputs a finished step leaves (adapter, metrics.json, the table), so only the script's own resume
logic is under test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

STAND_IN_PYTHON = r"""#!/usr/bin/env bash
echo "$*" >> "$CALLS"
for a in "$@"; do
  case "$a" in
    hydra.run.dir=*) dir=${a#hydra.run.dir=}; mkdir -p "$dir"; echo '{}' > "$dir/metrics.json";
      if [ "$1" = train.py ]; then mkdir -p "$dir/adapter"; echo '{}' > "$dir/adapter/adapter_config.json"; fi ;;
  esac
done
if [ "$1 $2 $3" = "-m canopy_lit.report tables" ]; then mkdir -p "$OUT/tables"; for s in quickstart evidence; do echo table > "$OUT/tables/$s.md"; done; fi
exit 0
"""


def _checkout(tmp_path: Path, python: str = STAND_IN_PYTHON) -> Path:
    """A checkout holding only scripts/quickstart.sh, with ``python`` as its venv's interpreter."""
    work = tmp_path / "checkout"
    (work / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "quickstart.sh", work / "scripts" / "quickstart.sh")
    bin_dir = work / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(python)
    (bin_dir / "python").chmod(0o755)
    (bin_dir / "activate").write_text(f'export PATH="{bin_dir}:$PATH"\n')
    return work


def _quickstart(work: Path, calls: Path) -> subprocess.CompletedProcess[str]:
    calls.write_text("")
    env = {**os.environ, "SKIP_SETUP": "1", "OUT": str(work / "out"), "N": "1", "CALLS": str(calls)}
    return subprocess.run(["bash", "scripts/quickstart.sh"], cwd=work, env=env, capture_output=True, text=True, timeout=60)


def _run(work: Path, calls: Path) -> list[str]:
    out = _quickstart(work, calls)
    assert out.returncode == 0, out.stdout + out.stderr
    return calls.read_text().splitlines()


def test_rerun_skips_finished_training_and_probes(tmp_path: Path) -> None:
    work = _checkout(tmp_path)
    calls = tmp_path / "calls.txt"

    first = _run(work, calls)
    assert sum(c.startswith("train.py") for c in first) == 1
    assert sum("experiment=probe" in c for c in first) == 2
    assert sum("+ablation=evidence" in c for c in first) == 3  # keep-whole; fθ on text; fθ on tables
    steps = [line.split("\t")[0] for line in (work / "out" / "timings.tsv").read_text().splitlines()]
    assert sorted(steps) == sorted(
        ["setup", "train", "probe", "evidence", "wait_f0", "qa", "tables"]
        + ["f0:probe", "f0:evidence", "f0:qa", "f0:wait_train", "f0:evidence_ftheta"]
    )
    # The fθ runs of lane f0 got the trained adapter (it waited for training), the keep-whole runs none.
    ftheta = [c for c in first if "variant=full,flat_matched" in c]
    assert len(ftheta) == 2 and all("/out/train/adapter" in c for c in ftheta), ftheta
    # Every evaluation of either lane runs on one thread, so the two lanes never oversubscribe 2 cores.
    assert all("threads=1" in c for c in first if c.startswith("evaluate.py") and "method=canopy" not in c)
    # The canopy demo runs after both lanes, on both cores: its own value is the last one on the line.
    canopy = next(c for c in first if "method=canopy" in c).split()
    assert [a for a in canopy if a.startswith("llm.n_threads=")][-1] == "llm.n_threads=2", canopy

    second = _run(work, calls)
    assert not any(c.startswith("train.py") for c in second), second
    assert not any("experiment=probe" in c for c in second), second  # the old script reran both probes
    assert not any("+ablation=evidence" in c for c in second), second


def test_failing_side_lane_fails_the_script(tmp_path: Path) -> None:
    """A crash in lane f0 (beside training) must fail the run, not vanish in the background."""
    failing = STAND_IN_PYTHON.replace("exit 0", 'case "$*" in *method=vanilla*) exit 3 ;; esac\nexit 0')
    work = _checkout(tmp_path, failing)
    out = _quickstart(work, tmp_path / "calls.txt")
    assert out.returncode != 0
    assert "lane f0 failed" in out.stderr
    assert not (work / "out" / "tables").exists()
