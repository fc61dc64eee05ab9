"""The operands of a TAT-QA derivation: the one rule the reader's gold and the answer look-up share.

A derivation such as ``(4.1% + 4.6%)/2`` writes the values it reads from the evidence (4.1, 4.6) and the
constants of its formula (the 2 of an average). Only the values are operands:

- constants, by their place in the formula: the divisor of an average (``(a + b + c) / 3``, also
  ``/ (2019 - 2017 + 1)``: a bare integer, or a group of bare integers, equal to the number of summed
  terms before it), the 100 of a percentage (``* 100``, ``100 *``, ``/ 100``) and the 1 of a growth rate
  (``a / b - 1``, ``(1 - 15%)``) are never operands;
- nor are the places and labels a prose derivation names: "row 5", "rows 3 to 7", "COL4", the 2018 of
  "(2018:22,201)" or of "79,046 (2018)";
- with the document's numbers given (table cells and paragraph texts, ``numbers_in``), a number is an
  operand only when its value is written there: a number the evidence does not hold cannot mark a gold
  row and cannot be looked up in kept evidence.

Operands are returned as the derivation writes them ("4,411", "4.1"), first occurrences in order.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

__all__ = ["formula_operands"]

# One token of a derivation: a word, a number as TAT-QA writes it (group 2, with a "%" after it in group 3),
# an operator ("x" is a word that turns into one), a bracket, a colon or comma; others ("$") drop out.
_TOKEN = re.compile(r"([A-Za-z]+)|(\d[\d,]*(?:\.\d+)?)(\s*%)?|([-+*/×÷])|([(\[{])|([)\]}])|(:)|\S")
# Words that make the next number a place in the table, not a value: "row 5", "rows 3-5", "col3 rows 3 to 7".
_PLACE = re.compile(r"rows?|cols?|columns?", re.I)
_PLACE_JOIN = ("-", "to", "and", ",")


class _Tok:
    __slots__ = ("kind", "text", "bare", "percent")

    def __init__(self, kind: str, text: str, bare: bool = False, percent: bool = False) -> None:
        self.kind, self.text, self.bare, self.percent = kind, text, bare, percent


def _tokens(derivation: str) -> list[_Tok]:
    out: list[_Tok] = []
    for m in _TOKEN.finditer(derivation):
        word, number, percent, op, opened, closed, colon = m.groups()
        if word is not None:
            out.append(_Tok("op", "*") if word in ("x", "X") else _Tok("word", word))
        elif number is not None:
            out.append(_Tok("num", number, bare=number.isdigit(), percent=bool(percent)))
        elif op is not None:
            out.append(_Tok("op", "*" if op in "x×" else "/" if op == "÷" else op))
        elif opened is not None:
            out.append(_Tok("open", opened))
        elif closed is not None:
            out.append(_Tok("close", closed))
        elif colon is not None:
            out.append(_Tok("colon", colon))
        elif m.group() == ",":
            out.append(_Tok("comma", ","))
    return out


def _match(toks: list[_Tok], i: int, step: int) -> int | None:
    """Index of the bracket matching the one at ``i`` (``step`` +1 forward from an opening, -1 back)."""
    depth = 0
    while 0 <= i < len(toks):
        kind = toks[i].kind
        if kind in ("open", "close"):
            depth += 1 if (kind == "open") == (step > 0) else -1
            if depth == 0:
                return i
        i += step
    return None


def _terms(toks: list[_Tok]) -> list[list[_Tok]]:
    """The additive terms of a token run at its top level ("-16 - 5" -> [-16], [5]; a leading sign opens none)."""
    terms: list[list[_Tok]] = [[]]
    depth = 0
    for k, t in enumerate(toks):
        if t.kind == "open":
            depth += 1
        elif t.kind == "close":
            depth -= 1
        unary = k == 0 or toks[k - 1].kind in ("op", "open")
        if depth == 0 and t.kind == "op" and t.text in "+-" and not unary:
            terms.append([])
        else:
            terms[-1].append(t)
    return [t for t in terms if t]


def _bare_value(toks: list[_Tok]) -> int | None:
    """The value of a run of bare integers joined by + and - ("2019-2017+1" -> 3), else None."""
    total, sign, want_number = 0, 1, True
    for t in toks:
        if want_number and t.kind == "num" and t.bare and not t.percent:
            total += sign * int(t.text)
            want_number = False
        elif not want_number and t.kind == "op" and t.text in "+-":
            sign, want_number = (1 if t.text == "+" else -1), True
        else:
            return None
    return None if want_number else total


def _not_operands(toks: list[_Tok]) -> set[int]:
    """Token indices of the numbers that are no operands: the formula's constants (averages' divisors,
    percentage 100s, growth-rate 1s) and the places and labels a prose derivation names."""
    out: set[int] = set()
    for i, t in enumerate(toks):
        if t.kind == "op" and t.text == "/" and i > 0 and toks[i - 1].kind == "close" and i + 1 < len(toks):
            start = _match(toks, i - 1, -1)
            if start is None:
                continue
            n_terms = len(_terms(toks[start + 1 : i - 1]))
            right = toks[i + 1]
            if right.kind == "num":
                span, value = [i + 1], (int(right.text) if right.bare and not right.percent else None)
            elif right.kind == "open" and (end := _match(toks, i + 1, 1)) is not None:
                span, value = list(range(i + 2, end)), _bare_value(toks[i + 2 : end])
            else:
                continue
            if n_terms >= 2 and value == n_terms:
                out.update(span)
        if t.kind == "num" and t.text == "100":
            before = toks[i - 1] if i > 0 else None
            after = toks[i + 1] if i + 1 < len(toks) else None
            if (before is not None and before.kind == "op" and before.text in "*/") or (
                after is not None and after.kind == "op" and after.text == "*"
            ):
                out.add(i)
        if t.kind == "num" and t.text == "1" and not t.percent:
            out.update(_growth_one(toks, i))
    return out | _places_and_labels(toks)


def _places_and_labels(toks: list[_Tok]) -> set[int]:
    """Numbers that name a place or a column, not a value: "row 5", "rows 3 to 7", "(2018:22,201)" (the
    2018), "79,046 (2019)" (the 2019)."""
    out: set[int] = set()
    for i, t in enumerate(toks):
        if t.kind != "num":
            continue
        prev = toks[i - 1] if i else None
        if prev is not None and prev.kind == "word" and _PLACE.fullmatch(prev.text):
            out.add(i)
            k = i + 1  # "rows 3-5", "rows 3 to 7", "row 4 and 7"
            while k + 1 < len(toks) and toks[k].text.lower() in _PLACE_JOIN and toks[k + 1].kind == "num":
                out.add(k + 1)
                k += 2
            continue
        after = toks[i + 1].kind if i + 1 < len(toks) else ""
        year = t.bare and 1900 <= int(t.text) <= 2100
        if after == "colon" or (year and prev is not None and prev.kind == "open" and after == "close"):
            out.add(i)
    return out


def _growth_one(toks: list[_Tok], i: int) -> list[int]:
    """[i] when the bare 1 at ``i`` is a growth rate's: ``a / b - 1`` or ``(1 - 15%)``, else []."""
    # The run of tokens at the 1's bracket depth around it.
    lo = i
    depth = 0
    while lo > 0:
        t = toks[lo - 1]
        if t.kind == "close":
            depth += 1
        elif t.kind == "open":
            if depth == 0:
                break
            depth -= 1
        lo -= 1
    hi, depth = i + 1, 0
    while hi < len(toks):
        t = toks[hi]
        if t.kind == "open":
            depth += 1
        elif t.kind == "close":
            if depth == 0:
                break
            depth -= 1
        hi += 1
    terms = _terms(toks[lo:hi])
    if len(terms) != 2:
        return []
    first, second = terms
    one = toks[i]
    if second == [one] and i > 0 and toks[i - 1].text in "+-":
        return [i] if any(t.kind == "op" and t.text == "/" for t in first) else []  # a / b - 1
    if first == [one]:
        return [i] if any(t.kind == "num" and t.percent for t in second) else []  # 1 - 15%
    return []


