"""IRCoT as the original runs it: few-shot chains from training questions (never test), one sentence
per step, so a model that writes the whole chain at once still retrieves again. Real bundled HotpotQA;
a scripted stand-in LLM (``ScriptedLLM``) for the generation side."""

from __future__ import annotations

from pathlib import Path

import pytest

from canopy_lit.control import IRCoTController, ircot
from canopy_lit.data import load_split
from canopy_lit.data.splits import split_questions
from canopy_lit.eval.summary import summarize
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.llm import prompts
from canopy_lit.llm.base import BaseLLM, LLMResponse
from canopy_lit.pipeline.loop import EvidenceLoop, LoopSettings
from canopy_lit.refine import KeepWholeRefiner
from canopy_lit.types import Question

ROOT = Path(__file__).resolve().parents[2]
HOTPOT = {"name": "hotpotqa", "path": str(ROOT / "data/hotpotqa"), "seed": 0, "options": {"strict": True}}


class ScriptedLLM(BaseLLM):
    """Replies with ``reply`` to every call and keeps the prompts it was sent."""

    name = "scripted"

    def __init__(self, reply: str) -> None:
        super().__init__()
        self.reply = reply
        self.prompts: list[str] = []

    def _complete(self, messages, **options) -> LLMResponse:
        self.prompts.append("\n".join(str(m["content"]) for m in messages))
        return LLMResponse(text=self.reply, prompt_tokens=1, completion_tokens=1)

    def count_tokens(self, text: str) -> int:
        return len(text.split())


@pytest.fixture(scope="module")
def hotpot():
    return load_split(**HOTPOT, split="all")


def test_demos_come_from_train_questions_with_their_gold_sentences_as_steps(hotpot) -> None:
    bench, _ = hotpot
    demos = ircot.load_demos(HOTPOT, 3, Hierarchy(2))
    train = {q.text: q for q in split_questions(bench, "train")}
    test = {q.text for q in split_questions(bench, "test")}
    assert len(demos) == 3
    for d in demos:
        assert d.question in train and d.question not in test
        q = train[d.question]
        assert d.answer == q.answers[0] and d.reasoning().endswith(f"So the answer is: {q.answers[0]}.")
        assert len(d.steps) == sum(len(set(g)) for g in q.gold.values())  # one step per supporting sentence
        for step, para in zip(d.steps, d.paragraphs):
            assert step[:40] in " ".join(para.split())


def test_test_split_is_refused_and_an_overlap_with_test_is_an_error(hotpot, monkeypatch) -> None:
    with pytest.raises(ValueError, match="never the evaluated test split"):
        ircot.load_demos(HOTPOT, 2, Hierarchy(2), split="test")
    # If the split machinery ever put a demonstration's question in test, loading must fail, not leak.
    import canopy_lit.data.splits as splits

    real = splits.split_questions
    monkeypatch.setattr(splits, "split_questions", lambda b, s, seed=0, *a: real(b, "train" if s == "test" else s, seed))
    with pytest.raises(ValueError, match="overlaps the test split"):
        ircot.load_demos(HOTPOT, 2, Hierarchy(2))


def test_demos_precede_the_question_in_the_step_prompt(hotpot) -> None:
    demos = ircot.load_demos(HOTPOT, 2, Hierarchy(2))
    text = prompts.ircot_step("Who?", ["A paragraph."], [], demos)[1]["content"]
    assert text.index(demos[0].question) < text.index(demos[1].question) < text.index("Question: Who?")
    assert text.count("So the answer is:") == 2  # the demos' chains; none for the open question


@pytest.mark.parametrize(
    ("reply", "sentence", "answer"),
    [
        ("Paris hosted the 1900 Games. So the answer is: Paris.", "Paris hosted the 1900 Games.", None),
        ("So the answer is: 1.5 million. Extra text.", "So the answer is: 1.5 million.", "1.5 million"),
        ("The host city was Paris, so the answer is: Paris.", "The host city was Paris, so the answer is: Paris.", "Paris"),
    ],
)
def test_only_the_first_sentence_of_a_step_counts(reply, sentence, answer) -> None:
    step = IRCoTController(ScriptedLLM(reply)).next_step("Q?", ["p"], [])
    assert (step.sentence, step.answer) == (sentence, answer)


class Pool:
    """Returns the question's first k candidates not yet held."""

    def __init__(self, bench) -> None:
        self.bench = bench
        self.queries: list[str] = []

    def retrieve(self, query, k, exclude, question):
        self.queries.append(query)
        return [self.bench.items[i] for i in self.bench.candidates[question.id] if i not in exclude][:k]


def test_a_model_that_writes_the_whole_chain_at_once_still_iterates(hotpot) -> None:
    """The 1.5B reader wrote "... So the answer is: X" at its first step on every question: IRCoT
    must then retrieve with its first sentence, as the original does, instead of stopping."""
    bench, _ = hotpot
    q: Question = split_questions(bench, "test")[0]
    llm = ScriptedLLM("Arthur's Magazine was started in 1844. So the answer is: Arthur's Magazine.")
    pool = Pool(bench)
    loop = EvidenceLoop(
        pool, Hierarchy(2), KeepWholeRefiner(), type("R", (), {"answer": lambda self, q, e: "x"})(),
        llm.count_tokens, controller=IRCoTController(llm),
        settings=LoopSettings(k=2, max_rounds=3, exclude_seen=True),
    )
    rec = loop.run(q)
    assert len(rec.rounds) == 3
    assert pool.queries[1:] == ["Arthur's Magazine was started in 1844."] * 2
    assert llm.log.summary()["by_role"]["ircot"]["calls"] == 2  # no step after the last round


def test_multi_retrieval_share_counts_questions_with_more_than_one_round() -> None:
    recs = [
        {"id": str(i), "status": "ok", "scores": {"f1": 1.0}, "rounds": [{"retrieved": ["a"]}] * n}
        for i, n in enumerate([1, 2, 3, 1])
    ]
    assert summarize(recs)["eval/multi_retrieval_share"] == pytest.approx(0.5)
