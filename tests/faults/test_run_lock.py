"""Issue "Reliability" 3: one evaluation per run folder, stale locks taken over, readers de-duplicate by id.

The lock is held by a real second process (``python -c``) wherever the holder's pid matters.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from evaluate_runner import DEAD_SERVER, LOCK_HOLDER, records, run_script

from canopy_lit.eval.records import RecordLog, RunLock, RunLocked, read_predictions
from canopy_lit.report.runs import Run


@pytest.fixture
def holder(tmp_path: Path):
    """A live process holding ``tmp_path / "run"``; yields it (killed afterwards)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(tmp_path / "run")], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held"
    yield proc
    proc.kill()
    proc.wait()


def test_second_lock_names_the_live_holder(tmp_path: Path, holder: subprocess.Popen) -> None:
    with pytest.raises(RunLocked, match=rf"in use by pid {holder.pid} on host {socket.gethostname()}"):
        RunLock(tmp_path / "run").acquire()


def test_second_evaluation_into_a_locked_folder_exits_1_and_writes_nothing(tmp_path: Path, holder) -> None:
    run_dir = tmp_path / "run"
    out = run_script(
        "evaluate.py", run_dir, "method=no_retrieval", "llm=openai", f"llm.base_url={DEAD_SERVER}",
        "data=hotpotqa", "limit=3",
    )  # fmt: skip
    assert out.status == 1
    assert f"run folder in use by pid {holder.pid} on host {socket.gethostname()}" in out.stderr
    assert records(run_dir) == []
    assert json.loads((run_dir / ".lock").read_text())["pid"] == holder.pid  # the holder's lock is untouched


def test_lock_of_a_killed_process_is_taken_over(tmp_path: Path, holder: subprocess.Popen, caplog) -> None:
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    lock_file = tmp_path / "run" / ".lock"
    assert json.loads(lock_file.read_text())["pid"] == holder.pid  # the dead owner's file is still there
    with caplog.at_level("WARNING"), RunLock(tmp_path / "run") as lock:
        assert json.loads(lock_file.read_text())["pid"] == os.getpid()
        assert f"stale lock of pid {holder.pid}" in caplog.text
        with pytest.raises(RunLocked, match=f"pid {os.getpid()}"):
            RunLock(tmp_path / "run").acquire()  # another taker now loses to us
    assert not lock_file.exists()  # a clean release leaves no lock behind
    assert lock.holder() == {}


def test_takers_racing_for_a_stale_lock_get_exactly_one_winner(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / ".lock").write_text(json.dumps({"pid": 999999999, "host": socket.gethostname()}))
    script = (
        "import sys, time; from canopy_lit.eval.records import RunLock, RunLocked\n"
        "try:\n    RunLock(sys.argv[1]).acquire(); print('won', flush=True); time.sleep(3)\n"
        "except RunLocked:\n    print('lost', flush=True)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(run_dir)], stdout=subprocess.PIPE, text=True)
             for _ in range(4)]  # fmt: skip
    outcomes = sorted(p.communicate(timeout=60)[0].strip() for p in procs)
    assert outcomes == ["lost", "lost", "lost", "won"]


def test_readers_of_predictions_deduplicate_by_question_id(tmp_path: Path) -> None:
    """Two unlocked runs once appended 6 records for 3 questions: every reader now sees 3."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    recs = [{"id": f"q{i}", "status": "ok", "prediction": f"run{r}"} for r in (1, 2) for i in range(3)]
    (run_dir / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    for got in (read_predictions(run_dir / "predictions.jsonl"), Run(run_dir, {}).records()):
        assert [r["id"] for r in got] == ["q0", "q1", "q2"]
        assert {r["prediction"] for r in got} == {"run2"}  # the later record wins, as on resume
    with RecordLog(run_dir / "predictions.jsonl") as book:
        assert len(list(book.records())) == 3


def test_a_failed_run_releases_its_lock(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    out = run_script(
        "evaluate.py", run_dir, "method=no_retrieval", "llm=openai", f"llm.base_url={DEAD_SERVER}",
        "llm.max_retries=0", "data=hotpotqa", "limit=2",
    )  # fmt: skip
    assert out.status == 1 and len(records(run_dir)) == 2  # every question failed: exit 1 (item 7)
    assert not (run_dir / ".lock").exists()
    with RunLock(run_dir):  # nothing stale is left to take over either
        assert json.loads((run_dir / ".lock").read_text())["pid"] == os.getpid()
