"""Robust parsing of LLM output, with a counter of parse failures.

Small models wrap JSON in prose or code fences, use single quotes, leave trailing commas, or get
cut off by ``max_tokens``. ``extract_json`` tries, in order: the whole text, fenced blocks, every
balanced ``{...}`` span, then the same after light repairs (quotes, trailing commas, Python
literals). Parsers never raise on model output: they fall back to a documented default and count
the failure in ``PARSE_STATS`` (or a counter passed in).

Fallbacks:
    critic: unparseable -> ``sufficient=False`` with the original question as ``followup_query``
        (the loop keeps retrieving rather than stopping on a verdict it cannot read; a truncated
        object whose ``"sufficient"`` field is readable keeps that value). A field of the wrong type
        is unparseable too: ``sufficient`` must be a JSON boolean, the integer 0 or 1, or one of the
        strings true/false, yes/no, y/n, 1/0, sufficient/insufficient (``0.3`` or ``2`` is no verdict);
        ``followup_query`` a string or null (a list is no query); ``missing`` a string, null or a list of
        strings and numbers.
    reader: the first line, stripped of "Answer:" prefixes and trailing punctuation.
    labels: the first allowed label that appears as a word; else the given default.
"""

from __future__ import annotations

import ast
import json
import math
import re
import string
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from canopy_lit.metrics import ANSWER_PREFIX, choice_letter


class ParseStats:
    """Thread-safe counts of parse attempts and failures per kind (``critic``, ``reader``, ...)."""

    def __init__(self) -> None:
        self.attempts: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self._lock = threading.Lock()

    def record(self, kind: str, ok: bool) -> None:
        with self._lock:
            self.attempts[kind] += 1
            if not ok:
                self.failures[kind] += 1

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {k: {"attempts": self.attempts[k], "failures": self.failures[k]} for k in self.attempts}

    def reset(self) -> None:
        with self._lock:
            self.attempts.clear()
            self.failures.clear()


PARSE_STATS = ParseStats()

# ----------------------------------------------------------------- JSON extraction

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)


def _balanced_spans(text: str, open_ch: str = "{", close_ch: str = "}") -> list[str]:
    """Every top-level balanced ``{...}`` span, ignoring braces inside double-quoted strings."""
    spans, depth, start, in_str, esc = [], 0, -1, False, False
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"' and depth > 0:
            in_str = True
        elif ch == open_ch:
            if depth == 0:
                start = i
            depth += 1
        elif ch == close_ch and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append(text[start : i + 1])
    return spans


def _repair(s: str) -> str:
    s = re.sub(r",\s*([}\]])", r"\1", s)  # trailing commas
    s = re.sub(r"\bTrue\b", "true", s)
    s = re.sub(r"\bFalse\b", "false", s)
    s = re.sub(r"\bNone\b", "null", s)
    return s


def _loads(s: str) -> Any:
    for candidate in (s, _repair(s)):
        try:
            return json.loads(candidate)
        except ValueError:
            pass
    try:  # single-quoted, Python-style dicts
        return ast.literal_eval(s)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def extract_json(text: str) -> dict[str, Any] | None:
    """The first JSON object found in ``text`` (see module docstring), or ``None``."""
    if not text:
        return None
    candidates = [text.strip()]
    candidates += [m.strip() for m in _FENCE.findall(text)]
    candidates += _balanced_spans(text)
    for c in candidates:
        obj = _loads(c)
        if isinstance(obj, dict):
            return obj
    return None


# ----------------------------------------------------------------- critic


@dataclass
class CriticVerdict:
    """The critic's decision for one round.

    Attributes:
        sufficient: stop retrieving and answer.
        missing: facts the critic says are missing.
        followup_query: next retrieval query (the original question when none could be read).
        p_yes: P(sufficient) from log-probabilities (log-prob mode), else ``None``.
        parsed: False when the fallback was used.
        raw: the model's text.
    """

    sufficient: bool
    missing: list[str] = field(default_factory=list)
    followup_query: str = ""
    p_yes: float | None = None
    parsed: bool = True
    raw: str = ""


