"""The ``controller`` config group (critic | ircot | none) and the reader, as thin adapters over the LLM
roles (``canopy_lit.llm.roles``).

Each ``configs/controller/*.yaml`` targets one factory below; ``pipeline.build.build_controller`` offers
``llm``, ``hierarchy`` and ``data`` and passes each factory the ones it declares (``build.call_declared``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.llm import IRCoTStepper, LLMCritic
from canopy_lit.pipeline.ircot import load_demos
from canopy_lit.pipeline.loop import Controller, Decision
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


def critic_controller(llm: Any, mode: str = "logprob", threshold: float | None = None) -> CriticController:
    """``controller=critic`` (CANOPY): ``critic.mode`` logprob | json, ``critic.threshold`` (None = the
    llm config's calibrated value)."""
    return CriticController(LLMCritic(llm, mode=mode, threshold=threshold))


def ircot_controller(
    llm: Any,
    hierarchy: Hierarchy,
    data: Mapping[str, Any] | DictConfig,
    demos: int = 0,
    demo_split: str = "train",
    demo_max_words: int = 250,
) -> IRCoTController:
    """``controller=ircot``: few-shot chains from ``demos`` questions of the benchmark's ``demo_split``
    (never test), their paragraphs cut to ``demo_max_words``; 0 = zero-shot."""
    data = OmegaConf.to_container(data, resolve=True) if isinstance(data, DictConfig) else dict(data)
    chains = load_demos(data, int(demos), hierarchy, int(demo_max_words), str(demo_split))
    return IRCoTController(IRCoTStepper(llm, demos=chains))


def no_controller() -> Controller | None:
    """``controller=none``: the loop stops after its first round. None rather than an always-stop
    controller, so that no controller call or verdict is recorded for it (the loop's contract)."""
    return None


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
