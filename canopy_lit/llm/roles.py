"""The LLM's jobs in the pipeline: critic, reader, aggregation classifier, router, IRCoT, relevance.

Each role wraps any ``LLM`` backend, builds its prompt from ``prompts``, parses with ``parsing``
and tags its calls with its role name for accounting (``llm.log.summary()["by_role"]``). Every
prompt is fitted into the backend's context (``fit_evidence``) before it is sent.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from canopy_lit.hierarchy.base import cut_prefix, elided
from canopy_lit.llm import prompts
from canopy_lit.llm.base import LLM, LLMError, Message, PromptTooLongError
from canopy_lit.llm.parsing import (
    PARSE_STATS,
    CriticVerdict,
    ParseStats,
    p_yes,
    parse_choice_letter,
    parse_critic,
    parse_followup,
    parse_ircot_step,
    parse_label,
    parse_short_answer,
    yes_no_from_text,
)

#: Used when neither the critic nor the model config gives a threshold; uncalibrated.
DEFAULT_YES_THRESHOLD = 0.5
#: The critic's JSON budget (verdict or follow-up query).
CRITIC_MAX_TOKENS = 96
#: Question tokens set aside when an evidence cap is fitted to a context before any question is seen.
QUESTION_RESERVE_TOKENS = 128

log = logging.getLogger(__name__)
_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(key: str, message: str) -> None:
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(message)


# ----------------------------------------------------------------- fitting prompts into the context


def fit_evidence(
    llm: LLM,
    build: Callable[[Sequence[str]], list[Message]],
    evidence: Sequence[str],
    reply_tokens: int,
    role: str,
) -> list[Message]:
    """``build(evidence)``, with the evidence cut until the prompt and a ``reply_tokens`` reply fit
    the backend's context (``llm.context_length``; unknown = as built).

    The cut follows the loop's reader cap: pieces are kept whole newest (last) first while they
    fit, the first that does not is cut at a word boundary to the tokens left (``hierarchy.base.cut_prefix``, as the reader cap),
    older ones are dropped. The loop's cap keeps prompts within the context for questions up to
    ``QUESTION_RESERVE_TOKENS`` tokens (``evidence_room``); a cut here is logged once per role.

    Raises:
        PromptTooLongError: the prompt does not fit even without evidence (the question or the
            worked examples are too long): the question's own failure, not the backend's.
    """
    messages = build(evidence)
    limit = getattr(llm, "context_length", None)
    if not limit:
        return messages
    budget = limit - reply_tokens
    if prompts.prompt_tokens_bound(messages) <= budget:  # short enough without counting a token
        return messages
    count = llm.count_tokens
    fixed = prompts.prompt_tokens(build([]), count)
    if fixed > budget:
        raise PromptTooLongError(
            f"{role} prompt: {fixed} tokens without any evidence and a {reply_tokens}-token reply exceed the "
            f"{getattr(llm, 'name', 'llm')} context of {limit} tokens (the question is too long for it)"
        )
    sizes = [count(e) + prompts.EVIDENCE_FRAME_TOKENS for e in evidence]
    room = budget - fixed
    if sum(sizes) <= room:
        return messages
    kept: list[str] = []
    for i in reversed(range(len(evidence))):
        if sizes[i] <= room:
            kept.append(evidence[i])
            room -= sizes[i]
            continue
        end = cut_prefix(evidence[i], 0, room - prompts.EVIDENCE_FRAME_TOKENS, count)
        if end is not None:
            kept.append(elided(evidence[i], end))
        break
    kept.reverse()
    _warn_once(
        f"fit:{role}",
        f"{role} prompt cut to the {getattr(llm, 'name', 'llm')} context of {limit} tokens: "
        f"{len(evidence)} evidence pieces ({sum(sizes)} tokens) do not fit beside the question, "
        f"{len(kept)} are kept (oldest dropped first); lower loop.reader_max_tokens or raise the context "
        "(logged once per role)",
    )
    return build(kept)


def evidence_room(llm: LLM, reply_tokens: int) -> int | None:
    """Evidence tokens that fit the backend's context beside the longest critic or reader prompt, a
    question of ``QUESTION_RESERVE_TOKENS`` tokens and a ``reply_tokens`` reply; None when the
    context is unknown. The loop's reader cap should not exceed it."""
    limit = getattr(llm, "context_length", None)
    if not limit:
        return None
    skeletons = [build("", []) for build in (prompts.critic_json, prompts.critic_yes_no, prompts.critic_followup,
                                             prompts.reader)]  # fmt: skip
    try:
        fixed = max(prompts.prompt_tokens(m, llm.count_tokens) for m in skeletons)
    except LLMError:  # a server that cannot count yet: its questions will say why; bound the skeleton instead
        fixed = max(prompts.prompt_tokens_bound(m) for m in skeletons)
    return max(0, limit - reply_tokens - fixed - QUESTION_RESERVE_TOKENS)


def _yes_probability(llm: LLM, messages: list, role: str, top_logprobs: int, stats: ParseStats) -> float:
    """P(yes) of the first generated token; the text decides (1/0) if no yes/no token is in the top-k."""
    resp = llm.chat(messages, logprobs=top_logprobs, max_tokens=1, role=role)
    p = p_yes(resp.top_logprobs[0]) if resp.top_logprobs else None
    if p is not None:
        stats.record(f"{role}_logprob", True)
        return p
    said = yes_no_from_text(resp.text)
    stats.record(f"{role}_logprob", said is not None)
    return 0.5 if said is None else float(said)


