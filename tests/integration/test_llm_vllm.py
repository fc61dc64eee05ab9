"""The in-process vLLM backend: runs only where vLLM and a CUDA GPU are present (marker ``vllm``).

The model is a hub id (downloads are enabled for this test) or a local folder given in
``CANOPY_VLLM_TEST_MODEL``.
"""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def vllm_llm():
    pytest.importorskip("vllm")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("vLLM backend test needs a CUDA GPU")
    from canopy_lit.llm.vllm import VLLMLLM

    model = os.environ.get("CANOPY_VLLM_TEST_MODEL", "Qwen/Qwen2.5-0.5B-Instruct")
    llm = VLLMLLM(model, max_model_len=2048, gpu_memory_utilization=0.5, allow_downloads=True)
    yield llm
    llm.close()


def test_vllm_batch_json_logprobs_and_roles(vllm_llm) -> None:
    from canopy_lit.control import LLMCritic
    from canopy_lit.llm import ParseStats, user
    from canopy_lit.reader import LLMReader

    out = vllm_llm.chat_batch([[user(f"Say the number {i}.")] for i in range(4)], max_tokens=4, role="reader")
    assert len(out) == 4 and all(r.completion_tokens > 0 and r.prompt_tokens > 0 for r in out)
    r = vllm_llm.chat([user("Answer yes or no: is water wet?")], logprobs=5, max_tokens=1)
    assert r.top_logprobs and len(r.top_logprobs[0]) >= 1
    stats = ParseStats()
    v = LLMCritic(vllm_llm, mode="json", stats=stats).judge("Where is Paris?", ["Paris is the capital of France."])
    assert v.parsed and stats.failures["critic"] == 0
    a = LLMReader(vllm_llm).read("Where is Paris?", ["Paris is the capital of France."])
    assert a.text
    assert vllm_llm.count_tokens("hello world") > 0
    assert vllm_llm.log.summary()["by_role"]["reader"]["calls"] == 5
