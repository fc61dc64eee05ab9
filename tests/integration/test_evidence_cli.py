"""``python evaluate.py experiment=evidence`` end to end on bundled HotpotQA with the real MiniLM, no LLM."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("answer_recall", "answer_recall_content", "gold_recall", "item_recall", "tokens", "kept_ratio")


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_evidence_runs_canopy_and_matched_flat_then_tables_and_plot(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    cmd = [
        sys.executable,
        str(ROOT / "evaluate.py"),
        "-m",
        "experiment=evidence",
        "data=hotpotqa",
        "limit=3",
        "refine=parent_relative,flat_matched",
        "llm=llamacpp_smollm2",  # its tokenizer counts the tokens (a small GGUF: quick to read)
        f"hydra.sweep.dir={sweep}",
        "hydra.sweep.subdir=${hydra.job.num}",
        f"retrieval.node_cache_dir={tmp_path / 'nodes'}",
        "progress=false",
    ]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    runs = {"parent_relative": sweep / "0", "flat_matched": sweep / "1"}  # jobs in sweep order
    recs = {}
    for name, run in runs.items():
        metrics = json.loads((run / "metrics.json").read_text())
        assert metrics["evidence/n"] == 3 and metrics["evidence/failed"] == 0
        for key in KEYS:
            assert metrics[f"evidence/{key}"] >= 0 and f"evidence/{key}_ci_low" in metrics, (name, key)
        assert metrics["evidence/tokens"] > 0 and metrics["evidence/kept_ratio"] <= 1
        assert metrics["evidence/answer_recall_content"] <= metrics["evidence/answer_recall"]
        assert metrics["evidence/truncated_items"] == 0 and metrics["evidence/tokens_before_cap"] == metrics["evidence/tokens"]
        recs[name] = {r["id"]: r for r in lines(run / "predictions.jsonl")}
        assert len(recs[name]) == 3
        for r in recs[name].values():
            assert r["prediction"] == "" and len(r["rounds"]) == 1 and len(r["rounds"][0]["retrieved"]) == 5
            assert r["evidence"]["tokens"] == r["evidence_tokens"] == r["scores"]["tokens"]
            assert "em" not in r["scores"]  # no reader: no EM / F1 of an empty prediction
            delivered = [k for k in r["rounds"][0]["kept"] if k["leaf_ranges"]]
            assert sum(k["delivered_tokens"] for k in delivered) == r["evidence_tokens"]
            assert all(k["cap"] == "whole" and k["delivered_ranges"] == k["leaf_ranges"] for k in delivered)
    # Same questions, same retrieved items; flat top leaves stay within CANOPY's tokens for each question.
    for qid, canopy in recs["parent_relative"].items():
        flat = recs["flat_matched"][qid]
        assert flat["rounds"][0]["retrieved"] == canopy["rounds"][0]["retrieved"]
        assert flat["evidence"]["budget_tokens"] == canopy["evidence"]["tokens"]
        assert 0 < flat["evidence"]["tokens"] <= canopy["evidence"]["tokens"]

    from canopy_lit.report.plots import plot_answer_recall_vs_tokens
    from canopy_lit.report.runs import find_runs
    from canopy_lit.report.tables import write_tables

    found = find_runs([sweep])
    assert {r.mode for r in found} == {"evidence"}
    md = write_tables(found, tmp_path / "tables")
    text = next(iter(md.values())).read_text()
    assert "answer recall" in text and "parent_relative (f0)" in text and "flat_matched (f0)" in text
    assert "| answer recall | 95% CI | answer recall w/o titles/headers | 95% CI |" in text
    png = plot_answer_recall_vs_tokens(found, tmp_path / "plot.png")
    assert png is not None and png.stat().st_size > 10_000
