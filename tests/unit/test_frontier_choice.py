"""The frontier study's operating point and verdicts (experiments/frontier.py): chosen on validation tokens only."""

from __future__ import annotations

from pathlib import Path

import pytest

from canopy_lit.report.archive import unpack
from experiments import frontier


def point(bench: str, method: str, tokens: float, scorer: str | None = "fθ", delta: float | None = 0.0, k: int = 5,
          recall: float = 0.5) -> frontier.Point:  # fmt: skip
    return frontier.Point(Path("."), bench, method, scorer, delta, k, None,
                          {"evidence/tokens": tokens, "evidence/answer_recall": recall, "evidence/n": 100.0})  # fmt: skip


def test_the_delta_nearest_79_percent_inside_the_band_is_chosen_per_benchmark_and_scorer() -> None:
    pts = [point("nq", "keep_whole", 100.0, scorer=None, delta=None)]
    pts += [point("nq", "canopy", t, delta=d) for d, t in ((0.0, 50.0), (0.02, 75.0), (0.04, 85.0), (0.08, 97.0))]
    pts += [point("nq", "canopy", t, scorer="f0", delta=d) for d, t in ((0.0, 70.0), (0.01, 81.0))]
    chosen = frontier.choose(pts)
    assert chosen["nq"]["fθ"]["delta"] == 0.02  # 75% and 85% are both in the band; 75% is nearer 79%
    assert chosen["nq"]["fθ"]["in_band"] is True
    assert chosen["nq"]["f0"]["delta"] == 0.01
    assert chosen["nq"]["fθ"]["candidates"] == {"0": 0.5, "0.02": 0.75, "0.04": 0.85, "0.08": 0.97}
    assert "hotpotqa" not in chosen  # no keep-whole point: nothing to compare with


def test_without_a_delta_in_the_band_the_nearest_is_taken_and_flagged() -> None:
    pts = [point("ottqa", "keep_whole", 1000.0, scorer=None, delta=None)]
    pts += [point("ottqa", "canopy", t, delta=d) for d, t in ((0.0, 400.0), (0.01, 600.0), (0.12, 950.0))]
    op = frontier.choose(pts)["ottqa"]["fθ"]
    assert (op["delta"], op["in_band"]) == (0.12, False)  # 95% is nearer 79% than 60%


def test_flat_and_keep_whole_points_and_other_k_never_enter_the_choice() -> None:
    pts = [point("tatqa", "keep_whole", 100.0, scorer=None, delta=None),
           point("tatqa", "canopy", 80.0, delta=0.0), point("tatqa", "flat_matched", 79.0, delta=0.05),
           point("tatqa", "canopy", 79.0, delta=0.07, k=10)]  # fmt: skip
    assert frontier.choose(pts)["tatqa"]["fθ"]["candidates"] == {"0": 0.8}


@pytest.mark.parametrize(("low", "high", "expected"), [(0.01, 0.2, "wins"), (-0.2, -0.01, "loses"), (-0.1, 0.1, "ties")])
def test_a_verdict_needs_the_paired_interval_to_exclude_zero(low: float, high: float, expected: str) -> None:
    assert frontier.verdict({"answer_recall_diff_ci_low": low, "answer_recall_diff_ci_high": high}) == expected


@pytest.fixture(scope="module")
def committed_points(tmp_path_factory: pytest.TempPathFactory) -> list[frontier.Point]:
    """The committed test-split runs of the study (experiments/runs/frontier.zip), unpacked apart."""
    dest = tmp_path_factory.mktemp("frontier") / "frontier"
    unpack(frontier.ROOT / frontier.TEST.with_suffix(".zip"), dest)
    return frontier.load_points(dest)


def test_each_budget_pairs_canopy_with_flat_at_its_delta_and_the_nearest_fewer_whole_items(
    committed_points: list[frontier.Point],
) -> None:
    rows = frontier.budget_rows(committed_points)
    assert {r["benchmark"] for r in rows} == set(frontier.BENCHMARKS)
    for r in rows:
        canopy, kw = r["canopy"], r["keep_whole"]
        sweep = frontier.canopy_points(committed_points, r["benchmark"], "fθ")
        assert canopy.tokens / kw.tokens == pytest.approx(
            min((p.tokens / kw.tokens for p in sweep), key=lambda x: abs(x - r["budget"]))
        )
        assert (r["flat"].method, r["flat"].scorer, r["flat"].delta) == ("flat_matched", "fθ", canopy.delta)
        fewer = [p for p in committed_points if p.benchmark == canopy.benchmark and p.method == "keep_whole" and p.k < 5]
        assert r["kw_fewer"].k < 5
        assert abs(r["kw_fewer"].tokens - canopy.tokens) == min(abs(p.tokens - canopy.tokens) for p in fewer)
        # paired over every test question, and the difference is the runs' own answer-recall difference
        assert r["vs_flat"]["n"] == canopy.metric("n")
        expected = canopy.metric("answer_recall") - r["flat"].metric("answer_recall")
        assert r["vs_flat"]["answer_recall_diff"] == pytest.approx(expected, abs=1e-9)
