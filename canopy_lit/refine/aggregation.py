"""The aggregation check: whether a table question aggregates over rows, so that its tables are kept whole
instead of refined (METHOD.md §1.1 step 5; the loop asks once per question, ``loop.aggregation_check``)."""

from __future__ import annotations

from typing import Protocol

from canopy_lit.llm import prompts
from canopy_lit.llm.base import LLM
from canopy_lit.llm.context import fit_evidence
from canopy_lit.llm.parsing import PARSE_STATS, ParseStats, parse_label
from canopy_lit.types import Question


class AggregationCheck(Protocol):
    """Whether a question aggregates over a table's rows (its tables are then kept whole, not refined)."""

    def is_aggregation(self, question: Question) -> bool: ...


class AggregationClassifier:
    """``aggregation`` vs ``lookup`` for a table question, from the question alone (an ``AggregationCheck``).

    Unreadable output falls back to ``default`` (``lookup``: keep the tree's normal refinement).
    """

    def __init__(self, llm: LLM, *, default: str = "lookup", constrained: bool = True,
                 stats: ParseStats | None = None) -> None:  # fmt: skip
        self.llm, self.default, self.constrained = llm, default, constrained
        self.stats = stats or PARSE_STATS

    def classify(self, question: str) -> str:
        labels = prompts.AGGREGATION_LABELS
        resp = self.llm.chat(
            fit_evidence(self.llm, lambda _: prompts.aggregation_classifier(question), [], 12, "aggregation"),
            json_mode=prompts.label_schema(labels) if self.constrained else True,
            max_tokens=12,
            role="aggregation",
        )
        return parse_label(resp.text, labels, self.default, "aggregation", self.stats)[0]

    def is_aggregation(self, question: Question) -> bool:
        return self.classify(question.text) == "aggregation"
