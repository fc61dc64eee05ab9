"""Issue "Numbers you can trust, round 2" item 10 on a real model: SmolLM2 in llama.cpp with a small context.

Two slots share ``n_ctx`` = 512, so one conversation holds 256 tokens; the roles fit their prompts into
that, and a prompt sent past it is the caller's ``PromptTooLongError``, not a backend failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from canopy_lit.control import LLMCritic
from canopy_lit.llm import LLMError, user
from canopy_lit.reader import LLMReader

EVIDENCE = [f"Passage {n}. " + "The river flows north past the old mill and the stone bridge. " * 8 for n in range(3)]


@pytest.fixture(scope="module")
def small_context_llm(smollm2_path: Path) -> Iterator[object]:
    from canopy_lit.llm.llamacpp import LlamaCppLLM

    llm = LlamaCppLLM(str(smollm2_path), n_ctx=512, n_parallel=2, n_threads=1, n_batch=256)
    yield llm
    llm.close()


def test_the_context_is_one_slots_share_and_every_role_fits_into_it(small_context_llm) -> None:
    llm = small_context_llm
    assert sum(llm.count_tokens(e) for e in EVIDENCE) > 256  # the evidence alone overflows a slot
    question = "Where does the river flow?"
    answer = LLMReader(llm, max_tokens=4).read(question, EVIDENCE)
    p_yes = LLMCritic(llm, mode="logprob").p_sufficient(question, EVIDENCE)
    assert answer.raw.strip() and 0.0 <= p_yes <= 1.0
    assert llm.context_length == 256
    summary = llm.log.summary()
    assert summary["failed"] == 0 and summary["by_role"]["reader"]["prompt_tokens"] <= 256 - 4


def test_a_prompt_past_the_context_is_the_callers_error_not_the_backends(small_context_llm) -> None:
    from canopy_lit.llm.base import PromptTooLongError

    with pytest.raises(PromptTooLongError, match="exceeds the available context size") as info:
        small_context_llm.chat([user(" ".join(EVIDENCE))], max_tokens=4)
    assert not isinstance(info.value, LLMError)
