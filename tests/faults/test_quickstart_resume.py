"""scripts/quickstart.sh resumes: a rerun skips training, the f0 test pass and the evidence study once finished.

The script runs against a hand-made stand-in for the venv's ``python`` that records each call and writes
the outputs a finished step leaves (adapter, metrics.json, the table), so only the script's own resume
logic is under test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

STAND_IN_PYTHON = r"""#!/usr/bin/env bash
# The quickstart's own checks and record run for real (they are part of the script under test).
if [ "$1" = scripts/quickstart_record.py ]; then exec "$REAL_PYTHON" "$@"; fi
echo "$*" >> "$CALLS"
steps=0
for a in "$@"; do case "$a" in trainer.max_steps=*) steps=${a#trainer.max_steps=} ;; esac; done
[ -n "${TRAIN_STOPS_AT:-}" ] && steps=$TRAIN_STOPS_AT
for a in "$@"; do
  case "$a" in
    hydra.run.dir=*) dir=${a#hydra.run.dir=}; mkdir -p "$dir"; echo '{}' > "$dir/metrics.json";
      if [ "$1" = train.py ]; then mkdir -p "$dir/adapter"; echo '{}' > "$dir/adapter/adapter_config.json";
        echo weights > "$dir/adapter/adapter_model.safetensors";
        acc='"test/in_domain/decision_accuracy": 0.5, "test/in_domain/decision_accuracy_f0": 0.4'
        acc="$acc"', "test/zero_shot/decision_accuracy": 0.6, "test/zero_shot/decision_accuracy_f0": 0.55'
        echo "{\"train/global_step\": $steps, $acc}" > "$dir/metrics.json";
        echo "tatqa (data/tatqa/x.json): skipped 7 x gold_rows_not_located" > "$dir/train.log"; fi ;;
  esac
done
if [ "$1 $2 $3" = "-m canopy_lit.report tables" ]; then mkdir -p "$OUT/tables"; for s in quickstart evidence; do echo table > "$OUT/tables/$s.md"; done; fi
exit 0
"""


def _checkout(tmp_path: Path, python: str = STAND_IN_PYTHON) -> Path:
    """A checkout holding only scripts/quickstart.sh, with ``python`` as its venv's interpreter."""
    work = tmp_path / "checkout"
    (work / "scripts").mkdir(parents=True)
    for rel in ("scripts/quickstart.sh", "scripts/quickstart_record.py", "configs/experiment/quickstart.yaml"):
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, work / rel)
    bin_dir = work / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(python)
    (bin_dir / "python").chmod(0o755)
    (bin_dir / "activate").write_text(f'export PATH="{bin_dir}:$PATH"\n')
    return work


