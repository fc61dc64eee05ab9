"""The LLM reader: a short answer, or the option letter for multiple choice, from the evidence blocks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from annotated_types import Ge

from canopy_lit.llm import prompts
from canopy_lit.llm.base import LLM
from canopy_lit.llm.context import fit_evidence
from canopy_lit.llm.parsing import PARSE_STATS, ParseStats, parse_choice_letter, parse_short_answer
from canopy_lit.types import Question


@dataclass
class ReaderAnswer:
    """The reader's output: ``text`` (short answer, or the chosen option's text) and ``letter`` for MC."""

    text: str
    letter: str | None = None
    raw: str = ""


class LLMReader:
    """Answers from the kept evidence: a short answer, or an option letter for multiple choice (scored by
    letter). ``answer`` is the loop's ``Reader``; ``read`` also gives the chosen option's text and the raw reply."""

    def __init__(self, llm: LLM, *, max_tokens: Annotated[int, Ge(1)] = 32, stats: ParseStats | None = None) -> None:
        self.llm = llm
        self.max_tokens = max_tokens
        self.stats = stats or PARSE_STATS

    def answer(self, question: Question, evidence: list[str]) -> str:
        """The loop's answer (``Reader``): the option letter for a multiple-choice question, else the short answer."""
        ans = self.read(question.text, evidence, question.choices)
        if question.choices:
            return ans.letter or ans.raw
        return ans.text

    def read(self, question: str, evidence: Sequence[str], choices: Sequence[str] | None = None) -> ReaderAnswer:
        """The reader's reply to ``question`` over ``evidence``, parsed."""
        msgs = fit_evidence(
            self.llm, lambda ev: prompts.reader(question, ev, choices), evidence, self.max_tokens, "reader"
        )
        resp = self.llm.chat(msgs, max_tokens=self.max_tokens, role="reader")
        if choices:
            letter = parse_choice_letter(resp.text, len(choices), self.stats)
            text = choices[ord(letter) - 65] if letter else parse_short_answer(resp.text, ParseStats())
            return ReaderAnswer(text=text, letter=letter, raw=resp.text)
        return ReaderAnswer(text=parse_short_answer(resp.text, self.stats), raw=resp.text)
