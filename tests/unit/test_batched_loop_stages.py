"""Round-synchronous loop (pipeline/batched.py) and the simulated-latency backend (llm/simulated.py).

The loop runs the real critic/reader roles on ``SimulatedLLM`` (canned deterministic replies) over a
hand-made five-item pool, so sequential and batched runs can be compared record by record in
milliseconds; the same comparison on SmolLM2 + MiniLM is tests/integration/test_batched_loop.py.
"""

from __future__ import annotations

import pytest

from canopy_lit.control import LLMCritic
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.llm.base import BaseLLM, LLMError, LLMResponse, user
from canopy_lit.llm.simulated import SimulatedLLM
from canopy_lit.pipeline.batched import BatchedQuestionRunner, BatchingLLM
from canopy_lit.pipeline.build import QuestionRunner
from canopy_lit.pipeline.loop import EvidenceLoop, LoopSettings
from canopy_lit.reader import LLMReader
from canopy_lit.refine import KeepWholeRefiner
from canopy_lit.types import Item, Question

ITEMS = [
    Item(f"i{n}", "text", title=f"T{n}", sentences=[f"Fact {n} one.", f"Fact {n} two."]) for n in range(5)
]
QUESTIONS = [Question(f"q{n}", f"Question number {n}?", [f"a{n}"], "unit") for n in range(7)]


class RotatingRetriever:
    """Hand-made stand-in: items rotated by the query's length, so follow-up queries fetch other items."""

    def retrieve(self, query, k, exclude, question):
        shift = len(query) % len(ITEMS)
        ranked = ITEMS[shift:] + ITEMS[:shift]
        return [it for it in ranked if it.id not in exclude][:k]


def make(
    sufficient_round: int = 2, max_rounds: int = 3, sim: SimulatedLLM | None = None
) -> tuple[EvidenceLoop, BatchingLLM, SimulatedLLM]:
    sim = sim or SimulatedLLM(sufficient_round=sufficient_round)
    llm = BatchingLLM(sim)
    loop = EvidenceLoop(
        RotatingRetriever(),
        Hierarchy(),
        KeepWholeRefiner(),
        LLMReader(llm),
        llm.count_tokens,
        controller=LLMCritic(llm, mode="logprob", threshold=0.5),
        settings=LoopSettings(k=2, max_rounds=max_rounds),
    )
    return loop, llm, sim


def comparable(rec) -> dict:
    d = rec.to_dict()
    for key in ("time_s", "latency_s"):
        d.pop(key)
    return d


def test_batched_records_equal_sequential_and_calls_arrive_in_batches() -> None:
    loop, llm, seq_sim = make()
    sequential = [QuestionRunner(loop, llm).run(q) for q in QUESTIONS]
    loop, llm, bat_sim = make()
    runner = BatchedQuestionRunner(loop, llm)
    batched = runner.run_all(QUESTIONS, batch_size=len(QUESTIONS))
    assert [comparable(r) for r in batched] == [comparable(r) for r in sequential]
    assert sequential[0].llm_calls == {"critic": 3, "reader": 1}  # verdict, follow-up, verdict; reader
    # every stage of every question went in one engine call: 4 stages, 7 questions each
    assert llm.scheduler.batch_sizes == [7, 7, 7, 7]
    assert bat_sim.engine_calls == 4 and seq_sim.engine_calls == 28
    assert bat_sim.clock < seq_sim.clock / 3


def test_questions_at_different_stages_share_a_barrier_without_mixing_stages() -> None:
    """With more questions than slots, a finished question's slot starts the next one mid-run."""
    loop, llm, sim = make()
    seq_loop, seq_llm, _ = make()
    batched = BatchedQuestionRunner(loop, llm).run_all(QUESTIONS, batch_size=3)
    sequential = [QuestionRunner(seq_loop, seq_llm).run(q) for q in QUESTIONS]
    assert [comparable(r) for r in batched] == [comparable(r) for r in sequential]
    assert max(llm.scheduler.batch_sizes) == 3 and sum(llm.scheduler.batch_sizes) == 4 * len(QUESTIONS)
    assert llm.log.summary()["calls"] == 4 * len(QUESTIONS)
    assert {r.scope for r in llm.log.records} == {q.id for q in QUESTIONS}  # each call on its own question


class FailingBackend(SimulatedLLM):
    def chat_batch(self, batch, **kwargs):
        raise LLMError("simulated backend down")


