"""Our answer metrics and CIs against library implementations on the bundled questions.

- EM / F1 equal torchmetrics' SQuAD (offline; ``evaluate``'s squad metric fetches its script from
  the hub) per example, on predictions made from the gold answers by deterministic perturbations;
  HotpotQA's yes/no rule (not in SQuAD) is left out explicitly.
- Match (BERGEN): by hand and on the same predictions.
- ``bootstrap_ci`` / ``paired_bootstrap_ci`` are ``scipy.stats.bootstrap``.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from canopy_lit.eval.summary import score_record, summarize
from canopy_lit.metrics import (
    bootstrap_ci,
    exact_match,
    f1_score,
    match_score,
    normalize_answer,
    paired_bootstrap_ci,
    paired_ratio_bootstrap_ci,
    ratio_bootstrap_ci,
)

YES_NO = {"yes", "no", "noanswer"}  # HotpotQA's official F1 scores these 0 unless exact: not SQuAD


def perturbations(answer: str, other: str) -> list[str]:
    """Deterministic predictions around a gold answer: exact, case/punctuation, wrapped, cut, padded, wrong."""
    words = answer.split()
    return [
        answer,
        answer.upper() + ".",
        f"The answer is {answer}",
        f"the {answer}!",
        " ".join(words[: max(1, len(words) // 2)]),
        " ".join(words[1:]),
        f"{answer} and {other}",
        other,
        "",
    ]


@pytest.fixture(scope="module")
def bundled_questions():
    from canopy_lit.data import load_benchmark

    hp = load_benchmark("hotpotqa").questions
    nq = load_benchmark("nq").questions[:100]
    return [q for q in [*hp, *nq] if q.answers]


@pytest.fixture(scope="module")
def cases(bundled_questions):
    qs = bundled_questions
    out = []
    for i, q in enumerate(qs):
        other = qs[(i + 7) % len(qs)].answers[0]
        for kind, pred in enumerate(perturbations(q.answers[0], other)):
            out.append((f"{q.id}:{kind}", pred, list(q.answers)))
    return out


def _squad(rows: list[tuple[str, str, list[str]]]) -> tuple[float, float]:
    from torchmetrics.functional.text import squad

    ref = squad(
        [{"prediction_text": pred, "id": qid} for qid, pred, _ in rows],
        [{"answers": {"answer_start": [0] * len(a), "text": a}, "id": qid} for qid, _, a in rows],
    )
    return float(ref["exact_match"]) / 100, float(ref["f1"]) / 100


def test_em_f1_equal_torchmetrics_squad(cases) -> None:
    # the HotpotQA yes/no rule differs from SQuAD by design: those cases are left out
    kept = [c for c in cases if not {normalize_answer(c[1]), *map(normalize_answer, c[2])} & YES_NO]
    assert len(kept) > 2000 and len(kept) > 0.8 * len(cases)  # the comparison covers the bundled questions
    # per example on a slice (one library call each) ...
    for row in kept[:300]:
        em, f1 = _squad([row])
        assert exact_match(row[1], row[2]) == pytest.approx(em), row
        assert f1_score(row[1], row[2]) == pytest.approx(f1, abs=1e-5), row
    # ... and per perturbation kind over all of them (one batched call each)
    for kind in range(len(perturbations("a", "b"))):
        rows = [c for c in kept if int(c[0].rsplit(":", 1)[1]) == kind]
        em, f1 = _squad(rows)
        assert np.mean([exact_match(p, a) for _, p, a in rows]) == pytest.approx(em, abs=1e-5), kind
        assert np.mean([f1_score(p, a) for _, p, a in rows]) == pytest.approx(f1, abs=1e-5), kind


def test_match_by_hand_and_on_bundled_predictions(cases) -> None:
    assert match_score("It was the Eiffel Tower, of course", ["eiffel tower"]) == 1.0
    assert match_score("Eiffel", ["Eiffel Tower"]) == 0.0
    assert match_score("in 1990", ["1"]) == 1.0  # plain substring, as BERGEN computes it
    assert match_score("anything", ["", "the"]) == 0.0  # golds that normalise to "" never match
    assert match_score("", ["Paris"]) == 0.0
    for _, pred, answers in cases:
        m = match_score(pred, answers)
        if exact_match(pred, answers):
            assert m == 1.0  # EM implies Match
        if pred.startswith(("The answer is ", f"{answers[0]} and ")):
            assert m == 1.0, (pred, answers)


def test_score_record_and_summary_report_match_with_ci() -> None:
    rec = {"prediction": "The answer is Paris.", "answers": ["Paris"], "status": "ok"}
    assert score_record(rec) == {"em": 0.0, "f1": 0.5, "match": 1.0}  # "answer is paris": P 1/3, R 1
    recs = [
        {"status": "ok", "scores": score_record({"prediction": p, "answers": ["Paris"]})}
        for p in ["Paris", "It is Paris", "London", "Paris, France", "Rome", "paris"]
    ]
    m = summarize(recs)
    assert m["eval/match"] == pytest.approx(4 / 6) and m["eval/em"] == pytest.approx(2 / 6)
    assert m["eval/match_ci_low"] <= m["eval/match"] <= m["eval/match_ci_high"]


def test_bootstrap_ci_is_scipy_bootstrap() -> None:
    x = np.random.default_rng(1).integers(0, 2, size=40).astype(float)
    for method in ("BCa", "percentile"):
        ref = stats.bootstrap(
            (x,), np.mean, n_resamples=1000, method=method, rng=np.random.default_rng(0), vectorized=True
        ).confidence_interval
        assert bootstrap_ci(x, method=method) == pytest.approx((ref.low, ref.high))
    assert bootstrap_ci(x) == bootstrap_ci(list(x))  # deterministic for a seed
    assert bootstrap_ci(x, seed=1) != bootstrap_ci(x, seed=0)


def test_bootstrap_degenerate_inputs() -> None:
    assert all(np.isnan(bootstrap_ci([])))
    assert bootstrap_ci([0.4]) == (0.4, 0.4)
    assert bootstrap_ci([1.0] * 8) == (1.0, 1.0)  # scipy alone warns and returns nan here
    lo, hi = bootstrap_ci([0, 0, 0, 0, 0, 0, 0, 1])  # BCa undefined-ish corner: still a finite CI
    assert np.isfinite(lo) and np.isfinite(hi) and lo <= 1 / 8 <= hi


def test_paired_bootstrap_ci() -> None:
    rng = np.random.default_rng(3)
    difficulty = rng.random(60)
    a = (difficulty > 0.35).astype(float)  # system A solves the easier 65%
    b = (difficulty > 0.45).astype(float)  # system B a subset of those: A >= B on every question
    lo, hi = paired_bootstrap_ci(a, b)
    ref = stats.bootstrap(
        (a, b),
        lambda x, y, axis=-1: np.mean(x - y, axis=axis),
        n_resamples=1000,
        paired=True,
        vectorized=True,
        rng=np.random.default_rng(0),
    ).confidence_interval
    assert (lo, hi) == pytest.approx((ref.low, ref.high))
    assert 0 < lo <= np.mean(a - b) <= hi  # the paired CI sees the consistent gain
    # the unpaired view (two marginal CIs) overlaps and would call it noise
    assert bootstrap_ci(a)[0] < bootstrap_ci(b)[1]
    assert paired_bootstrap_ci(a, a) == (0.0, 0.0)
    assert paired_bootstrap_ci(a + 1, a) == (1.0, 1.0)
    with pytest.raises(ValueError, match="equal length"):
        paired_bootstrap_ci([1, 0, 1], [1, 0])


def test_paired_ratio_bootstrap_ci_resamples_questions_not_leaves() -> None:
    # Pooled gold recall over questions with 1-8 gold leaves each: a question is kept or lost whole
    # (its leaves share one tree), so the spread is the questions', larger than a binomial over leaves.
    rng = np.random.default_rng(5)
    leaves = rng.integers(1, 9, size=200).astype(float)
    easy = rng.random(200)
    kept_a = leaves * (easy > 0.2)  # a keeps every gold leaf of 80% of the questions
    kept_b = leaves * (easy > 0.3)  # b keeps a subset of those
    diff, lo, hi = paired_ratio_bootstrap_ci(kept_a, leaves, kept_b, leaves)
    assert diff == pytest.approx(kept_a.sum() / leaves.sum() - kept_b.sum() / leaves.sum())
    assert 0 < lo <= diff <= hi  # b never keeps more: the paired CI excludes 0
    ref = stats.bootstrap(
        (kept_a, leaves, kept_b, leaves),
        lambda a, da, b, db, axis=-1: a.sum(axis) / da.sum(axis) - b.sum(axis) / db.sum(axis),
        n_resamples=2000, paired=True, vectorized=True, rng=np.random.default_rng(0),
    ).confidence_interval  # fmt: skip
    assert (lo, hi) == pytest.approx((ref.low, ref.high))
    # clustered: wider than the binomial interval over leaves would claim for one system's recall
    _, lo_a, hi_a = paired_ratio_bootstrap_ci(kept_a, leaves, np.zeros(200), leaves)
    p, n = kept_a.sum() / leaves.sum(), leaves.sum()
    assert hi_a - lo_a > 2 * 1.96 * np.sqrt(p * (1 - p) / n)


def test_paired_ratio_bootstrap_ci_degenerate_inputs() -> None:
    leaves = np.array([1.0, 2.0, 3.0])
    assert paired_ratio_bootstrap_ci(leaves, leaves, leaves, leaves) == (0.0, 0.0, 0.0)
    # a keeps everything: the CI still has width, from b (a zero-width early exit on a alone would be wrong)
    _, lo, hi = paired_ratio_bootstrap_ci([1, 1, 1, 1, 1, 1], [1] * 6, [1, 0, 1, 0, 1, 1], [1] * 6)
    assert lo < hi
    assert all(np.isnan(paired_ratio_bootstrap_ci([], [], [], [])))
    assert paired_ratio_bootstrap_ci([1], [2], [0], [2]) == (0.5, 0.5, 0.5)
    with pytest.raises(ValueError, match="one length"):
        paired_ratio_bootstrap_ci([1, 0], [1, 1], [1], [1])
    with pytest.raises(ValueError, match="sums to 0"):
        paired_ratio_bootstrap_ci([0, 0], [0, 0], [1, 0], [1, 1])


def test_ratio_bootstrap_ci_covers_the_pooled_ratio_and_widens_with_clustering() -> None:
    rng = np.random.default_rng(2)
    leaves = rng.integers(1, 9, size=150).astype(float)
    kept = leaves * (rng.random(150) > 0.3)  # questions kept or lost whole
    lo, hi = ratio_bootstrap_ci(kept, leaves)
    p, n = kept.sum() / leaves.sum(), leaves.sum()
    assert lo < p < hi
    assert hi - lo > 2 * 1.96 * np.sqrt(p * (1 - p) / n)  # wider than the binomial over leaves
    assert ratio_bootstrap_ci(kept, leaves) == ratio_bootstrap_ci(kept, leaves)  # seeded
    assert ratio_bootstrap_ci([1, 2], [2, 4]) == (0.5, 0.5)
    assert all(np.isnan(ratio_bootstrap_ci([0], [0])))
    with pytest.raises(ValueError, match="one length"):
        ratio_bootstrap_ci([1, 2], [1])
