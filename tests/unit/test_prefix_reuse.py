"""Prefix reuse: cached prompt tokens are counted per call, and the loop's prompts extend each other.

``PrefixCachingStub`` is a hand-made stand-in for a one-slot KV cache (it reports as cached the
words a prompt shares with the previous prompt, from the start); the llama.cpp test checks the
same on the real engine with SmolLM2.
"""

from __future__ import annotations

import pytest

from canopy_lit.control import LLMCritic
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.llm import prompts
from canopy_lit.llm.base import CallLog, LLMResponse
from canopy_lit.llm.simulated import SimulatedLLM
from canopy_lit.pipeline.build import QuestionRunner
from canopy_lit.pipeline.loop import EvidenceLoop, LoopSettings
from canopy_lit.reader import LLMReader
from canopy_lit.refine import KeepWholeRefiner
from canopy_lit.types import Item, Question

# paragraph-sized items (~45 words, a HotpotQA paragraph is 60-120)
ITEMS = [
    Item(
        f"i{n}",
        "text",
        title=f"T{n}",
        sentences=[f"Fact {n} is stated in sentence {j} of this paragraph, with detail." for j in range(4)],
    )
    for n in range(6)
]


class PrefixCachingStub(SimulatedLLM):
    """Reports the words shared with the previous prompt (from the start) as served from cache."""

    def __init__(self) -> None:
        super().__init__(sufficient_round=2)
        self.previous: list[str] = []

    def _complete(self, messages, **kw) -> LLMResponse:
        resp = super()._complete(messages, **kw)
        words = " ".join(str(m["content"]) for m in messages).split()
        shared = 0
        for a, b in zip(words, self.previous):
            if a != b:
                break
            shared += 1
        self.previous = words
        resp.cached_tokens = shared
        return resp


class NextItems:
    """Hand-made retriever: each round hands out the next two items."""

    def retrieve(self, query, k, exclude, question):
        return [it for it in ITEMS if it.id not in exclude][:k]


def test_call_log_counts_cached_and_prefilled_tokens() -> None:
    log = CallLog()
    with log.scope("q1"):
        log.add("critic", 100, 1, 0.5, cached_tokens=70)
        log.add("reader", 80, 5, 0.2, cached_tokens=60)
    log.add("critic", 40, 1, 0.1, scope="q2")  # a batched call attributed to its own question
    s = log.summary(scope="q1")
    assert (s["prompt_tokens"], s["cached_tokens"], s["prefill_tokens"]) == (180, 130, 50)
    assert s["by_role"]["critic"]["cached_tokens"] == 70
    assert log.summary(scope="q2")["prefill_tokens"] == 40


def test_loop_prompts_extend_each_other_so_most_prompt_tokens_are_cached() -> None:
    """Critic rounds and the reader share system + question + earlier evidence: only new text is prefilled."""
    llm = PrefixCachingStub()
    loop = EvidenceLoop(
        NextItems(), Hierarchy(), KeepWholeRefiner(), LLMReader(llm), llm.count_tokens,
        controller=LLMCritic(llm, mode="logprob", threshold=0.5),
        settings=LoopSettings(k=2, max_rounds=3, exclude_seen=True),
    )  # fmt: skip
    rec = QuestionRunner(loop, llm).run(Question("q", "Which fact connects 0 and 5?", ["x"], "unit"))
    assert rec.llm_calls == {"critic": 3, "reader": 1}  # verdict + follow-up, verdict (sufficient), reader
    prompt = sum(rec.llm_tokens.values()) - sum(r.completion_tokens for r in llm.log.records)
    prefill = sum(rec.llm_prefill_tokens.values())
    assert prefill < 0.5 * prompt, (prefill, prompt)  # every prompt prefilled in full: prefill == prompt
    # the reader's prompt extends the last verdict's prompt: only its task line is new
    assert rec.llm_prefill_tokens["reader"] <= len(
        prompts.reader("q", ["e"])[1]["content"].split("Task:")[1].split()
    )


def test_llamacpp_reports_cached_prefix_tokens_and_can_turn_reuse_off() -> None:
    from canopy_lit.assets import AssetError, resolve

    try:
        path = resolve("smollm2-135m")
    except AssetError as err:
        pytest.skip(f"smollm2-135m asset unavailable: {err}")
    from canopy_lit.llm.llamacpp import LlamaCppLLM

    llm = LlamaCppLLM(str(path), n_ctx=2048, n_threads=1, n_batch=256)
    q = "Who directed the film that won Best Picture in 1995?"
    e1 = ["Forrest Gump won the Academy Award for Best Picture in 1995."]
    e2 = [*e1, "Robert Zemeckis directed Forrest Gump, a 1994 film."]
    calls = [prompts.critic_yes_no(q, e1), prompts.critic_followup(q, e1), prompts.critic_yes_no(q, e2),
             prompts.reader(q, e2)]  # fmt: skip
    try:
        first = [llm.chat(m, role="critic", max_tokens=1) for m in calls]
        llm.cache_prompt = False
        again = [llm.chat(m, role="critic", max_tokens=1) for m in calls]
    finally:
        llm.close()
    assert all(r.cached_tokens > 0.5 * r.prompt_tokens for r in first[1:]), [r.cached_tokens for r in first]
    assert all(r.cached_tokens == 0 for r in again)
    s = llm.log.summary()
    assert s["cached_tokens"] == sum(r.cached_tokens for r in first)
    assert s["prefill_tokens"] == s["prompt_tokens"] - s["cached_tokens"]