def _quickstart(work: Path, calls: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    calls.write_text("")
    env = {**os.environ, "SKIP_SETUP": "1", "OUT": str(work / "out"), "N": "1", "CALLS": str(calls),
           "REAL_PYTHON": sys.executable, **extra}
    return subprocess.run(["bash", "scripts/quickstart.sh"], cwd=work, env=env, capture_output=True, text=True, timeout=60)


def _run(work: Path, calls: Path) -> list[str]:
    out = _quickstart(work, calls)
    assert out.returncode == 0, out.stdout + out.stderr
    return calls.read_text().splitlines()


def test_rerun_skips_finished_training_and_f0_test(tmp_path: Path) -> None:
    work = _checkout(tmp_path)
    calls = tmp_path / "calls.txt"

    first = _run(work, calls)
    train = [c for c in first if c.startswith("train.py")]
    # Nothing twice: training tests fθ only, lane f0 tests f0 on the same subsets without training.
    assert len(train) == 2, train
    fit = next(c for c in train if "train=false" not in c).split()
    f0 = next(c for c in train if "train=false" in c).split()
    assert "model.test_scorers=[ftheta]" in fit and "model.test_scorers=[f0]" in f0, train
    assert not any("experiment=probe" in c for c in first)  # the probe is a study of its own now
    assert sum("+ablation=evidence" in c for c in first) == 3  # keep-whole; fθ on text; fθ on tables
    steps = [line.split("\t")[0] for line in (work / "out" / "timings.tsv").read_text().splitlines()]
    assert sorted(steps) == sorted(
        ["setup", "train", "evidence", "qa", "wait_f0", "tables"]
        + ["f0:evidence", "f0:qa", "f0:test_f0", "f0:wait_train", "f0:evidence_ftheta"]
    )
    # The fθ runs of lane f0 got the trained adapter (it waited for training), the keep-whole runs none.
    ftheta = [c for c in first if "variant=full,flat_matched" in c]
    assert len(ftheta) == 2 and all("/out/train/adapter" in c for c in ftheta), ftheta
    # Every evaluation of either lane runs on one thread, so the two lanes never oversubscribe 2 cores; the
    # canopy demo too (beside lane f0's table runs): the last value of a key on the line is the one Hydra takes.
    for c in (c.split() for c in first if c.startswith("evaluate.py")):
        assert [a for a in c if a.startswith("threads=")][-1] == "threads=1", c
        assert [a for a in c if a.startswith("llm.n_threads=")][-1] == "llm.n_threads=1", c

    second = _run(work, calls)
    assert not any(c.startswith("train.py") for c in second), second
    assert not any("+ablation=evidence" in c for c in second), second


def test_failing_side_lane_fails_the_script(tmp_path: Path) -> None:
    """A crash in lane f0 (beside training) must fail the run, not vanish in the background."""
    failing = STAND_IN_PYTHON.replace("exit 0", 'case "$*" in *method=vanilla*) exit 3 ;; esac\nexit 0')
    work = _checkout(tmp_path, failing)
    out = _quickstart(work, tmp_path / "calls.txt")
    assert out.returncode != 0
    assert "lane f0 failed" in out.stderr
    assert not (work / "out" / "tables").exists()


def test_training_runs_the_fixed_steps_with_no_time_cap(tmp_path: Path) -> None:
    """The step count is the contract: no wall-time cap, one validation at the last step, and a summary that
    says "64 of 64 steps" and names the demo's model as it is."""
    work = _checkout(tmp_path)
    calls = tmp_path / "calls.txt"
    out = _quickstart(work, calls)
    assert out.returncode == 0, out.stdout + out.stderr
    train = next(c for c in calls.read_text().splitlines() if c.startswith("train.py") and "train=false" not in c).split()
    assert "trainer.max_steps=64" in train and "trainer.val_check_interval=64" in train, train
    assert [a for a in train if a.startswith("trainer.max_time=")] == ["trainer.max_time=null"], train
    assert "ckpt_path=last" not in train  # a fresh run: nothing to resume, and it says so plainly
    assert "training: starting fresh (no last.ckpt yet), 64 steps" in out.stdout
    assert "training: 64 of 64 steps." in out.stdout
    assert "Qwen2.5-Coder-1.5B" in out.stdout and "Qwen2.5-1.5B" not in out.stdout
    assert out.stdout.count("7 x gold_rows_not_located") == 1, out.stdout  # the data skips, once, explained


def test_training_short_of_its_steps_fails_the_script(tmp_path: Path) -> None:
    """A run that stops short of its steps (the old 30-minute cap stopped one at 60 of 80) must fail, not exit 0."""
    work = _checkout(tmp_path)
    out = _quickstart(work, tmp_path / "calls.txt", TRAIN_STOPS_AT="48")
    assert out.returncode != 0
    assert "training ran 48 of 64 steps" in out.stderr and "Rerun" in out.stderr, out.stderr
    assert not (work / "out" / "train" / ".done").exists()  # lane f0 never evaluates the short adapter
    assert not (work / "out" / "tables").exists()


def test_a_finished_run_writes_its_record(tmp_path: Path) -> None:
    """record.json binds the run to the script and config it ran (sha256) and names the adapter's hash."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import quickstart_record as qr
    finally:
        sys.path.pop(0)
    work = _checkout(tmp_path)
    out = _quickstart(work, tmp_path / "calls.txt")
    assert out.returncode == 0, out.stdout + out.stderr
    rec = json.loads((work / "out" / "record.json").read_text())
    assert rec["sha256"] == qr.source_hashes(ROOT)
    assert rec["steps_trained"] == 64
    assert rec["adapter_sha256"] == qr.sha256_tree(work / "out" / "train" / "adapter")
    assert {t["step"] for t in rec["wall_seconds_per_step"]} >= {"setup", "train", "qa", "tables"}
    assert isinstance(rec["wall_seconds_total"], int)
    table = qr.table(work / "out" / "record.json")
    assert "64 training steps" in table and "| train |" in table
