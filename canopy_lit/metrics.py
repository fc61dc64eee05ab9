"""Answer metrics (SQuAD-normalised EM / F1, BERGEN Match, multiple-choice accuracy) and bootstrap CIs (scipy)."""

from __future__ import annotations

import re
import string
import warnings
from collections import Counter
from collections.abc import Sequence

import numpy as np
from scipy import stats

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def exact_match(prediction: str, answers: Sequence[str]) -> float:
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(a) for a in answers))


# hotpot_evaluate_v1.py: a yes / no / noanswer on either side scores F1 0 unless both are equal
# (token overlap would give "yes it is" half credit against "yes"). Applied to every benchmark:
# only answers that normalise to exactly these words are affected, and for them overlap is meaningless.
_CLOSED_ANSWERS = {"yes", "no", "noanswer"}


def _f1(pred: str, gold: str) -> float:
    pn, gn = normalize_answer(pred), normalize_answer(gold)
    if (pn in _CLOSED_ANSWERS or gn in _CLOSED_ANSWERS) and pn != gn:
        return 0.0
    p, g = pn.split(), gn.split()
    if not p or not g:
        return float(p == g)
    common = Counter(p) & Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, answers: Sequence[str]) -> float:
    """Token F1 against the best-matching gold answer."""
    return max((_f1(prediction, a) for a in answers), default=0.0)


# "Answer:", "Final answer is -" ... before a reply's answer (the reader's parser strips it too)
ANSWER_PREFIX = re.compile(r"^\s*(?:final\s+)?(?:short\s+)?answer\s*(?:is)?\s*[:\-]\s*", re.I)


def choice_letter(text: str, n_choices: int = 4) -> str | None:
    """The option letter (``A``..) a reader chose, or None; the reader's parser (``llm.parsing``) and the metric
    read a reply by these same rules.

    Read: a lone letter (``B``, ``b``, ``(c)``, ``B.``), a leading marked letter (``(C) red``,
    ``C: red``, ``Answer: A.``), ``option D ...``, ``answer is (D).``, or a capital letter closing
    a sentence (``I think it is B.``). Not read: a capital that starts words, so an answer in
    words (``A man rides a horse``) is no option letter.
    """
    if n_choices < 1:
        return None
    letters = "".join(chr(65 + i) for i in range(min(n_choices, 26)))
    t = ANSWER_PREFIX.sub("", (text or "").strip()).strip()
    m = (
        re.fullmatch(rf"\(?([{letters}{letters.lower()}])[).:]?", t)
        or re.match(rf"^[(\[]?([{letters}])(?:[).:\]]|,|\s*$)", t)
        or re.search(rf"\b(?i:option)\s*\(?([{letters}])\b(?![\w'])", t)
        or re.search(rf"\b(?i:answer)(?:\s+(?i:is))?\s*:?\s*\(?([{letters}])(?=[).:,]|\s*$)", t)
        or re.search(rf"(?:^|[\s(])([{letters}])(?:[).:]|\s*$)", t)
    )
    return m.group(1).upper() if m else None


def choice_accuracy(prediction: str, answer_letter: str, n_choices: int = 4) -> float:
    """1 when the parsed letter is the gold one; an unparsed prediction scores 0."""
    letter = choice_letter(prediction, n_choices)
    return float(letter is not None and letter == answer_letter.strip().strip("()").upper())


def match_score(prediction: str, answers: Sequence[str]) -> float:
    """Match (BERGEN): 1 if some normalised gold answer is a substring of the normalised prediction.

    Plain substring on SQuAD-normalised strings, as BERGEN computes it (so "1" matches "1990");
    gold answers that normalise to "" never match.
    """
    pred = normalize_answer(prediction)
    return float(any(g and g in pred for g in (normalize_answer(a) for a in answers)))


def _ci(
    data: tuple[np.ndarray, ...], statistic, n_boot: int, alpha: float, seed: int, method: str, paired: bool
) -> tuple[float, float]:
    """``scipy.stats.bootstrap`` CI; a zero-width CI at the point estimate when no resample can differ."""
    point = float(statistic(*data, axis=-1))
    n = len(data[0])
    if n < 2 or all(np.ptp(d) == 0 for d in data) or (paired and np.ptp(data[0] - data[1]) == 0):
        return point, point  # every resample has the same statistic (scipy would warn and return nan)
    res = stats.bootstrap(
        data,
        statistic,
        n_resamples=n_boot,
        confidence_level=1 - alpha,
        method=method,
        paired=paired,
        vectorized=True,
        rng=np.random.default_rng(seed),
    )
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (np.isfinite(lo) and np.isfinite(hi)) and method.lower() == "bca":
        # BCa is undefined when the jackknife has no spread (e.g. one differing value): percentile then.
        return _ci(data, statistic, n_boot, alpha, seed, "percentile", paired)
    return lo, hi


