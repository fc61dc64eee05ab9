"""Loop controllers and the reader, as thin adapters over the LLM roles (``canopy_lit.llm.roles``)."""

from __future__ import annotations

from typing import Any

from canopy_lit.pipeline.loop import Decision
from canopy_lit.types import Question


class CriticController:
    """CANOPY's critic: stop when the evidence suffices, else retrieve with its follow-up query.

    An unparseable critic output is "insufficient" with the original question as follow-up
    (``canopy_lit.llm.parsing.parse_critic``), so a bad generation costs a round, never the run.
    """

    def __init__(self, critic: Any) -> None:
        self.critic = critic

    def step(self, question: Question, evidence: list[str], round: int, history: list[dict[str, Any]]) -> Decision:
        v = self.critic.judge(question.text, evidence, question.choices)
        raw = {"missing": list(v.missing), "p_yes": v.p_yes, "parsed": v.parsed}
        return Decision(stop=bool(v.sufficient), followup=(v.followup_query or question.text), raw=raw)


class IRCoTController:
    """IRCoT: each step writes the next reasoning sentence, which becomes the next retrieval query;
    it stops once the reasoning states the answer."""

    def __init__(self, stepper: Any) -> None:
        self.stepper = stepper

    def step(self, question: Question, evidence: list[str], round: int, history: list[dict[str, Any]]) -> Decision:
        thoughts = [h["thought"] for h in history if h.get("thought")]
        s = self.stepper.step(question.text, evidence, thoughts)
        return Decision(stop=s.answer is not None, followup=s.sentence or question.text, raw={"thought": s.sentence, "answer": s.answer})


class ReaderAdapter:
    """Short answer, or the option letter for multiple-choice questions (scored by letter)."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader

    def answer(self, question: Question, evidence: list[str]) -> str:
        ans = self.reader.answer(question.text, evidence, question.choices)
        if question.choices:
            return ans.letter or ans.raw
        return ans.text


class AggregationAdapter:
    def __init__(self, classifier: Any) -> None:
        self.classifier = classifier

    def is_aggregation(self, question: Question) -> bool:
        return bool(self.classifier.is_aggregation(question.text))
