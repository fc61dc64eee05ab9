"""canopy_lit/studies/paired.py's token split: the operating point's loop tokens = what the loop retrieved x the
share refinement kept, beside the share the same δ keeps in the frontier's single round."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from canopy_lit.studies.paired import token_rows  # noqa: E402


def _kept(item: str, item_tokens: int, delivered: int, legacy: bool = False) -> dict:
    kept = {"item_id": item, "item_tokens": item_tokens, "kept_tokens": delivered}
    return kept if legacy else kept | {"delivered_tokens": delivered}


def _write(folder: Path, run: dict, records: list[dict]) -> None:
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps(run))
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def _record(qid: str, rounds: list[list[dict]]) -> dict:
    tokens = sum(k.get("delivered_tokens", k["kept_tokens"]) for r in rounds for k in r)
    return {"id": qid, "status": "ok", "rounds": [{"retrieved": [k["item_id"] for k in r], "kept": r} for r in rounds], "evidence_tokens": tokens}


def test_loop_tokens_split_into_retrieved_and_kept_share(tmp_path: Path) -> None:
    paired, frontier = tmp_path / "paired", tmp_path / "frontier"
    op_run = {"benchmark": "nq", "descend_margin": 0.04, "adapter_hash": "a1"}
    _write(paired / "nq" / "canopy_op", op_run, [
        _record("q1", [[_kept("nq:a", 100, 80), _kept("ottqa:b", 100, 100)], [_kept("nq:c", 200, 100)]]),
        _record("q2", [[_kept("nq:d", 100, 90)]]),
    ])  # fmt: skip
    _write(paired / "nq" / "no_projection", {"benchmark": "nq"}, [
        _record("q1", [[_kept("nq:a", 100, 100, legacy=True), _kept("ottqa:b", 100, 100, legacy=True)]]),
        _record("q2", [[_kept("nq:d", 100, 100, legacy=True)]]),
        _record("q3", [[_kept("nq:e", 100, 100, legacy=True)]]),  # not in the op run: not paired
    ])  # fmt: skip
    front = {"benchmark": "nq", "refine": "parent_relative", "scorer": "fθ", "k": 5, "variant": "full", "adapter_hash": "a1"}
    _write(frontier / "other_delta", front | {"descend_margin": 0.06}, [_record("q1", [[_kept("nq:a", 100, 1)]])])
    # CANOPY with item drop at the same δ (listed first): not the refinement the loop ran, never read
    _write(frontier / "item_drop", front | {"descend_margin": 0.04, "item_margin": 0.05}, [
        _record("q1", [[_kept("nq:a", 100, 1)]]), _record("q2", [[_kept("nq:d", 100, 1)]]),
    ])  # fmt: skip
    _write(frontier / "same_delta", front | {"descend_margin": 0.04}, [
        _record("q1", [[_kept("nq:a", 100, 50)]]), _record("q2", [[_kept("nq:d", 100, 100)]]),
    ])  # fmt: skip

    [row] = token_rows(paired, frontier)
    assert row[:4] == ["NQ", "2", "0.04", "1.50 / 1.00"]
    assert row[4] == "250 / 150 (1.67)"  # (400 + 100) / 2 against (200 + 100) / 2
    assert row[5] == "75%"  # 3 of 4 loop items come from NQ itself
    assert row[6] == "90% / 74%"  # round 1: 270 / 300; all rounds: 370 / 500
    # loop items the frontier also ranked in its top 5 (nq:a, nq:d): 170 / 200; the others: 200 / 300
    assert row[7] == "85% (2) / 67% (2)"
    assert row[8] == "75%"  # the frontier run of the same δ: 150 / 200
    assert row[9] == "185 / 150 (1.23)"  # = 1.67 x 0.74


def test_no_rows_without_a_frontier_run_of_the_same_adapter(tmp_path: Path) -> None:
    paired, frontier = tmp_path / "paired", tmp_path / "frontier"
    _write(paired / "nq" / "canopy_op", {"benchmark": "nq", "descend_margin": 0.04, "adapter_hash": "a1"},
           [_record("q1", [[_kept("nq:a", 100, 80)]])])  # fmt: skip
    _write(paired / "nq" / "no_projection", {"benchmark": "nq"}, [_record("q1", [[_kept("nq:a", 100, 100)]])])
    front = {"benchmark": "nq", "refine": "parent_relative", "scorer": "fθ", "k": 5, "variant": "full"}
    _write(frontier / "run", front | {"descend_margin": 0.04, "adapter_hash": "other"}, [_record("q1", [[_kept("nq:a", 100, 50)]])])
    assert token_rows(paired, frontier) == []
