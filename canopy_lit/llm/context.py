"""Prompts fitted into a backend's context, and the one-token P(yes) call.

Every LLM role (critic, reader, aggregation check, router, IRCoT, relevance) builds its prompt from
``prompts`` and sends it through ``fit_evidence``, so that evidence is cut, never the question; ``evidence_room``
is the cap the loop's evidence budget takes from a backend's context.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from canopy_lit.hierarchy.base import cut_prefix, elided
from canopy_lit.llm import prompts
from canopy_lit.llm.base import LLM, LLMError, Message, PromptTooLongError
from canopy_lit.llm.parsing import ParseStats, p_yes, yes_no_from_text

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


def yes_probability(llm: LLM, messages: list, role: str, top_logprobs: int, stats: ParseStats) -> float:
    """P(yes) of the first generated token; the text decides (1/0) if no yes/no token is in the top-k."""
    resp = llm.chat(messages, logprobs=top_logprobs, max_tokens=1, role=role)
    p = p_yes(resp.top_logprobs[0]) if resp.top_logprobs else None
    if p is not None:
        stats.record(f"{role}_logprob", True)
        return p
    said = yes_no_from_text(resp.text)
    stats.record(f"{role}_logprob", said is not None)
    return 0.5 if said is None else float(said)
