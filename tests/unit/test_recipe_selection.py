"""The recipe study's validation selection (experiments/recipe.py): pooled accuracy and the recall-constrained choice."""

from __future__ import annotations

import pytest

from experiments.recipe import choose_margin, pooled, select, selection_grid, selection_table


def _run(scorer: str, delta: float, bench: str, acc: float, n: int, recall: float, ratio: float, split: str = "val") -> dict:
    m = {"probe/decision_accuracy": acc, "probe/n_nodes": n, "probe/gold_recall": recall, "probe/kept_token_ratio": ratio,
         "probe/decision_accuracy/stop": 0.5, "probe/n_nodes/stop": 2}  # fmt: skip
    return {"split": split, "scorer": scorer, "benchmark": bench, "delta": delta, "m": m}


def test_pooled_weights_benchmarks_by_their_decision_counts() -> None:
    acc, n = pooled([_run("a", 0, "nq", 0.8, 300, 0, 0)["m"], _run("a", 0, "ottqa", 0.2, 100, 0, 0)["m"]])
    assert n == 400 and acc == pytest.approx(0.65)  # a plain mean would say 0.5


def test_recall_constrained_choice_skips_adapters_that_lose_gold() -> None:
    runs = [
        _run("f0", 0.0, "nq", 0.40, 200, 0.80, 0.60), _run("f0", 0.0, "ottqa", 0.40, 100, 0.70, 0.55),
        # sharp: the best accuracy at δ = 0, but below f0's recall on NQ at every δ
        _run("sharp", 0.0, "nq", 0.70, 200, 0.70, 0.40), _run("sharp", 0.0, "ottqa", 0.50, 100, 0.75, 0.45),
        _run("sharp", 0.02, "nq", 0.50, 200, 0.79, 0.60), _run("sharp", 0.02, "ottqa", 0.40, 100, 0.80, 0.60),
        # calm: less accurate at δ = 0, keeps the gold at δ = 0.01 with fewer tokens than f0
        _run("calm", 0.0, "nq", 0.60, 200, 0.78, 0.50), _run("calm", 0.0, "ottqa", 0.45, 100, 0.69, 0.50),
        _run("calm", 0.01, "nq", 0.55, 200, 0.81, 0.54), _run("calm", 0.01, "ottqa", 0.42, 100, 0.72, 0.53),
        _run("calm", 0.01, "nq", 0.99, 200, 0.99, 0.10, split="test"),  # test runs never select
        _run("partial", 0.0, "nq", 0.99, 200, 0.99, 0.10),  # no OTT-QA run: not comparable, left out
    ]
    grid = selection_grid(runs)
    assert {(g["scorer"], g["delta"]) for g in grid} == {("f0", 0.0), ("sharp", 0.0), ("sharp", 0.02), ("calm", 0.0), ("calm", 0.01)}
    assert select(grid, recall_constrained=False)["scorer"] == "sharp"
    best = select(grid, recall_constrained=True)
    assert (best["scorer"], best["delta"], best["meets_tokens"]) == ("calm", 0.01, True)
    text = selection_table(grid)
    assert "`sharp` at δ = 0" in text and "`calm` at δ = 0.01" in text
    # the δ-sweep rule reads the same grid: the smallest δ that keeps f0's recall, per scorer
    assert (choose_margin(runs, "sharp"), choose_margin(runs, "calm"), choose_margin(runs, "partial")) == (None, 0.01, None)


def test_no_feasible_choice_is_said_plainly() -> None:
    runs = [_run("f0", 0.0, b, 0.4, 10, 0.9, 0.6) for b in ("nq", "ottqa")]
    runs += [_run("ft", 0.0, b, 0.6, 10, 0.5, 0.4) for b in ("nq", "ottqa")]
    grid = selection_grid(runs)
    assert select(grid, recall_constrained=True) is None
    assert "with recall ≥ f0 (any δ): none of the grid" in selection_table(grid)