def formula_operands(derivation: str, values: Iterable[float] | None = None) -> list[str]:
    """The operands of ``derivation`` as written, without the formula's constants (first occurrences, in order).

    Args:
        derivation: a TAT-QA ``derivation`` ("(4.1% + 4.6%)/2", "126 / 67 - 1"; "a##b" count lists too).
        values: the numbers written in the question's document (``numbers_in`` of its cells and
            paragraphs); when given, a number whose value is not among them is not an operand.

    Example::

        formula_operands("(4.1% + 4.6%)/2")                 # ['4.1', '4.6']
        formula_operands("(166+178)/2 * 100 - 1")           # ['166', '178']
        formula_operands("(17-8)/8")                        # ['17', '8']: a change's base is a value
        formula_operands("-9.9 - 0", values=[9.9, 2019.0])  # ['9.9']: no 0 in the document
    """
    toks = _tokens(str(derivation or ""))
    constants = _not_operands(toks)
    written = None if values is None else [float(v) for v in values]
    out: dict[str, None] = {}
    for i, t in enumerate(toks):
        if t.kind != "num" or i in constants:
            continue
        if written is not None:
            value = float(t.text.replace(",", ""))
            if not any(math.isclose(value, v, rel_tol=1e-9, abs_tol=1e-9) for v in written):
                continue
        out.setdefault(t.text)
    return list(out)