def _mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def _mean_diff(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(a - b, axis=axis)


def bootstrap_ci(
    values: Sequence[float], n_boot: int = 1000, alpha: float = 0.05, seed: int = 0, method: str = "BCa"
) -> tuple[float, float]:
    """(1 - alpha) bootstrap CI of the mean via ``scipy.stats.bootstrap`` (deterministic for a seed).

    Args:
        values: (n,) per-question scores.
        method: ``BCa`` (scipy's default: corrects bias and skew, e.g. scores near 0 or 1) or ``percentile``.

    Returns (nan, nan) for no values and (mean, mean) when n < 2 or every value is equal.
    """
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return (float("nan"), float("nan"))
    return _ci((x,), _mean, n_boot, alpha, seed, method, paired=False)


def paired_bootstrap_ci(
    a: Sequence[float],
    b: Sequence[float],
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
    method: str = "BCa",
) -> tuple[float, float]:
    """(1 - alpha) CI of mean(a - b) for two systems scored on the same questions (paired resampling).

    Args:
        a: (n,) per-question scores of the first system.
        b: (n,) per-question scores of the second system, in the same question order.

    A CI that excludes 0 is a difference the bootstrap supports; pairing removes the between-question
    variance that two independent CIs would double count. Raises ValueError on unequal lengths.
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"paired_bootstrap_ci needs two 1-D score lists of equal length, got {x.shape} and {y.shape}")
    if len(x) == 0:
        return (float("nan"), float("nan"))
    return _ci((x, y), _mean_diff, n_boot, alpha, seed, method, paired=True)


def _ratio(num: np.ndarray, den: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.sum(num, axis=axis) / np.sum(den, axis=axis)


def _ratio_diff(num_a: np.ndarray, den_a: np.ndarray, num_b: np.ndarray, den_b: np.ndarray, axis: int = -1) -> np.ndarray:
    return _ratio(num_a, den_a, axis) - _ratio(num_b, den_b, axis)


def _joint_ci(data: tuple[np.ndarray, ...], statistic, n_boot: int, alpha: float, seed: int, method: str) -> tuple[float, float]:
    """CI of ``statistic`` over arrays resampled jointly (one question = one index into every array).

    Unlike ``_ci``, no shortcut for a degenerate input: with four arrays "a - b is constant" says nothing
    about the statistic. BCa falls back to percentile when undefined; every resample equal -> the point.
    """
    point = float(statistic(*data))
    if len(data[0]) < 2:
        return point, point
    for m in (method, "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # scipy's degenerate-data warning; handled below
            res = stats.bootstrap(
                data, statistic, n_resamples=n_boot, confidence_level=1 - alpha, method=m, paired=True,
                vectorized=True, rng=np.random.default_rng(seed),
            )  # fmt: skip
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if np.isfinite(lo) and np.isfinite(hi):
            return lo, hi
    return point, point


def ratio_bootstrap_ci(
    num: Sequence[float], den: Sequence[float], n_boot: int = 2000, alpha: float = 0.05, seed: int = 0, method: str = "BCa"
) -> tuple[float, float]:
    """(1 - alpha) bootstrap CI of a pooled ratio sum(num) / sum(den), resampling questions.

    Args:
        num: (n,) per-question numerators (e.g. gold leaves kept).
        den: (n,) per-question denominators (e.g. gold leaves).

    Returns (nan, nan) for no questions or a zero denominator total.
    """
    x, y = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"ratio_bootstrap_ci needs two 1-D arrays of one length, got {x.shape} and {y.shape}")
    keep = y > 0  # nothing to pool: adds nothing to the ratio
    if not keep.any():
        return (float("nan"), float("nan"))
    return _joint_ci((x[keep], y[keep]), _ratio, n_boot, alpha, seed, method)


def paired_ratio_bootstrap_ci(
    num_a: Sequence[float],
    den_a: Sequence[float],
    num_b: Sequence[float],
    den_b: Sequence[float],
    n_boot: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
    method: str = "BCa",
) -> tuple[float, float, float]:
    """Difference of two pooled ratios over the same questions, with a (1 - alpha) paired bootstrap CI.

    A pooled ratio is sum(num) / sum(den) over questions (gold recall: gold leaves kept / gold leaves;
    kept-token ratio; decision accuracy). Questions are resampled jointly for both systems, so the
    between-question spread that both share cancels, and clustering (a question's leaves rise and fall
    together) is kept, which a binomial error over leaves ignores.

    Args:
        num_a: (n,) per-question numerators of system a.
        den_a: (n,) per-question denominators of system a.
        num_b: (n,) per-question numerators of system b, in the same question order.
        den_b: (n,) per-question denominators of system b.

    Returns (a - b, low, high); (nan, nan, nan) for no questions. Raises ValueError on unequal lengths or a
    non-positive denominator total.
    """
    data = tuple(np.asarray(x, dtype=float) for x in (num_a, den_a, num_b, den_b))
    if any(d.ndim != 1 or d.shape != data[0].shape for d in data):
        raise ValueError(f"paired_ratio_bootstrap_ci needs four 1-D arrays of one length, got {[d.shape for d in data]}")
    if len(data[0]) == 0:
        return (float("nan"),) * 3
    if data[1].sum() <= 0 or data[3].sum() <= 0:
        raise ValueError("paired_ratio_bootstrap_ci: a denominator sums to 0 (nothing to pool)")
    point = float(_ratio_diff(*data))
    # Questions with nothing to pool on either side add nothing to either ratio; dropping them keeps every
    # resample's denominators positive in the common case (each probed question has a gold leaf).
    data = tuple(d[(data[1] > 0) | (data[3] > 0)] for d in data)
    return (point, *_joint_ci(data, _ratio_diff, n_boot, alpha, seed, method))
