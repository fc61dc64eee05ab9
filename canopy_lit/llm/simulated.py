"""A simulated-latency backend: canned, deterministic replies priced on a virtual clock.

It answers every role of the pipeline without a model (critic verdicts and follow-ups, reader
answers, labels) and charges each call what a serving engine would: a fixed per-call cost, a cost
per prefilled prompt token and one per decoded token. A batch of n calls is priced as an engine
runs it: one overhead, the prefill of every prompt, and decode steps for the longest reply only
(the n sequences decode side by side). No time passes: ``clock`` adds up simulated seconds, so a
benchmark of 1,000 questions is fast and exactly reproducible (``perf/batched_loop.py``).
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from canopy_lit.llm.base import (
    BaseLLM,
    GenerationOptions,
    LLMResponse,
    Message,
    PromptTooLongError,
    generation_options,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

_QUESTION = re.compile(r"^Question: (.*)$", re.M)


class SimulatedLLM(BaseLLM):
    """Deterministic replies on a virtual clock.

    Replies: the critic (log-prob or JSON) judges the evidence insufficient until its
    ``sufficient_round``-th verdict on a question (counted per question text), then sufficient; a
    follow-up query is the question plus `` (details)``; labels are ``lookup`` when offered, else
    the first label; anything else (the reader) answers ``answer``.

    Args:
        call_overhead_s: fixed cost of one engine call (scheduling, HTTP, sampling set-up).
        prefill_s_per_token: cost of one prompt token.
        decode_s_per_token: cost of one generated token (one decode step).
        sufficient_round: the critic's verdict number (1-based, per question) that first says sufficient.
        answer: the reader's reply.
        context_length: refuse a call whose prompt and ``max_tokens`` exceed this many tokens, as
            a served model does (None = no limit).
    """

    name = "simulated"

    def __init__(
        self,
        *,
        call_overhead_s: float = 0.05,
        prefill_s_per_token: float = 2e-4,
        decode_s_per_token: float = 0.02,
        sufficient_round: int = 2,
        answer: str = "simulated answer",
        context_length: int | None = None,
        calibration: dict[str, float] | None = None,
    ) -> None:
        super().__init__(calibration=calibration)
        if min(call_overhead_s, prefill_s_per_token, decode_s_per_token) < 0:
            raise ValueError(
                "simulated llm: call_overhead_s, prefill_s_per_token and decode_s_per_token must be >= 0"
            )
        self.call_overhead_s = call_overhead_s
        self.prefill_s_per_token = prefill_s_per_token
        self.decode_s_per_token = decode_s_per_token
        self.sufficient_round = sufficient_round
        self.answer = answer
        self.context_length = context_length
        self.clock = 0.0  # simulated seconds spent by every call so far
        self.calls = 0
        self.engine_calls = 0
        self._verdicts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def count_tokens(self, text: str) -> int:
        """Whitespace words: a stand-in tokenizer, deterministic and free."""
        return len(text.split())

    def batch_cost(self, prompt_tokens: Sequence[int], completion_tokens: Sequence[int]) -> float:
        """Simulated seconds of one engine call over a batch: overhead + all prefill + the longest decode."""
        if not prompt_tokens:
            return 0.0
        return (
            self.call_overhead_s
            + self.prefill_s_per_token * sum(prompt_tokens)
            + self.decode_s_per_token * max(completion_tokens)
        )

    def _verdict(self, messages: list[Message]) -> bool:
        text = "\n".join(str(m.get("content", "")) for m in messages)
        m = _QUESTION.search(text)
        key = m.group(1) if m else text
        with self._lock:
            self._verdicts[key] += 1
            return self._verdicts[key] >= self.sufficient_round

    def _reply(
        self, messages: list[Message], json_mode: bool | dict[str, Any], logprobs: int
    ) -> tuple[str, list]:
        props = (json_mode.get("properties") or {}) if isinstance(json_mode, dict) else {}
        if "label" in props:
            labels = list(props["label"].get("enum") or ["lookup"])
            return json.dumps({"label": "lookup" if "lookup" in labels else labels[0]}), []
        if "sufficient" in props:  # JSON critic: verdict and follow-up in one call
            ok = self._verdict(messages)
            q = self._question(messages)
            return json.dumps({"sufficient": ok, "missing": [] if ok else ["details"],
                               "followup_query": "" if ok else f"{q} (details)"}), []  # fmt: skip
        if "followup_query" in props:
            return json.dumps(
                {"missing": ["details"], "followup_query": f"{self._question(messages)} (details)"}
            ), []
        if logprobs:  # the log-prob critic's one-token verdict
            p = 0.9 if self._verdict(messages) else 0.1
            word = "Yes" if p > 0.5 else "No"
            return word, [{"Yes": math.log(p), "No": math.log(1 - p)}]
        return self.answer, []

    @staticmethod
    def _question(messages: list[Message]) -> str:
        m = _QUESTION.search("\n".join(str(x.get("content", "")) for x in messages))
        return m.group(1).strip() if m else ""

    def _complete(self, messages: list[Message], **kw: Any) -> LLMResponse:
        prompt = sum(self.count_tokens(str(m.get("content", ""))) for m in messages)
        if self.context_length is not None and prompt + kw["max_tokens"] > self.context_length:
            raise PromptTooLongError(
                f"simulated: {prompt} prompt + {kw['max_tokens']} reply tokens exceed the maximum context "
                f"length of {self.context_length}"
            )
        text, tops = self._reply(messages, kw["json_mode"], kw["logprobs"])
        completion = max(1, min(kw["max_tokens"], self.count_tokens(text)))
        return LLMResponse(
            text=text, prompt_tokens=prompt, completion_tokens=completion, top_logprobs=tops[:1]
        )

    def chat(
        self, messages: Sequence[Message], *, role: str = "reader", **options: Unpack[GenerationOptions]
    ) -> LLMResponse:
        """One call, priced as a batch of one."""
        return self.chat_batch([messages], role=role, **options)[0]

    def chat_batch(
        self,
        batch: Sequence[Sequence[Message]],
        *,
        role: str = "reader",
        return_exceptions: bool = False,
        **options: Unpack[GenerationOptions],
    ) -> list[Any]:
        """One simulated engine call for the whole batch; each reply's ``seconds`` is its share of the cost.

        ``return_exceptions``: a refused conversation's error takes its place (else it is raised).
        """
        kw = generation_options(**options)
        outs: list[LLMResponse | Exception] = []
        for messages in batch:
            try:
                outs.append(self._complete(self.prepare(messages), **kw))
            except Exception as err:
                self.log.add(role, 0, 0, 0.0, ok=False)
                if not return_exceptions:
                    raise
                outs.append(err)
        done = [o for o in outs if isinstance(o, LLMResponse)]
        cost = self.batch_cost([o.prompt_tokens for o in done], [o.completion_tokens for o in done])
        with self._lock:
            self.clock += cost
            self.calls += len(done)
            self.engine_calls += 1 if done else 0
        return [self._record(o, role, cost / len(done)) if isinstance(o, LLMResponse) else o for o in outs]

    def __repr__(self) -> str:
        return (
            f"SimulatedLLM(overhead={self.call_overhead_s}s, prefill={self.prefill_s_per_token}s/tok, "
            f"decode={self.decode_s_per_token}s/tok)"
        )
