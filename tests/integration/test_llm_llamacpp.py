"""Every prompt through the real SmolLM2-135M on llama.cpp: structured output comes back parsed.

SmolLM2 answers poorly; these tests check the plumbing (prompt -> backend -> parser -> typed
result, logprobs, accounting, token counting), not answer quality. Budgets are a few tokens.
"""

from __future__ import annotations

import pytest

from canopy_lit.carve.rerank import LLMRelevanceScorer
from canopy_lit.control import IRCoTController, LLMCritic
from canopy_lit.llm import ParseStats, extract_json, user
from canopy_lit.reader import LLMReader
from canopy_lit.refine import AggregationClassifier
from canopy_lit.retrieval.router import ModalityRouter

Q = "Which city hosted the 1900 Summer Olympics?"
EV = ["The 1900 Summer Olympics were held in Paris, France.", "Berlin is the capital of Germany."]


def test_json_critic_returns_a_parsed_verdict(smollm2_llm) -> None:
    stats = ParseStats()
    v = LLMCritic(smollm2_llm, mode="json", max_tokens=32, stats=stats).judge(Q, EV)
    assert isinstance(v.sufficient, bool) and v.parsed
    assert stats.failures["critic"] == 0
    if not v.sufficient:
        assert v.followup_query  # the model's query or, if empty, the question


def test_logprob_critic_reads_p_yes_and_writes_followup(smollm2_llm) -> None:
    stats = ParseStats()
    critic = LLMCritic(smollm2_llm, mode="logprob", threshold=1.01, max_tokens=24, stats=stats)  # always insufficient
    v = critic.judge(Q, EV[1:])
    assert v.p_yes is not None and 0.0 <= v.p_yes <= 1.0
    assert not v.sufficient and v.followup_query
    assert stats.attempts["critic_logprob"] == 1 and stats.failures["critic_logprob"] == 0
    always = LLMCritic(smollm2_llm, mode="logprob", threshold=0.0, stats=stats).judge(Q, EV)
    assert always.sufficient and always.followup_query == ""


def test_critic_parse_failure_falls_back_to_insufficient(smollm2_llm) -> None:
    # unconstrained and cut after 2 tokens: the reply cannot hold a verdict
    stats = ParseStats()
    v = LLMCritic(smollm2_llm, mode="json", max_tokens=2, constrained=False, stats=stats).judge(Q, EV)
    assert not v.parsed and not v.sufficient and v.followup_query == Q
    assert stats.failures["critic"] == 1


def test_reader_short_answer_and_choice_letter(smollm2_llm) -> None:
    reader = LLMReader(smollm2_llm, max_tokens=12, stats=ParseStats())
    a = reader.read(Q, EV)
    assert a.text and "\n" not in a.text and a.letter is None
    mc = reader.read(Q, EV, choices=["Berlin", "Paris", "Rome"])
    assert mc.letter in {"A", "B", "C"} and mc.text == ["Berlin", "Paris", "Rome"][ord(mc.letter) - 65]


def test_classifier_router_ircot_relevance(smollm2_llm) -> None:
    stats = ParseStats()
    label = AggregationClassifier(smollm2_llm, stats=stats).classify("What was the total revenue in 2019 and 2020?")
    assert label in {"aggregation", "lookup"} and stats.failures["aggregation"] == 0
    route = ModalityRouter(smollm2_llm, ["text", "table", "image"], stats=stats).route("What colour is the flag?")
    assert route in {"text", "table", "image"} and stats.failures["router"] == 0
    step = IRCoTController(smollm2_llm, max_tokens=12, stats=stats).next_step(Q, EV, [])
    assert step.sentence
    scores = LLMRelevanceScorer(smollm2_llm, stats=stats).score(Q, EV)
    assert len(scores) == 2 and all(0.0 <= s <= 1.0 for s in scores)


def test_json_mode_logprobs_and_accounting(smollm2_llm) -> None:
    mark = len(smollm2_llm.log)
    r = smollm2_llm.chat([user('Return a JSON object with key "city".')], json_mode=True, max_tokens=16, role="t1")
    assert r.text.lstrip().startswith("{")
    r2 = smollm2_llm.chat([user("Say yes.")], logprobs=5, max_tokens=2, role="t2")
    assert len(r2.top_logprobs) == r2.completion_tokens and 1 <= len(r2.top_logprobs[0]) <= 6
    s = smollm2_llm.log.summary(since=mark)
    assert s["calls"] == 2 and set(s["by_role"]) == {"t1", "t2"}
    assert s["by_role"]["t1"]["prompt_tokens"] == r.prompt_tokens > 0 and s["seconds"] > 0
    assert extract_json(r.text) is not None or r.finish_reason == "length"


def test_image_parts_become_descriptions_for_text_models(smollm2_llm) -> None:
    plain = smollm2_llm.chat([user("What is shown?")], max_tokens=1)
    with_image = smollm2_llm.chat(
        [user("What is shown?", images=[{"url": "/data/cat.png", "description": "a grey cat asleep on a red sofa"}])],
        max_tokens=1,
    )
    extra = smollm2_llm.count_tokens("\n[image cat.png: a grey cat asleep on a red sofa]")
    assert with_image.prompt_tokens - plain.prompt_tokens == pytest.approx(extra, abs=2)


def test_count_tokens_matches_an_independent_tokenizer(smollm2_llm, smollm2_path) -> None:
    from canopy_lit.llm.tokenizers import load_tokenizer

    text = "CANOPY keeps a child node iff it scores at least its parent; 1,234 tokens, naïve café."
    n = smollm2_llm.count_tokens(text)
    assert n == len(load_tokenizer(str(smollm2_path))(text))  # llama.cpp vs transformers' GGUF reader
    assert smollm2_llm.count_tokens("") == 0 and n > smollm2_llm.count_tokens("CANOPY keeps")


def test_llm_configs_instantiate(smollm2_path) -> None:
    from pathlib import Path

    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from canopy_lit.llm import LLMError
    from canopy_lit.llm.openai import OpenAILLM

    cfg_dir = Path(__file__).resolve().parents[2] / "configs" / "llm"
    assert {p.stem for p in cfg_dir.glob("*.yaml")} >= {"llamacpp_qwen1.5b", "llamacpp_smollm2", "openai", "vllm"}
    qwen = OmegaConf.load(cfg_dir / "llamacpp_qwen1.5b.yaml")
    assert 0.0 < qwen.calibration.critic_yes_threshold < 1.0
    llm = instantiate(OmegaConf.load(cfg_dir / "llamacpp_smollm2.yaml"), n_ctx=512)
    try:
        assert llm.model_path == smollm2_path and llm.calibration == {}
        assert llm.chat([{"role": "user", "content": "Hi"}], max_tokens=1).completion_tokens == 1
    finally:
        llm.close()
    remote = instantiate(OmegaConf.load(cfg_dir / "openai.yaml"))
    assert isinstance(remote, OpenAILLM) and remote.multimodal  # built without contacting the server
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(Exception, match="needs vLLM") as err:  # hydra wraps the LLMError
            instantiate(OmegaConf.load(cfg_dir / "vllm.yaml"))
        assert isinstance(err.value, LLMError) or isinstance(err.value.__cause__, LLMError)
