"""The frontier study's operating point and verdicts (canopy_lit/studies/frontier.py): chosen on validation tokens only."""

from __future__ import annotations

from pathlib import Path

import pytest

from canopy_lit.report.archive import unpack
from canopy_lit.studies import frontier
from canopy_lit.studies.frontier import render


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
    pts = [point("ottqa", "keep_whole", 100.0, scorer=None, delta=None),
           point("ottqa", "canopy", 80.0, delta=0.0), point("ottqa", "flat_matched", 79.0, delta=0.05),
           point("ottqa", "canopy", 79.0, delta=0.07, k=10)]  # fmt: skip
    assert frontier.choose(pts)["ottqa"]["fθ"]["candidates"] == {"0": 0.8}


def test_the_zero_shot_delta_is_the_median_of_the_in_domain_choices_not_its_own_data() -> None:
    pts = []
    for bench, own in (("hotpotqa", 0.06), ("nq", 0.04), ("ottqa", 0.04)):
        pts += [point(bench, "keep_whole", 100.0, scorer=None, delta=None), point(bench, "canopy", 79.0, delta=own),
                point(bench, "canopy", 40.0, delta=0.0), point(bench, "canopy", 60.0, delta=0.02)]  # fmt: skip
    # TAT-QA's own validation runs would choose δ = 0.12 (79%) and the 40% budget at 0.01: never used
    pts += [point("tatqa", "keep_whole", 100.0, scorer=None, delta=None), point("tatqa", "canopy", 79.0, delta=0.12),
            point("tatqa", "canopy", 40.0, delta=0.01), point("tatqa", "canopy", 95.0, delta=0.04)]  # fmt: skip
    chosen = frontier.choose(pts)
    assert chosen["hotpotqa"]["fθ"]["budgets"] == {"0.4": 0.0, "0.6": 0.02, "0.8": 0.06}
    zero_shot = chosen["tatqa"]["fθ"]
    assert zero_shot["delta"] == 0.04  # the median of 0.06, 0.04, 0.04
    assert zero_shot["pooled_from"] == {"hotpotqa": 0.06, "nq": 0.04, "ottqa": 0.04}
    assert zero_shot["budgets"] == {"0.4": 0.0, "0.6": 0.02, "0.8": 0.04}
    assert "candidates" not in zero_shot and "f0" not in chosen["tatqa"]  # no in-domain f0 runs: no f0 choice
    assert "median of the in-domain choices" in frontier.chosen_on(zero_shot)
    assert frontier.chosen_on(chosen["nq"]["fθ"]) == "100 validation questions"


@pytest.mark.parametrize(("low", "high", "expected"), [(0.01, 0.2, "wins"), (-0.2, -0.01, "loses"), (-0.1, 0.1, "ties")])
def test_a_verdict_needs_the_paired_interval_to_exclude_zero(low: float, high: float, expected: str) -> None:
    assert frontier.verdict({"answer_recall_diff_ci_low": low, "answer_recall_diff_ci_high": high}) == expected


@pytest.fixture(scope="module")
def committed_points(tmp_path_factory: pytest.TempPathFactory) -> list[frontier.Point]:
    """The committed test-split runs of the study (experiments/runs/frontier.zip), unpacked apart."""
    dest = tmp_path_factory.mktemp("frontier") / "frontier"
    unpack(frontier.ROOT / frontier.TEST.with_suffix(".zip"), dest)
    return frontier.load_points(dest)


