"""The read stage's interface: the answer from the evidence the budget left (METHOD.md §1.1 step 8)."""

from __future__ import annotations

from typing import Protocol

from canopy_lit.types import Question


class Reader(Protocol):
    """Answers a question from its evidence blocks: a short answer, or an option letter for multiple choice."""

    def answer(self, question: Question, evidence: list[str]) -> str: ...


class NoReader:
    """The reader's seat in the evidence mode: no LLM, an empty answer (the evidence is what is measured)."""

    def answer(self, question: Question, evidence: list[str]) -> str:
        return ""
