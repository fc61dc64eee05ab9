"""LLM layer: one small protocol, three backends (llama.cpp in process, OpenAI-compatible HTTP,
vLLM), the pipeline's prompts, robust parsing, fitting prompts into a context and per-role call accounting.
The roles that use them live with their stage: the critic and IRCoT in ``canopy_lit.control``, the reader in
``canopy_lit.reader``, the aggregation check in ``canopy_lit.refine``, the modality router in
``canopy_lit.retrieval``, the relevance scorer in ``canopy_lit.carve``.

Example::

    llm = load_llm("llamacpp", model="qwen2.5-1.5b")
    verdict = LLMCritic(llm, mode="logprob").judge(question, evidence)   # canopy_lit.control
    llm.log.summary()["by_role"]
"""

from __future__ import annotations

from typing import Any

from canopy_lit.llm.base import (
    LLM,
    BaseLLM,
    CallLog,
    CallRecord,
    GenerationOptions,
    LLMError,
    LLMResponse,
    Message,
    assistant,
    render_text_only,
    system,
    user,
)
from canopy_lit.llm.parsing import PARSE_STATS, CriticVerdict, ParseStats, extract_json

BACKENDS = ("llamacpp", "openai", "vllm")


def load_llm(backend: str = "llamacpp", model: str = "qwen2.5-1.5b", **kwargs: Any) -> BaseLLM:
    """Build a backend by name; ``kwargs`` go to its constructor (``n_ctx``, ``base_url``, ...).

    Backends are imported here, not at package import, so ``vllm`` is only needed when used.
    """
    if backend == "llamacpp":
        from canopy_lit.llm.llamacpp import LlamaCppLLM

        return LlamaCppLLM(model, **kwargs)
    if backend == "openai":
        from canopy_lit.llm.openai import OpenAILLM

        return OpenAILLM(model, **kwargs)
    if backend == "vllm":
        from canopy_lit.llm.vllm import VLLMLLM

        return VLLMLLM(model, **kwargs)
    raise ValueError(f"unknown LLM backend {backend!r}; choose one of {BACKENDS}")


__all__ = [
    "BACKENDS", "LLM", "PARSE_STATS", "BaseLLM", "CallLog", "CallRecord", "CriticVerdict", "GenerationOptions",
    "LLMError", "LLMResponse", "Message", "ParseStats", "assistant", "extract_json", "load_llm",
    "render_text_only", "system", "user",
]  # fmt: skip