class LLMCritic:
    """Decides whether the evidence so far answers the question, and what to retrieve next.

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
        mode: Literal["json", "logprob"] = "logprob",
        threshold: float | None = None,
        *,
        followup: bool = True,
        max_tokens: int = CRITIC_MAX_TOKENS,
        top_logprobs: int = 10,
        constrained: bool = True,
        stats: ParseStats | None = None,
    ) -> None:
        if mode not in ("json", "logprob"):
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
        return _yes_probability(self.llm, msgs, "critic", self.top_logprobs, self.stats)

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


@dataclass
class ReaderAnswer:
    """The reader's output: ``text`` (short answer, or the chosen option's text) and ``letter`` for MC."""

    text: str
    letter: str | None = None
    raw: str = ""


class LLMReader:
    """Answers from the kept evidence: a short answer, or an option letter for multiple choice."""

    def __init__(self, llm: LLM, *, max_tokens: int = 32, stats: ParseStats | None = None) -> None:
        self.llm = llm
        self.max_tokens = max_tokens
        self.stats = stats or PARSE_STATS

    def answer(self, question: str, evidence: Sequence[str], choices: Sequence[str] | None = None) -> ReaderAnswer:
        msgs = fit_evidence(
            self.llm, lambda ev: prompts.reader(question, ev, choices), evidence, self.max_tokens, "reader"
        )
        resp = self.llm.chat(msgs, max_tokens=self.max_tokens, role="reader")
        if choices:
            letter = parse_choice_letter(resp.text, len(choices), self.stats)
            text = choices[ord(letter) - 65] if letter else parse_short_answer(resp.text, ParseStats())
            return ReaderAnswer(text=text, letter=letter, raw=resp.text)
        return ReaderAnswer(text=parse_short_answer(resp.text, self.stats), raw=resp.text)


class AggregationClassifier:
    """``aggregation`` vs ``lookup`` for a table question, from the question alone.

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

    def is_aggregation(self, question: str) -> bool:
        return self.classify(question) == "aggregation"


class ModalityRouter:
    """Picks the corpus (modality) to search for a question; falls back to the first modality."""

    def __init__(self, llm: LLM, modalities: Sequence[str] = ("text", "table", "image", "video"), *,
                 constrained: bool = True, stats: ParseStats | None = None) -> None:  # fmt: skip
        if not modalities:
            raise ValueError("ModalityRouter: give at least one modality")
        self.llm, self.modalities, self.constrained = llm, tuple(modalities), constrained
        self.stats = stats or PARSE_STATS

    def route(self, question: str) -> str:
        msgs = fit_evidence(
            self.llm, lambda _: prompts.modality_router(question, self.modalities), [], 12, "router"
        )
        resp = self.llm.chat(
            msgs,
            json_mode=prompts.label_schema(self.modalities) if self.constrained else True,
            max_tokens=12,
            role="router",
        )
        return parse_label(resp.text, self.modalities, self.modalities[0], "router", self.stats)[0]


@dataclass
class IRCoTStep:
    sentence: str
    answer: str | None = None


class IRCoTStepper:
    """One IRCoT reasoning step: the next sentence (also the next retrieval query), and the answer once known.

    As in the original IRCoT, only the first generated sentence is kept: a model that writes a whole
    chain at once ("Fact. Fact. So the answer is: X") takes one step (its first fact) and retrieves
    again; it stops only when its first sentence states the answer.

    Args:
        llm: any backend.
        demos: worked examples from training questions (``canopy_lit.pipeline.ircot.load_demos``).
        max_tokens: generation budget per step.
    """

    def __init__(self, llm: LLM, *, demos: Sequence[prompts.IRCoTDemo] = (), max_tokens: int = 64,
                 stats: ParseStats | None = None) -> None:  # fmt: skip
        self.llm, self.demos, self.max_tokens = llm, tuple(demos), max_tokens
        self.stats = stats or PARSE_STATS

    def step(self, question: str, paragraphs: Sequence[str], thoughts: Sequence[str]) -> IRCoTStep:
        msgs = fit_evidence(
            self.llm, lambda ev: prompts.ircot_step(question, ev, thoughts, self.demos), paragraphs,
            self.max_tokens, "ircot",
        )  # fmt: skip
        resp = self.llm.chat(
            msgs,
            max_tokens=self.max_tokens,
            role="ircot",
            stop=["\n\n"],
        )
        text = " ".join((resp.text or "").split())
        first = _FIRST_SENTENCE.split(text, maxsplit=1)[0]
        if _ANSWER_MARK.search(first):
            sentence, answer = parse_ircot_step(text, self.stats)  # the answer span may hold a '.' (1.5 m)
        else:
            sentence, answer = parse_ircot_step(first, self.stats)
        return IRCoTStep(sentence=sentence, answer=answer)


_FIRST_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_ANSWER_MARK = re.compile(r"so\s+the\s+answer\s+is", re.I)


class LLMRelevanceScorer:
    """Cross-encoder-style relevance: P(yes) that a passage helps answer the question.

    Replaces a cross-encoder reranker where none is available (CARVE on CPU): one 1-token call per
    passage; the question-first prompt lets llama.cpp reuse its prefix across passages.
    """

    def __init__(self, llm: LLM, *, top_logprobs: int = 10, stats: ParseStats | None = None) -> None:
        self.llm, self.top_logprobs = llm, top_logprobs
        self.stats = stats or PARSE_STATS

    def score(self, question: str, passages: Sequence[str]) -> list[float]:
        """Scores in [0, 1], one per passage (same order)."""
        return [
            _yes_probability(self.llm, self._fit(question, p), "relevance", self.top_logprobs, self.stats)
            for p in passages
        ]

    def _fit(self, question: str, passage: str) -> list[Message]:
        return fit_evidence(
            self.llm, lambda ev: prompts.relevance(question, ev[0] if ev else ""), [passage], 1, "relevance"
        )
