"""Answer metrics (SQuAD-normalised EM / F1, multiple-choice accuracy) and bootstrap confidence intervals."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

import numpy as np

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def exact_match(prediction: str, answers: Sequence[str]) -> float:
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(a) for a in answers))


def _f1(pred: str, gold: str) -> float:
    p, g = normalize_answer(pred).split(), normalize_answer(gold).split()
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


_LETTER = re.compile(r"\(?\b([A-Z])\b\)?")


def choice_letter(prediction: str, n_choices: int = 4) -> str | None:
    """The option letter a reader chose: '(B)', 'B', 'Answer: B.' -> 'B'; None if no valid letter."""
    valid = {chr(ord("A") + i) for i in range(n_choices)}
    for m in _LETTER.finditer(prediction.strip().upper()):
        if m.group(1) in valid:
            return m.group(1)
    return None


def choice_accuracy(prediction: str, answer_letter: str, n_choices: int = 4) -> float:
    return float(choice_letter(prediction, n_choices) == answer_letter.strip().strip("()").upper())


def bootstrap_ci(values: Sequence[float], n_boot: int = 1000, alpha: float = 0.05, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean (deterministic for a given seed)."""
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)
    return float(np.quantile(means, alpha / 2)), float(np.quantile(means, 1 - alpha / 2))