@pytest.fixture(scope="module")
def committed_choice(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The choice remade from the committed validation runs (experiments/runs/frontier_val.zip)."""
    dest = tmp_path_factory.mktemp("frontier_val") / "frontier_val"
    unpack(frontier.ROOT / frontier.VAL.with_suffix(".zip"), dest)
    return frontier.choose(frontier.load_points(dest))


def test_each_budget_pairs_canopy_with_flat_at_its_delta_and_the_nearest_fewer_whole_items(
    committed_points: list[frontier.Point], committed_choice: dict
) -> None:
    rows = frontier.budget_rows(committed_points, committed_choice)
    assert {r["benchmark"] for r in rows} == set(frontier.BENCHMARKS)
    seen = set()
    for r in rows:
        canopy, kw = r["canopy"], r["keep_whole"]
        # the δ is the validation choice of each of the row's budgets, and no run is shown twice
        assert {committed_choice[r["benchmark"]]["fθ"]["budgets"][f"{b:g}"] for b in r["budgets"]} == {canopy.delta}
        assert (r["benchmark"], canopy.delta) not in seen
        seen.add((r["benchmark"], canopy.delta))
        assert (r["flat"].method, r["flat"].scorer, r["flat"].delta) == ("flat_matched", "fθ", canopy.delta)
        fewer = [p for p in committed_points if p.benchmark == canopy.benchmark and p.method == "keep_whole"
                 and p.k < 5 and p.tokens < kw.tokens]  # fmt: skip
        # paired over every test question, and the difference is the runs' own answer-recall difference
        assert r["vs_flat"]["n"] == canopy.metric("n")
        expected = canopy.metric("answer_recall") - r["flat"].metric("answer_recall")
        assert r["vs_flat"]["answer_recall_diff"] == pytest.approx(expected, abs=1e-9)
        if not fewer:  # NQ: one candidate a question, so every k delivers keep-whole k = 5's tokens
            assert "kw_fewer" not in r and r["benchmark"] == "nq"
            continue
        assert r["kw_fewer"].k < 5 and r["kw_fewer"].tokens < kw.tokens
        assert abs(r["kw_fewer"].tokens - canopy.tokens) == min(abs(p.tokens - canopy.tokens) for p in fewer)


def test_the_headline_shows_each_budget_run_once_with_its_test_share_and_the_measured_n(
    committed_points: list[frontier.Point], committed_choice: dict
) -> None:
    budgets = frontier.budget_rows(committed_points, committed_choice)
    operating = frontier.operating_rows(committed_points, committed_choice)
    lines = {line.split(" (")[0].strip("| "): line for line in frontier.headline(budgets, operating, 0).splitlines()}
    hotpot = lines["HotpotQA"]
    assert hotpot.startswith("| HotpotQA (95 of 100) |")  # 5 yes/no questions have no answer to find
    assert "8 validation questions" in hotpot
    assert "median of the in-domain choices" in lines["TAT-QA"]
    for bench, name in frontier.BENCHMARKS.items():
        rows = [r for r in budgets if r["benchmark"] == bench]
        shares = [f"({render._share(r)})" for r in rows]
        assert len({r["canopy"].folder for r in rows}) == len(rows)  # one run, one cell
        assert all(share in lines[name.split(" (")[0]] for share in shares)
    nq_bullet = next(line for line in lines.values() if line.startswith("- **NQ**"))
    assert "no fewer tokens than at k = 5" in nq_bullet


def test_every_point_shows_the_questions_its_answer_recall_is_over(committed_points: list[frontier.Point]) -> None:
    """Was: n = 100 beside HotpotQA's answer recall, which is over the 95 questions with an answer to find."""
    rows = [line.split(" | ") for line in frontier.render_points(committed_points).splitlines()[2:]]
    hotpot = {row[3] for row in rows if row[0] == "| HotpotQA"}
    assert hotpot == {"95 of 100"}
    for point in committed_points:
        n, measurable = int(point.metric("n")), int(point.metric("answer_recall_n"))
        assert (f"{measurable} of {n}" if measurable != n else str(n)) in {row[3] for row in rows}


def test_item_drop_pairs_with_canopy_at_its_delta_and_drops_nothing_where_one_item_is_delivered(
    committed_points: list[frontier.Point],
) -> None:
    rows = frontier.item_drop_rows(committed_points)
    assert {r["point"].benchmark for r in rows} == set(frontier.BENCHMARKS)
    for r in rows:
        p, base = r["point"], r["base"]
        assert p.method == "item_drop" and p.item_margin is not None and p.item_margin >= 0
        assert (base.method, base.scorer, base.delta, base.k) == ("canopy", p.scorer, p.delta, p.k)
        delivered, dropped = r["items"]
        assert 0 <= dropped < delivered  # the best item always keeps a region
        assert p.tokens <= base.tokens + 1e-9  # dropping never adds evidence
        if p.benchmark == "nq":  # one candidate a question: nothing to drop, the same evidence
            assert dropped == 0 and r["vs_base"]["answer_recall_diff"] == 0
    by_margin = {}
    for r in rows:
        by_margin.setdefault(r["point"].benchmark, []).append((r["point"].item_margin, r["items"][1]))
    for pairs in by_margin.values():  # a larger margin drops fewer items
        drops = [d for _, d in sorted(pairs)]
        assert drops == sorted(drops, reverse=True)


def test_longllmlingua_points_name_their_rate_and_compressor_lm(committed_points: list[frontier.Point]) -> None:
    lingua = [p for p in committed_points if p.method == "longllmlingua"]
    assert {p.benchmark for p in lingua} >= {"hotpotqa", "nq"}
    for p in lingua:
        assert p.rate in (0.3, 0.55, 0.8) and p.scorer is None and p.delta is None
        assert frontier.method_label(p) == "LongLLMLingua (SmolLM2-135M)"
        assert render._setting(p) == f"ρ = {p.rate:g}"