def test_a_failed_batch_fails_each_of_its_questions_and_the_run_ends() -> None:
    sim = FailingBackend()
    llm = BatchingLLM(sim)
    loop = EvidenceLoop(RotatingRetriever(), Hierarchy(), KeepWholeRefiner(), LLMReader(llm),
                        llm.count_tokens, controller=LLMCritic(llm, threshold=0.5),
                        settings=LoopSettings(k=2, max_rounds=2))  # fmt: skip
    out = BatchedQuestionRunner(loop, llm).run_all(QUESTIONS[:4], batch_size=4)
    assert all(isinstance(r, LLMError) and "backend down" in str(r) for r in out)
    assert llm.log.summary()["failed"] == 4
    with pytest.raises(ValueError, match="batch_size"):
        BatchedQuestionRunner(loop, llm).run_all(QUESTIONS, batch_size=0)


class RefusesQuestion3(SimulatedLLM):
    """Refuses every call about one question, as a server refuses one bad request of a batch."""

    def _complete(self, messages, **kw):
        if any("Question number 3?" in str(m.get("content")) for m in messages):
            raise LLMError("simulated backend: request refused")
        return super()._complete(messages, **kw)


def test_a_failing_call_fails_only_its_own_question_as_in_the_sequential_loop() -> None:
    questions = QUESTIONS[:6]
    loop, llm, _ = make(sim=RefusesQuestion3())
    sequential: list = []
    for q in questions:
        try:
            sequential.append(QuestionRunner(loop, llm).run(q))
        except LLMError as err:
            sequential.append(err)
    loop, llm, sim = make(sim=RefusesQuestion3())
    batched = BatchedQuestionRunner(loop, llm).run_all(questions, batch_size=len(questions))
    assert [isinstance(r, LLMError) for r in batched] == [False, False, False, True, False, False]
    assert "request refused" in str(batched[3]) and isinstance(sequential[3], LLMError)
    assert [comparable(r) for i, r in enumerate(batched) if i != 3] == [
        comparable(r) for i, r in enumerate(sequential) if i != 3
    ]
    assert llm.scheduler.batch_sizes[0] == 6 and sim.engine_calls == len(llm.scheduler.batch_sizes)
    assert llm.log.summary()["failed"] == 1 and sim.log.summary()["failed"] == 1


class Echo(BaseLLM):
    """The plain ``BaseLLM.chat_batch`` path (one call after another): echoes, refuses "bad"."""

    def _complete(self, messages, **kw):
        text = str(messages[-1]["content"])
        if text == "bad":
            raise LLMError("echo backend: refused")
        return LLMResponse(text=text)

    def count_tokens(self, text: str) -> int:
        return len(text.split())


def test_a_batch_returns_each_failure_in_its_place_when_asked() -> None:
    llm = Echo()
    outs = llm.chat_batch([[user("a")], [user("bad")], [user("c")]], return_exceptions=True)
    assert [o.text if isinstance(o, LLMResponse) else type(o).__name__ for o in outs] == ["a", "LLMError", "c"]
    with pytest.raises(LLMError, match="refused"):
        llm.chat_batch([[user("a")], [user("bad")]])
    assert llm.log.summary()["failed"] == 2


def test_simulated_batch_costs_one_overhead_all_prefill_and_the_longest_decode() -> None:
    sim = SimulatedLLM(call_overhead_s=1.0, prefill_s_per_token=0.01, decode_s_per_token=0.1)
    convs = [[user("one two three")], [user("four five")]]
    outs = sim.chat_batch(convs, role="reader", max_tokens=8)
    assert [o.prompt_tokens for o in outs] == [3, 2] and [o.completion_tokens for o in outs] == [2, 2]
    assert sim.clock == pytest.approx(1.0 + 0.01 * 5 + 0.1 * 2)
    alone = SimulatedLLM(call_overhead_s=1.0, prefill_s_per_token=0.01, decode_s_per_token=0.1)
    for c in convs:
        alone.chat(c, role="reader", max_tokens=8)
    assert alone.clock == pytest.approx(2 * 1.0 + 0.01 * 5 + 0.1 * 4)
    assert sim.log.summary()["seconds"] == pytest.approx(sim.clock)  # the call log holds simulated seconds
    with pytest.raises(ValueError, match="must be >= 0"):
        SimulatedLLM(decode_s_per_token=-1)
