"""LLMModalityRouter over ModalityRouter, with a scripted fake LLM (no model)."""

from __future__ import annotations

from pathlib import Path

import pytest

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


def test_universalrag_config_builds_a_restricted_llm_router(monkeypatch) -> None:
    """``method=universalrag``: the pipeline's corpus retriever routes through ``LLMModalityRouter``."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from canopy_lit.pipeline import build
    from canopy_lit.retrieval.retriever import FaissRetriever

    class TextTableIndex:
        groups = ("text", "table")

    configs = Path(__file__).resolve().parents[2] / "configs"
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(configs), version_base="1.3"):
        cfg = compose("evaluate", overrides=["method=universalrag", "paths.root_dir=/tmp/canopy-lit-test"])
    GlobalHydra.instance().clear()
    assert cfg.retriever.name == "corpus"
    seen = build.build_index(cfg).keywords  # the index builder with its knobs bound (nothing built yet)
    assert seen["routing"] is True
    # the loop's keys never reach the index builder: the loop passes k and exclude_seen every round
    assert not {"k", "exclude_seen", "scope", "node_cache_dir", "candidate_ranking"} & set(seen)

    def fake_index(cfg):  # stands in for the index builder: no corpus, no encoder
        return lambda encoder, router: FaissRetriever(TextTableIndex(), None, encoder, router=router)

    monkeypatch.setattr(build, "build_index", fake_index)
    llm = FakeScriptedLLM('{"label": "table"}')
    retriever = build.build_retriever(cfg, None, None, None, llm)
    assert isinstance(retriever.router, LLMModalityRouter) and retriever.router.modalities == ("text", "table")
    assert retriever._route("how many goals?") == ["table"] and "video" not in llm.prompts[-1]


@pytest.mark.parametrize("scope", ["candidates", "benchmark", "nowhere"])
def test_retriever_options_choose_the_candidate_pool(scope: str) -> None:
    """``retriever=candidates``: each question's own items; ``benchmark``: every item of the file;
    any other pool: a clear error."""
    from types import SimpleNamespace

    import yaml
    from omegaconf import OmegaConf

    from canopy_lit.pipeline import build

    text = SimpleNamespace(modality=SimpleNamespace(value="text"))
    bench = SimpleNamespace(
        items={"a": text, "b": text, "c": text},
        candidates={"q1": ["a"], "q2": ["b", "c"]},
        questions=[SimpleNamespace(id="q1"), SimpleNamespace(id="q2")],
    )
    configs = Path(__file__).resolve().parents[2] / "configs" / "retriever"
    option = yaml.safe_load((configs / f"{'candidates' if scope == 'nowhere' else scope}.yaml").read_text())
    if scope == "nowhere":
        option["pool"] = scope
    cfg = OmegaConf.create({"retrieval": {"k": 5}, "retriever": option, "loop": {"max_rounds": 3}})
    if scope == "nowhere":
        with pytest.raises(ValueError, match="retriever.pool"):
            build.build_retriever(cfg, bench, None, None, None)
        return
    pool = build.build_retriever(cfg, bench, None, None, None).candidates
    expected = bench.candidates if scope == "candidates" else {"q1": ["a", "b", "c"], "q2": ["a", "b", "c"]}
    assert {q: list(ids) for q, ids in pool.items()} == expected


def test_candidate_retriever_routes_among_the_pools_modalities() -> None:
    """UniversalRAG on a candidate pool: only the routed modality's items are ranked (fallback: all)."""
    import numpy as np

    from canopy_lit.hierarchy import Hierarchy
    from canopy_lit.retrieval.candidates import CandidateRetriever
    from canopy_lit.types import Item, Question, Table

    items = {
        "p": Item("p", "text", sentences=["Paris is the capital of France."]),
        "t": Item("t", "table", table=Table(["city", "pop"], [["Paris", "2.1M"]], caption="Cities")),
    }

    class OnesEncoder:
        def encode_queries(self, texts):
            return np.ones((len(texts), 4), np.float32)

    q = Question("q", "population of Paris?", ["2.1M"], "unit")
    router = LLMModalityRouter(FakeScriptedLLM('{"label": "table"}'), ("table", "text"))
    r = CandidateRetriever(items, {"q": ["p", "t"]}, OnesEncoder(), Hierarchy(2), router=router)
    assert [it.id for it in r.retrieve(q.text, 5, set(), q)] == ["t"]
    assert [it.id for it in r.retrieve(q.text, 5, {"t"}, q)] == ["p"]  # routed modality exhausted: fall back
