"""Cases that already behaved, kept so: a run SIGKILLed mid-way resumes (its stale lock taken over),
and a torn last line of predictions.jsonl is cut and its question re-run. Real SmolLM2-135M, closed book.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from evaluate_runner import ROOT, metrics, records, run_script, script_cmd

SMOL = ("method=no_retrieval", "llm=llamacpp_smollm2", "llm.n_threads=1", "data=hotpotqa", "data.split=test")


@pytest.fixture(scope="module", autouse=True)
def smollm2() -> None:
    from canopy_lit.assets import AssetError, resolve

    try:
        resolve("smollm2-135m")
    except AssetError as err:
        pytest.skip(f"smollm2-135m asset unavailable: {err}")


def test_sigkill_mid_run_then_resume_each_question_once(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cmd = script_cmd("evaluate.py", run_dir, *SMOL, "limit=6")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while len(records(run_dir)) < 2 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, f"run ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    done_before = {r["id"] for r in records(run_dir)}
    assert 2 <= len(done_before) < 6
    assert json.loads((run_dir / ".lock").read_text())["pid"] == proc.pid  # left behind by the kill

    out = run_script("evaluate.py", run_dir, *SMOL, "limit=6")
    assert out.status == 0, out.stderr[-3000:]
    ids = [r["id"] for r in records(run_dir)]
    assert len(ids) == 6 and len(set(ids)) == 6 and done_before <= set(ids)
    assert f"stale lock of pid {proc.pid}" in (run_dir / "evaluate.log").read_text()
    m = metrics(run_dir)
    assert m["eval/n"] == 6 and m["eval/failed"] == 0
    assert not (run_dir / ".lock").exists()


def test_torn_last_line_is_cut_and_its_question_rerun(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert run_script("evaluate.py", run_dir, *SMOL, "limit=2").status == 0
    preds = run_dir / "predictions.jsonl"
    first, second = preds.read_text().splitlines()
    preds.write_text(first + "\n" + second[: len(second) // 2])  # killed mid-write of the second record

    out = run_script("evaluate.py", run_dir, *SMOL, "limit=3")
    assert out.status == 0, out.stderr[-3000:]
    recs = records(run_dir)  # every line parses again
    assert [r["id"] for r in recs][0] == json.loads(first)["id"]
    assert sorted(r["id"] for r in recs) == sorted({r["id"] for r in recs}) and len(recs) == 3
    assert (
        "cut " in (run_dir / "evaluate.log").read_text()
        and "torn last record" in (run_dir / "evaluate.log").read_text()
    )
