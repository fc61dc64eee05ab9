"""Issue "Reliability" 9: with ``concurrency > 1`` the vLLM engine was entered from several threads at once.

vLLM cannot run here (no GPU), so ``vllm`` is a hand-made stand-in module whose engine records how many
threads are inside ``chat`` at the same time; the real ``VLLMLLM`` constructor and call path run on top.
"""

from __future__ import annotations

import sys
import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest


class StandInVLLMEngine:
    """Stand-in for ``vllm.LLM``: answers "ok" after a short sleep and counts overlapping calls."""

    def __init__(self, **kwargs: object) -> None:
        self.kwargs = kwargs
        self.inside = 0
        self.max_inside = 0
        self.calls = 0
        self._count = threading.Lock()  # guards the counters only, never the "engine work"

    def get_tokenizer(self) -> object:
        return SimpleNamespace(encode=lambda text, add_special_tokens=False: text.split())

    def chat(self, conversations: list, params: object, use_tqdm: bool = False) -> list:
        with self._count:
            self.inside += 1
            self.calls += 1
            self.max_inside = max(self.max_inside, self.inside)
        time.sleep(0.02)  # long enough for other threads to arrive if nothing serialises them
        with self._count:
            self.inside -= 1
        gen = SimpleNamespace(text="ok", logprobs=None, token_ids=[1], finish_reason="stop")
        return [SimpleNamespace(outputs=[gen], prompt_token_ids=[1, 2, 3]) for _ in conversations]


@pytest.fixture
def stand_in_vllm(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    mod = types.ModuleType("vllm")
    mod.LLM = StandInVLLMEngine  # type: ignore[attr-defined]
    mod.SamplingParams = lambda **kw: SimpleNamespace(**kw)  # type: ignore[attr-defined]
    mod.sampling_params = SimpleNamespace()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", mod)
    return mod


def test_concurrent_chats_enter_the_engine_one_at_a_time(stand_in_vllm, tmp_path: Path) -> None:
    from canopy_lit.llm.base import user
    from canopy_lit.llm.vllm import VLLMLLM

    model_dir = tmp_path / "model"  # an existing local folder: resolve() returns it as is
    model_dir.mkdir()
    llm = VLLMLLM(str(model_dir))
    engine = llm.engine
    assert isinstance(engine, StandInVLLMEngine)

    with ThreadPoolExecutor(8) as ex:
        replies = list(ex.map(lambda i: llm.chat([user(f"question {i}")], role="critic"), range(16)))

    assert [r.text for r in replies] == ["ok"] * 16
    assert engine.calls == 16
    assert engine.max_inside == 1, f"{engine.max_inside} threads were inside the engine at once"
    assert llm.log.summary()["by_role"]["critic"]["calls"] == 16


class RefusingVLLMEngine(StandInVLLMEngine):
    """Like vLLM, validates every prompt before generating: one too long refuses the whole call."""

    def chat(self, conversations: list, params: object, use_tqdm: bool = False) -> list:
        for conv in conversations:
            if "huge" in str(conv[-1]["content"]):
                self.calls += 1
                raise ValueError("The decoder prompt (length 9000) is longer than the maximum model length of 8192.")
        return super().chat(conversations, params, use_tqdm)


def test_one_prompt_the_engine_refuses_fails_only_itself(stand_in_vllm, tmp_path: Path) -> None:
    """Issue "Numbers you can trust, round 2" item 11: one engine call per batch, one bad prompt in it."""
    from canopy_lit.llm.base import LLMError, PromptTooLongError, user
    from canopy_lit.llm.vllm import VLLMLLM

    stand_in_vllm.LLM = RefusingVLLMEngine
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    llm = VLLMLLM(str(model_dir), max_model_len=8192)
    assert llm.context_length == 8192
    batch = [[user("a")], [user("huge")], [user("c")]]
    outs = llm.chat_batch(batch, role="critic", return_exceptions=True)
    assert [type(o).__name__ for o in outs] == ["LLMResponse", "PromptTooLongError", "LLMResponse"]
    assert "longer than the maximum model length" in str(outs[1]) and not isinstance(outs[1], LLMError)
    assert llm.engine.calls == 1 + 3  # the refused batch, then each conversation alone
    with pytest.raises(PromptTooLongError):
        llm.chat_batch(batch, role="critic")
    summary = llm.log.summary()  # every conversation is one call: 2 answered, then 1 + 3 refused
    assert summary["by_role"]["critic"]["calls"] == 6 and summary["failed"] == 4