def _as_bool(v: Any) -> bool | None:
    """A verdict from a JSON boolean, 0/1 or a yes/no word; ``None`` for anything else (``0.3`` is no verdict)."""
    if isinstance(v, bool):
        return v
    if isinstance(v, int | float) and v in (0, 1):
        return bool(v)
    if isinstance(v, str):
        s = v.strip().lower()
        if s in {"true", "yes", "y", "1", "sufficient"}:
            return True
        if s in {"false", "no", "n", "0", "insufficient"}:
            return False
    return None


class _WrongType(ValueError):
    """A critic field of a type no verdict can be read from."""


def _as_str_list(v: Any) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [v.strip()] if v.strip() else []
    if isinstance(v, list | tuple) and all(isinstance(x, str | int | float) and not isinstance(x, bool) for x in v):
        return [str(x).strip() for x in v if str(x).strip()]
    raise _WrongType(f"missing is {type(v).__name__}")


def _as_query(v: Any) -> str:
    """A follow-up query from a string (or null = none); a list or number would be retrieved as its repr."""
    if v is None:
        return ""
    if isinstance(v, str):
        return v.strip()
    raise _WrongType(f"followup_query is {type(v).__name__}")


_SUFFICIENT_FIELD = re.compile(r'["\']?sufficient["\']?\s*[:=]\s*["\']?(true|false|yes|no)', re.I)
_FOLLOWUP_FIELD = re.compile(r'["\']?followup_query["\']?\s*:\s*"((?:[^"\\]|\\.)*)"', re.I)


def parse_critic(text: str, question: str, stats: ParseStats | None = None) -> CriticVerdict:
    """Critic JSON -> verdict; unreadable output -> insufficient with ``question`` as follow-up."""
    stats = stats or PARSE_STATS
    obj = extract_json(text)
    if obj is not None and "sufficient" in obj:
        # a complete object is read as typed, never salvaged: a wrong type is no verdict
        suff = _as_bool(obj["sufficient"])
        try:
            missing = _as_str_list(obj.get("missing"))
            follow = _as_query(obj.get("followup_query"))
        except _WrongType:
            suff = None
        if suff is None:
            stats.record("critic", False)
            return CriticVerdict(sufficient=False, followup_query=question, parsed=False, raw=text)
        stats.record("critic", True)
        # a sufficient verdict ends the loop, so its follow-up (often a copied placeholder) is dropped
        return CriticVerdict(
            sufficient=suff, missing=[] if suff else missing, followup_query="" if suff else (follow or question),
            raw=text,
        )
    # salvage a cut-off object: the verdict comes first in the schema, so it is usually complete
    m = _SUFFICIENT_FIELD.search(text or "")
    if m:
        suff = m.group(1).lower() in {"true", "yes"}
        f = _FOLLOWUP_FIELD.search(text)
        follow = f.group(1).strip() if f else ""
        stats.record("critic", True)
        return CriticVerdict(sufficient=suff, followup_query="" if suff else (follow or question), raw=text)
    stats.record("critic", False)
    return CriticVerdict(sufficient=False, followup_query=question, parsed=False, raw=text)


def parse_followup(text: str, question: str, stats: ParseStats | None = None) -> tuple[list[str], str, bool]:
    """``(missing, followup_query, parsed)``; the question is the follow-up when none can be read."""
    stats = stats or PARSE_STATS
    obj = extract_json(text)
    if obj is not None and "followup_query" in obj:
        try:
            missing, follow = _as_str_list(obj.get("missing")), _as_query(obj["followup_query"])
        except _WrongType:
            missing, follow = [], ""
        stats.record("followup", bool(follow))
        return (missing, follow, True) if follow else ([], question, False)
    f = _FOLLOWUP_FIELD.search(text or "")
    if f and f.group(1).strip():
        stats.record("followup", True)
        return [], f.group(1).strip(), True
    stats.record("followup", False)
    return [], question, False


