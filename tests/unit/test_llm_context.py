"""Issue "Numbers you can trust, round 2" item 10: the critic's evidence is capped as the reader's, and
every prompt is fitted into the backend's context.

``SimulatedLLM`` counts whitespace words as tokens and, given ``context_length``, refuses a call whose
prompt and reply budget exceed it, as a served model does; the real llama.cpp case (SmolLM2 with a
small ``n_ctx``) is tests/integration/test_llm_context_llamacpp.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from hydra import compose

from canopy_lit.control import Decision, LLMCritic
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.llm import LLMError
from canopy_lit.llm.simulated import SimulatedLLM
from canopy_lit.pipeline.loop import EvidenceLoop, LoopSettings
from canopy_lit.reader import LLMReader
from canopy_lit.refine import KeepWholeRefiner
from canopy_lit.types import Item, Question

ITEMS = [
    Item(f"i{n}", "text", title=f"T{n}", sentences=[f"Fact {n} " + "word " * 18 + "end.", f"Fact {n} two."])
    for n in range(6)
]


class TwoPerRound:
    """Hand-made stand-in retriever: the next two items not yet held, in order."""

    def retrieve(self, query: str, k: int, exclude: set[str], question: Question) -> list[Item]:
        return [it for it in ITEMS if it.id not in exclude][:k]


class RecordingController:
    """Never satisfied; records the evidence of every call."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def step(self, question: Question, evidence: list[str], round: int, history: list[dict[str, Any]]) -> Decision:
        self.calls.append(list(evidence))
        return Decision(stop=False, followup=f"{question.text} more")


def test_the_critic_gets_the_evidence_the_reader_gets_under_the_cap() -> None:
    sim = SimulatedLLM()
    controller = RecordingController()
    cap = 60  # one round of two items (~2 x 26 words) fits, two rounds do not
    loop = EvidenceLoop(
        TwoPerRound(), Hierarchy(), KeepWholeRefiner(), LLMReader(sim), sim.count_tokens,
        controller=controller, settings=LoopSettings(k=2, max_rounds=3, exclude_seen=True, reader_max_tokens=cap),
    )  # fmt: skip
    loop.run(Question("q", "Which fact?", ["x"], "unit"))
    assert len(controller.calls) == 2
    for evidence in controller.calls:
        assert sum(sim.count_tokens(b) for b in evidence) <= cap
    # after round 2 the newest round is whole and the older one gave way (cut or dropped), as for the reader
    whole = {b.split(":")[0]: sim.count_tokens(b) for b in controller.calls[0]}
    after = {b.split(":")[0]: sim.count_tokens(b) for b in controller.calls[1]}
    assert after["T2"] == after["T3"] == whole["T0"] and after.get("T0", 0) < whole["T0"]
    assert "T1" not in after


class Recording(SimulatedLLM):
    """Keeps the user message of every call."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.prompts: list[str] = []

    def _complete(self, messages: list, **kw: Any):
        self.prompts.append(str(messages[-1]["content"]))
        return super()._complete(messages, **kw)


EVIDENCE = [f"piece{n} " + "filler " * 39 for n in range(5)]  # 5 x 40 words, oldest first


@pytest.mark.parametrize("mode", ["json", "logprob"])
def test_critic_and_reader_prompts_are_fitted_to_the_context_newest_evidence_first(mode: str) -> None:
    sim = Recording(context_length=260, sufficient_round=99)  # the critic never says sufficient
    verdict = LLMCritic(sim, mode=mode, threshold=0.5).judge("Which piece?", EVIDENCE)
    assert not verdict.sufficient and verdict.followup_query
    answer = LLMReader(sim).read("Which piece?", EVIDENCE)
    assert answer.text == "simulated answer"
    assert sim.log.summary()["failed"] == 0  # the backend refused no prompt
    assert len(sim.prompts) == (2 if mode == "json" else 3)
    for prompt in sim.prompts:
        shown = [f"piece{n}" in prompt for n in range(5)]
        assert shown[-1] and not shown[0]  # the newest piece is there, the oldest gave way
        assert shown == sorted(shown)  # never an older piece without every newer one


def test_a_piece_that_does_not_fit_whole_is_cut_at_a_word_boundary() -> None:
    from canopy_lit.llm import prompts

    question, newest = "Which piece?", "newest " * 60
    fixed = prompts.prompt_tokens(prompts.reader(question, []), SimulatedLLM().count_tokens)
    frame = prompts.EVIDENCE_FRAME_TOKENS
    sim = Recording(context_length=fixed + 32 + (60 + frame) + (10 + frame))  # room for 10 words of piece0
    LLMReader(sim).read(question, [EVIDENCE[0], newest])
    (prompt,) = sim.prompts
    assert prompt.count("newest") == 60  # the newest piece whole
    cut = prompt.split("\n\n[2] newest")[0].split("[1] ")[1]
    assert cut == "piece0 " + "filler " * 8 + "…"  # the older one cut after a word, marked as cut


def test_a_question_too_long_for_the_context_is_the_callers_error() -> None:
    from canopy_lit.eval.harness import failed_record
    from canopy_lit.llm.base import PromptTooLongError

    sim = SimulatedLLM(context_length=100)
    question = "why " * 200
    with pytest.raises(PromptTooLongError, match=r"critic prompt: \d+ tokens without any evidence") as info:
        LLMCritic(sim, mode="json").judge(question, EVIDENCE)
    assert not isinstance(info.value, LLMError)
    rec = failed_record(Question("q", question, ["a"], "unit"), info.value)
    assert rec["backend_failure"] is False  # a healthy backend's streak is not charged for it


def test_the_loop_cap_is_lowered_to_what_the_llm_context_holds(hydra_ctx, capsys) -> None:
    from canopy_lit.control import CRITIC_MAX_TOKENS
    from canopy_lit.llm.context import evidence_room
    from canopy_lit.pipeline.build import build_loop

    cfg = compose(config_name="evaluate", overrides=["method=no_retrieval", "llm=simulated", "+llm.context_length=1024"])
    assert cfg.loop.reader_max_tokens == 16000
    runner = build_loop(cfg, bench=None)
    room = evidence_room(runner.llm, CRITIC_MAX_TOKENS)
    assert room is not None and 600 < room < 1024 - CRITIC_MAX_TOKENS
    assert runner.loop.settings.reader_max_tokens == room
    assert "loop.reader_max_tokens=16000 does not fit the llm's context of 1024 tokens" in capsys.readouterr().err
