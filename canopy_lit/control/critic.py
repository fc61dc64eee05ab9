"""``controller=critic`` (CANOPY): an LLM judges whether the held evidence answers the question, and writes
the follow-up query when it does not."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal, get_args

from annotated_types import Interval

from canopy_lit.control.base import Decision
from canopy_lit.llm import prompts
from canopy_lit.llm.base import LLM, Message
from canopy_lit.llm.context import fit_evidence, yes_probability
from canopy_lit.llm.parsing import PARSE_STATS, CriticVerdict, ParseStats, parse_critic, parse_followup
from canopy_lit.types import Question

CriticMode = Literal["logprob", "json"]  # critic.mode
#: Used when neither the critic nor the model config gives a threshold; uncalibrated.
DEFAULT_YES_THRESHOLD = 0.5
#: The critic's JSON budget (verdict or follow-up query).
CRITIC_MAX_TOKENS = 96


class LLMCritic:
    """CANOPY's critic: decides whether the evidence so far answers the question, and what to retrieve next.

    As a ``Controller`` (``step``) it stops when the evidence suffices, else retrieves with its follow-up
    query. An unparseable output is "insufficient" with the original question as follow-up
    (``canopy_lit.llm.parsing.parse_critic``), so a bad generation costs a round, never the run.

    Modes:
        ``json``: one JSON call returns ``{sufficient, missing, followup_query}``.
        ``logprob``: one 1-token call gives P(yes) from the first token's top log-probabilities;
            sufficient iff ``P(yes) >= threshold``. Only when insufficient, a second (JSON) call
            writes the follow-up query. Small CPU models are far better calibrated this way: their
            JSON verdicts say "insufficient" almost always.

    Args:
        llm: any backend.
        mode: ``json`` or ``logprob``.
        threshold: P(yes) cut-off for ``logprob``; ``None`` = ``llm.calibration["critic_yes_threshold"]``
            (fit offline on training questions, stored in the llm config), else 0.5.
        followup: in ``logprob`` mode, write a follow-up query when insufficient (else the question).
        max_tokens: budget for the JSON calls.
        constrained: pass the JSON schema to the backend (grammar-constrained decoding).
    """

    def __init__(
        self,
        llm: LLM,
        mode: CriticMode = "logprob",
        threshold: float | None = None,
        *,
        followup: bool = True,
        max_tokens: int = CRITIC_MAX_TOKENS,
        top_logprobs: int = 10,
        constrained: bool = True,
        stats: ParseStats | None = None,
    ) -> None:
        if mode not in get_args(CriticMode):
            raise ValueError(f"LLMCritic: mode must be 'json' or 'logprob', got {mode!r}")
        self.llm = llm
        self.mode = mode
        cal = getattr(llm, "calibration", {}) or {}
        self.threshold = float(threshold if threshold is not None else cal.get("critic_yes_threshold", DEFAULT_YES_THRESHOLD))
        self.followup = followup
        self.max_tokens = max_tokens
        self.top_logprobs = top_logprobs
        self.constrained = constrained
        self.stats = stats or PARSE_STATS

    def p_sufficient(self, question: str, evidence: Sequence[str], choices: Sequence[str] | None = None) -> float:
        """P(yes) that the evidence suffices (one 1-token call)."""
        msgs = fit_evidence(
            self.llm, lambda ev: prompts.critic_yes_no(question, ev, choices), evidence, 1, "critic"
        )
        return yes_probability(self.llm, msgs, "critic", self.top_logprobs, self.stats)

    def judge(self, question: str, evidence: Sequence[str], choices: Sequence[str] | None = None) -> CriticVerdict:
        """Verdict for this round. Never raises on model output (see ``parsing.parse_critic``)."""
        if self.mode == "json":
            resp = self.llm.chat(
                self._fit(prompts.critic_json, question, evidence, choices),
                json_mode=prompts.CRITIC_SCHEMA if self.constrained else True,
                max_tokens=self.max_tokens,
                role="critic",
            )
            return parse_critic(resp.text, question, self.stats)
        p = self.p_sufficient(question, evidence, choices)
        if p >= self.threshold:
            return CriticVerdict(sufficient=True, p_yes=p)
        if not self.followup:
            return CriticVerdict(sufficient=False, followup_query=question, p_yes=p)
        resp = self.llm.chat(
            self._fit(prompts.critic_followup, question, evidence, choices),
            json_mode=prompts.FOLLOWUP_SCHEMA if self.constrained else True,
            max_tokens=self.max_tokens,
            role="critic",
        )
        missing, follow, ok = parse_followup(resp.text, question, self.stats)
        return CriticVerdict(sufficient=False, missing=missing, followup_query=follow, p_yes=p, parsed=ok, raw=resp.text)

    def step(self, question: Question, evidence: list[str], round: int, history: list[dict[str, Any]]) -> Decision:
        """The loop's verdict for this round (``Controller``): ``judge``'s, as a ``Decision``."""
        v = self.judge(question.text, evidence, question.choices)
        raw = {"missing": list(v.missing), "p_yes": v.p_yes, "parsed": v.parsed}
        return Decision(stop=bool(v.sufficient), followup=(v.followup_query or question.text), raw=raw)

    def _fit(
        self,
        build: Callable[[str, Sequence[str], Sequence[str] | None], list[Message]],
        question: str,
        evidence: Sequence[str],
        choices: Sequence[str] | None,
    ) -> list[Message]:
        return fit_evidence(
            self.llm, lambda ev: build(question, ev, choices), evidence, self.max_tokens, "critic"
        )


def critic_controller(
    llm: Any, mode: CriticMode = "logprob", threshold: Annotated[float, Interval(ge=0.0, le=1.0)] | None = None
) -> LLMCritic:
    """``controller=critic`` (CANOPY): ``critic.mode`` logprob | json, ``critic.threshold`` (None = the
    llm config's calibrated value)."""
    return LLMCritic(llm, mode=mode, threshold=threshold)
