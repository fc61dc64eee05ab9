"""LLMModalityRouter over the LLM layer's ModalityRouter, with a scripted fake LLM (no model)."""

from __future__ import annotations

from canopy_lit.llm.base import LLMResponse
from canopy_lit.retrieval.router import LLMModalityRouter


class FakeScriptedLLM:
    """Answers every chat with a fixed text and records the prompts it was shown."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.prompts: list[str] = []

    def chat(self, messages, **kwargs) -> LLMResponse:
        self.prompts.append("\n".join(m["content"] for m in messages))
        return LLMResponse(self.answer)


def test_routes_only_to_partitions_the_index_holds() -> None:
    llm = FakeScriptedLLM('{"label": "table"}')
    router = LLMModalityRouter(llm)
    router.restrict(["table", "text"])  # what FaissRetriever does with index.groups
    assert router.modalities == ("text", "table")
    assert router.route("how many goals did x score in 2004?") == ["table"]
    assert "video" not in llm.prompts[-1] and "table" in llm.prompts[-1]
    router.route("how many goals did x score in 2004?")
    assert router.calls == 1 and len(llm.prompts) == 1  # cached per query text


def test_unparseable_answer_falls_back_to_first_modality() -> None:
    router = LLMModalityRouter(FakeScriptedLLM("no idea"), ("text", "table"))
    assert router.route("q") == ["text"]
