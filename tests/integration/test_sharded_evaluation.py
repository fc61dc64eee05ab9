"""``shard=I/N`` end to end: three shards of a SmolLM2 QA run on bundled HotpotQA, merged by
``python -m canopy_lit.report merge-shards``, are the unsharded run (records, metrics, table, settings); a
missing, duplicated or differently set shard is refused in one line; a shard resumes in its own folder only."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "faults"))  # the in-process script runner the fault tests use
from evaluate_runner import Outcome, records, run_script  # noqa: E402

from canopy_lit.report.__main__ import main as report  # noqa: E402

# slow tier (-m slow, run by .ci/run after the default tier): three SmolLM2 QA shards and the unsharded run, ~30 s
pytestmark = pytest.mark.slow

# The quickstart's QA setting (candidates ranked by MiniLM, trees, refine, read) with SmolLM2 as the reader, one
# round of k = 3 under an 800-token cap to stay fast on a busy CPU: 4 questions, so shard 0/3 holds questions 0
# and 3. llama.cpp's prefix cache is off: what it reuses depends on the questions a process ran before, which
# moves log-probs in their last digits and the prefilled-token counts (docs/how-to/evaluate.md).
QA = ("experiment=quickstart_eval", "llm=llamacpp_smollm2", "llm.cache_prompt=false", "data=hotpotqa", "limit=4",
      "loop.max_rounds=1", "retrieval.k=3", "loop.reader_max_tokens=800")  # fmt: skip
TIMING = ("latency_s", "time_s")  # wall-clock fields: the only ones two runs of the same questions differ in


def evaluate(root: Path, name: str, *extra: str) -> Outcome:
    return run_script("evaluate.py", root / name, f"retrieval.node_cache_dir={root / 'nodes'}", *QA, *extra)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, smollm2_path) -> Path:
    root = tmp_path_factory.mktemp("sharded")
    for name, extra in [("whole", ()), *((f"shard{i}", (f"shard={i}/3",)) for i in range(3))]:
        out = evaluate(root, name, *extra)
        assert out.status == 0, out.stderr[-3000:]
    return root


def merge(out: Path, *shards: Path) -> tuple[int, list[str]]:
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = report(["merge-shards", str(out), *map(str, shards)])
    return status, [line for line in err.getvalue().splitlines() if line.startswith("error:")]


def untimed(recs: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING} for r in recs]


def table_cells(path: Path) -> dict[str, str]:
    """table.md's one row as column -> cell, with its setting line under key ``setting``."""
    text = path.read_text()
    rows = [line.strip("|").split("|") for line in text.splitlines() if line.startswith("|")]
    return {"setting": text.split("\n", 1)[0], **{h.strip(): c.strip() for h, c in zip(rows[0], rows[2])}}


def test_three_shards_merge_into_the_unsharded_run(runs: Path, tmp_path: Path) -> None:
    whole = runs / "whole"
    ids = [r["id"] for r in records(whole)]
    assert len(ids) == 4
    for i in range(3):  # each shard answered exactly its interleaved part of the same questions
        assert [r["id"] for r in records(runs / f"shard{i}")] == ids[i::3]
        assert json.loads((runs / f"shard{i}" / "run.json").read_text())["shard"] == f"{i}/3"
    out = tmp_path / "merged"
    status, errors = merge(out, runs / "shard2", runs / "shard0", runs / "shard1")  # any order
    assert status == 0 and not errors

    assert untimed(records(out)) == untimed(records(whole))  # the same records, in the same order
    from_shards = {r["id"]: r for i in range(3) for r in records(runs / f"shard{i}")}
    assert records(out) == [from_shards[i] for i in ids]  # the shards' records themselves, timing included
    merged, alone = (json.loads((d / "metrics.json").read_text()) for d in (out, whole))
    assert merged.keys() == alone.keys() and merged["eval/n"] == 4
    timing = [k for k in alone if k.startswith("time/") or k == "eval/latency_s"]
    assert {k: v for k, v in merged.items() if k not in timing} == {k: v for k, v in alone.items() if k not in timing}
    # the metrics are the merged records' own, not the shards' averaged: eval/latency_s is their mean
    assert merged["eval/latency_s"] == pytest.approx(sum(r["latency_s"] for r in records(out)) / 4)
    cells, whole_cells = table_cells(out / "table.md"), table_cells(whole / "table.md")
    assert {k: v for k, v in cells.items() if k != "eval/latency_s"} == {
        k: v for k, v in whole_cells.items() if k != "eval/latency_s"
    }
    assert (out / "settings.json").read_bytes() == (whole / "settings.json").read_bytes()
    assert json.loads((out / "run.json").read_text()) == json.loads((whole / "run.json").read_text())
    assert json.loads((out / "question_ids.json").read_text()) == ids
    for name in ("config.yaml", "overrides.yaml"):  # shard: null, no shard= override: the unsharded run's
        assert (out / ".hydra" / name).read_text() == (whole / ".hydra" / name).read_text()
    named = json.loads((out / "merged_shards.json").read_text())["shards"]
    assert [s["shard"] for s in named] == ["0/3", "1/3", "2/3"]
    assert not (out / ".lock").exists()


def test_missing_duplicated_foreign_and_differently_set_shards_are_refused(runs: Path, tmp_path: Path) -> None:
    s0, s1, s2 = (runs / f"shard{i}" for i in range(3))
    other = evaluate(runs, "shard2_other", "shard=2/3", "retrieval.k=2")  # one question, another k
    assert other.status == 0, other.stderr[-3000:]
    cases = {
        "missing": ((s0, s2), "shard 1/3 missing: merging needs all 3 shards"),
        "duplicated": ((s0, s1, s1, s2), f"shard 1/3 given twice: {s1} and {s1}"),
        "not a shard": ((runs / "whole", s1, s2), f"{runs / 'whole'}: not a shard"),
        "other settings": ((s0, s1, runs / "shard2_other"), "were run with other settings: retrieval.k 3 vs 2"),
    }
    for case, (shards, expected) in cases.items():
        out = tmp_path / case.replace(" ", "_")
        status, errors = merge(out, *shards)
        assert status == 2 and len(errors) == 1, (case, errors)
        assert expected in errors[0], (case, errors[0])
        assert not (out / "predictions.jsonl").exists() and not (out / "metrics.json").exists()
    status, errors = merge(s0, s0, s1, s2)  # into one of the shards
    assert status == 2 and errors == [f"error: {s0}: is one of the shards; merge into a new folder"]


def test_a_shard_resumes_in_its_folder_and_refuses_another_shard(runs: Path) -> None:
    folder = runs / "shard0"
    before = (folder / "predictions.jsonl").read_bytes()
    again = evaluate(runs, "shard0", "shard=0/3")  # every question done: nothing is answered again
    assert again.status == 0, again.stderr[-3000:]
    assert (folder / "predictions.jsonl").read_bytes() == before
    other = evaluate(runs, "shard0", "shard=1/3")
    assert other.status == 2
    assert 'its results were made with other settings: shard "0/3" (now "1/3")' in other.stderr
    assert (folder / "predictions.jsonl").read_bytes() == before
    assert json.loads((folder / "run.json").read_text())["shard"] == "0/3"
