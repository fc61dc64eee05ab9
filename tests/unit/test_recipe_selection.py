"""The recipe study's validation selection (canopy_lit/studies/recipe.py): pooled accuracy, the recall-constrained
choice, and rule (c)'s paired recall margin."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from canopy_lit.studies.recipe import (
    _overrides,
    choose_margin,
    mpnet_selection,
    paired_diff,
    paired_test_table,
    pooled,
    question_rows,
    select,
    selection_grid,
    selection_table,
)


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
    assert select(grid, "paper")["scorer"] == "sharp"
    best = select(grid, "recall")
    assert (best["scorer"], best["delta"], best["meets_tokens"]) == ("calm", 0.01, True)
    text = selection_table(grid)
    assert "`sharp` at δ = 0" in text and "`calm` at δ = 0.01" in text
    # the δ-sweep rule reads the same grid: the smallest δ that keeps f0's recall, per scorer
    assert (choose_margin(runs, "sharp"), choose_margin(runs, "calm"), choose_margin(runs, "partial")) == (None, 0.01, None)


def test_no_feasible_choice_is_said_plainly() -> None:
    runs = [_run("f0", 0.0, b, 0.4, 10, 0.9, 0.6) for b in ("nq", "ottqa")]
    runs += [_run("ft", 0.0, b, 0.6, 10, 0.5, 0.4) for b in ("nq", "ottqa")]
    grid = selection_grid(runs)
    assert select(grid, "recall") is None
    assert "with recall ≥ f0 (any δ): none of the grid" in selection_table(grid)


def _probe_dir(tmp: Path, name: str, kept: list[int], correct: list[int] | None = None) -> Path:
    """A probe run folder's probe_questions.jsonl: one gold leaf per question, kept or not."""
    d = tmp / name
    d.mkdir()
    rows = [{"question": f"q{i}", "gold_leaves": 1, "gold_leaves_kept": k, "kept_tokens": 5, "whole_tokens": 10,
             "decisions": 1, "decisions_correct": (correct or kept)[i]} for i, k in enumerate(kept)]  # fmt: skip
    (d / "probe_questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def test_rule_c_needs_a_paired_recall_margin_not_a_tie(tmp_path: Path) -> None:
    n = 200
    f0 = [1] * 160 + [0] * 40  # 80% recall
    tie = [1] * 150 + [0] * 10 + [1] * 10 + [0] * 30  # 80%: loses 10 of f0's questions, wins 10 others
    ahead = [1] * 160 + [1] * 16 + [0] * 24  # 88%: every f0 question and 16 more
    dirs = {name: _probe_dir(tmp_path, name, kept) for name, kept in (("f0", f0), ("tie", tie), ("ahead", ahead))}
    runs = []
    for name, acc in (("f0", 0.40), ("tie", 0.60), ("ahead", 0.50)):
        for b in ("nq", "ottqa"):
            r = _run(name, 0.0, b, acc, n, sum({"f0": f0, "tie": tie, "ahead": ahead}[name]) / n, 0.5)
            runs.append({**r, "dir": dirs[name]})
    grid = selection_grid(runs)
    by = {g["scorer"]: g for g in grid}
    assert by["tie"]["keeps_recall"] and not by["tie"]["margin_ok"]  # rule (b) takes a tie, rule (c) does not
    assert by["ahead"]["margin_ok"] and by["ahead"]["recall_ci"]["nq"][1] > 0
    assert select(grid, "recall")["scorer"] == "tie" and select(grid, "margin")["scorer"] == "ahead"
    assert "rule (c)): `ahead` at δ = 0" in selection_table(grid)
    with pytest.raises(ValueError, match="unknown selection rule"):
        select(grid, "best")
    # the same margin with too many tokens does not qualify
    fat = [{**r, "m": {**r["m"], "probe/kept_token_ratio": 0.6}} if r["scorer"] == "ahead" else r for r in runs]
    assert select(selection_grid(fat), "margin") is None


def test_paired_comparison_refuses_different_questions(tmp_path: Path) -> None:
    a = question_rows(_probe_dir(tmp_path, "a", [1, 0, 1]))
    b = question_rows(_probe_dir(tmp_path, "b", [1, 1]))
    with pytest.raises(ValueError, match="different questions"):
        paired_diff(a, b)
    assert paired_diff(a, None) is None and question_rows(tmp_path / "missing") is None


def test_paired_test_table_rows_against_f0(tmp_path: Path) -> None:
    f0 = _probe_dir(tmp_path, "f0", [1] * 30 + [0] * 10, correct=[0] * 40)
    ft = _probe_dir(tmp_path, "ft", [1] * 20 + [0] * 20, correct=[1] * 40)
    runs = [{**_run("f0", 0.0, "nq", 0, 40, 0.75, 0.5, split="test"), "dir": f0},
            {**_run("ftheta_x", 0.01, "nq", 1, 40, 0.5, 0.5, split="test"), "dir": ft}]  # fmt: skip
    table = paired_test_table(runs, runs)
    assert "| nq | ftheta_x | 0.01 | 40 | +100.0 [+100.0, +100.0] | -25.0 [" in table
    assert "| nq | f0 |" not in table


def test_recipe_rows_name_another_experiment_preset(tmp_path: Path) -> None:
    # A row trained with experiment=quickstart_mpnet is not "(quickstart default)": the preset is its point.
    for name, overrides in (("base", []), ("mpnet", ["experiment=quickstart_mpnet"]), ("r16", ["model.lora_r=16"])):
        (tmp_path / name / ".hydra").mkdir(parents=True)
        common = ["experiment=quickstart", "trainer.max_time=null", "hydra.run.dir=x"]
        (tmp_path / name / ".hydra" / "overrides.yaml").write_text(json.dumps(common + overrides))
    assert _overrides(tmp_path / "base") == "(quickstart default)"
    assert _overrides(tmp_path / "mpnet") == "`experiment=quickstart_mpnet`"
    assert _overrides(tmp_path / "r16") == "`model.lora_r=16`"


def test_mpnet_grid_is_read_against_its_own_f0_and_minilms() -> None:
    minilm = [_run("f0", 0.0, "nq", 0.40, 200, 0.80, 0.60), _run("f0", 0.0, "ottqa", 0.40, 100, 0.70, 0.55),
              _run("base", 0.0, "nq", 0.90, 200, 0.99, 0.30), _run("base", 0.0, "ottqa", 0.90, 100, 0.99, 0.30)]
    mpnet = [_run("f0", 0.0, "nq", 0.45, 200, 0.85, 0.60), _run("f0", 0.0, "ottqa", 0.45, 100, 0.75, 0.55),
             _run("mpnet", 0.0, "nq", 0.60, 200, 0.82, 0.50), _run("mpnet", 0.0, "ottqa", 0.60, 100, 0.72, 0.50)]  # fmt: skip
    own, vs_minilm = mpnet_selection(minilm, mpnet).split("against MiniLM's f0")
    # against its own f0 the adapter loses gold (0.82 < 0.85); against MiniLM's f0 it keeps it (0.82 >= 0.80)
    assert "| mpnet | 0 | 60.0 (300) | 50.0 (4) | 82.0 / 0.500 | 72.0 / 0.500 | no |" in own
    assert "Selected on validation by accuracy at δ = 0: `mpnet`" in own
    assert "| ftheta_mpnet | 0 | 60.0 (300) | 50.0 (4) | 82.0 / 0.500 | 72.0 / 0.500 | yes | yes |" in vs_minilm
    assert "| mpnet_f0 |" in vs_minilm and "| base |" not in vs_minilm and "Selected" not in vs_minilm
