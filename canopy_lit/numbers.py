"""Bare numbers as tables and answers write them: the one normaliser the readers and the evidence metrics share."""

from __future__ import annotations

import re

# A bare number as TAT-QA writes answers and cells: "$1,496.5", "(5.3)", "-12", "12.5%", "3.2 million".
BARE_NUMBER = re.compile(
    r"^[\s$€£¥(+\-–]*(\d[\d,]*(?:\.\d+)?|\.\d+)\s*%?\)?\s*(?:thousand|million|billion|percent)?s?\s*$", re.I
)


def as_number(text: str) -> float | None:
    """|value| of a bare number ("$1,496.5" -> 1496.5, "(5.3)" -> 5.3, "12.5%" -> 12.5), else None.

    Signs are dropped because tables write negatives as "(5.3)" and answers as "-5.3".
    """
    m = BARE_NUMBER.match(str(text))
    if not m:
        return None
    try:
        return abs(float(m.group(1).replace(",", "")))
    except ValueError:
        return None