# ----------------------------------------------------------------- yes/no from log-probs

_YES = {"yes", "y", "true", "sufficient"}
_NO = {"no", "n", "false", "insufficient"}


def _norm_token(tok: str) -> str:
    return tok.strip().strip(string.punctuation).lower().replace("ġ", "").replace("▁", "")


def p_yes(first_token_logprobs: Mapping[str, float]) -> float | None:
    """P(yes) / (P(yes) + P(no)) over the first generated token's top alternatives.

    Tokens are compared case- and space-insensitively (``Yes``, `` yes``, ``YES``). ``None`` when
    neither a yes-like nor a no-like token is among the alternatives.
    """
    py = pn = 0.0
    for tok, lp in first_token_logprobs.items():
        t = _norm_token(tok)
        if t in _YES:
            py += math.exp(lp)
        elif t in _NO:
            pn += math.exp(lp)
    if py + pn == 0.0:
        return None
    return py / (py + pn)


def yes_no_from_text(text: str) -> bool | None:
    m = re.match(r"\W*(\w+)", text or "")
    if not m:
        return None
    w = m.group(1).lower()
    return True if w in _YES else False if w in _NO else None


# ----------------------------------------------------------------- reader + labels

def parse_short_answer(text: str, stats: ParseStats | None = None) -> str:
    """First non-empty line, without an "Answer:" prefix, wrapping quotes/markup or a final period."""
    stats = stats or PARSE_STATS
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    if not lines:
        stats.record("reader", False)
        return ""
    ans = ANSWER_PREFIX.sub("", lines[0])
    obj = extract_json(ans) if ans.startswith("{") else None
    if obj:  # a model that answered in JSON anyway
        ans = str(next(iter(obj.values()), ""))
    ans = ans.strip().strip("*`\"'").strip()
    ans = re.sub(r"[.。]+$", "", ans).strip()
    stats.record("reader", bool(ans))
    return ans


def parse_choice_letter(text: str, n_choices: int, stats: ParseStats | None = None) -> str | None:
    """``metrics.choice_letter``, counting unparsed replies under ``choice``."""
    stats = stats or PARSE_STATS
    letter = choice_letter(text, n_choices)
    stats.record("choice", letter is not None)
    return letter


def parse_label(text: str, labels: Sequence[str], default: str, kind: str = "label",
                stats: ParseStats | None = None) -> tuple[str, bool]:  # fmt: skip
    """One of ``labels`` from JSON ``{"label": ...}`` or a bare word; ``(default, False)`` if none."""
    stats = stats or PARSE_STATS
    obj = extract_json(text)
    cands = [str(v) for v in obj.values()] if obj else []
    cands.append(text or "")
    lowered = [lab.lower() for lab in labels]
    for c in cands:
        c = c.strip().lower()
        if c in lowered:
            stats.record(kind, True)
            return labels[lowered.index(c)], True
    for c in cands:
        words = re.findall(r"[a-z]+", c.lower())
        for w in words:
            if w in lowered:
                stats.record(kind, True)
                return labels[lowered.index(w)], True
    stats.record(kind, False)
    return default, False


# ----------------------------------------------------------------- IRCoT

_SENT_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_ANSWER_MARK = re.compile(r"so\s+the\s+answer\s+is\s*:?\s*(.+)", re.I | re.S)


def parse_ircot_step(text: str, stats: ParseStats | None = None) -> tuple[str, str | None]:
    """``(sentence, answer or None)``: the first sentence, or the text through the answer mark."""
    stats = stats or PARSE_STATS
    t = " ".join((text or "").split())
    m = _ANSWER_MARK.search(t)
    if m:
        span = _SENT_END.split(m.group(1), maxsplit=1)[0]
        answer = parse_short_answer(span, stats=ParseStats())
        stats.record("ircot", bool(answer))
        return (t[: m.start(1)] + span).strip(), answer or None
    sent = _SENT_END.split(t, maxsplit=1)[0].strip() if t else ""
    stats.record("ircot", bool(sent))
    return sent, None
