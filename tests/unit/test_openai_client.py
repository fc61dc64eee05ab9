"""The OpenAI-compatible backend on the official ``openai`` client, against a scripted loopback server.

The server replies with a queue of canned (status, JSON) pairs, so each test knows what the wire
said: accounting read from ``usage``, retries counted from the client's own attempts, error bodies
redacted, and a 200 that carries an error turned into an ``LLMError``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from loopback import LoopbackServer

pytest.importorskip("openai", reason="needs the openai extra: pip install -e '.[openai]'")

from canopy_lit.llm import LLMError, user  # noqa: E402
from canopy_lit.llm.openai import OpenAILLM  # noqa: E402

COMPLETION = {
    "id": "c1", "object": "chat.completion", "created": 0, "model": "m",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Yes"},
                 "logprobs": {"content": [{"token": "Yes", "logprob": -0.1, "bytes": None, "top_logprobs": [
                     {"token": "Yes", "logprob": -0.1, "bytes": None}, {"token": "No", "logprob": -2.5, "bytes": None}]}]}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13, "prompt_tokens_details": {"cached_tokens": 8}},
}  # fmt: skip


class _Scripted(LoopbackServer):
    """Answers each POST with the next (status, body) of ``replies`` (the last one repeats)."""

    def __init__(self) -> None:
        self.replies: list[tuple[int, dict]] = []
        self.paths: list[str] = []
        super().__init__(self._reply)
        self.url = f"{self.root}/v1"

    def _reply(self, path: str, body: bytes, headers: object) -> tuple[int, bytes]:
        self.paths.append(path)
        status, reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        return status, json.dumps(reply).encode()


@pytest.fixture
def server() -> Iterator[_Scripted]:
    s = _Scripted()
    yield s
    s.close()


def test_usage_cached_tokens_and_logprobs_reach_the_call_log(server: _Scripted) -> None:
    server.replies = [(200, COMPLETION)]
    llm = OpenAILLM("m", base_url=server.url, api_key_env=None)
    r = llm.chat([user("hi")], logprobs=2, role="critic")
    assert (r.text, r.prompt_tokens, r.completion_tokens, r.cached_tokens) == ("Yes", 12, 1, 8)
    assert r.top_logprobs == [{"Yes": -0.1, "No": -2.5}] and r.finish_reason == "stop"
    s = llm.log.summary()
    assert s["by_role"]["critic"]["calls"] == 1 and s["prefill_tokens"] == 4
    assert [x.text for x in llm.chat_batch([[user("a")], [user("b")]], role="reader")] == ["Yes", "Yes"]
    assert llm.log.summary()["by_role"]["reader"]["calls"] == 2


def test_server_errors_are_retried_counted_and_redacted(server: _Scripted, monkeypatch) -> None:
    monkeypatch.setenv("CANOPY_TEST_KEY", "tok_secret_value_9")
    server.replies = [(503, {"error": {"message": "overloaded; key tok_secret_value_9"}})]
    llm = OpenAILLM("m", base_url=server.url, api_key_env="CANOPY_TEST_KEY", max_retries=1)
    with pytest.raises(LLMError, match=r"failed after 2 attempt\(s\): HTTP 503") as info:
        llm.chat([user("hi")])
    assert "tok_secret_value_9" not in str(info.value) and "***" in str(info.value)
    assert len(server.paths) == 2 and llm.log.summary()["failed"] == 1
    server.replies = [(400, {"error": {"message": "bad request"}})]
    with pytest.raises(LLMError, match=r"failed after 1 attempt\(s\): HTTP 400"):  # not retryable
        llm.chat([user("hi")])


def test_a_200_that_carries_an_error_is_an_llm_error(server: _Scripted) -> None:
    server.replies = [(200, {"error": {"message": "context too long"}})]
    llm = OpenAILLM("m", base_url=server.url, api_key_env=None)
    with pytest.raises(LLMError, match="server returned an error: .*context too long"):
        llm.chat([user("hi")])


def test_count_tokens_posts_to_the_server_root_tokenize(server: _Scripted) -> None:
    server.replies = [(200, {"count": 7}), (200, {"tokens": [1, 2, 3]}), (200, {})]
    llm = OpenAILLM("m", base_url=server.url, api_key_env=None)
    assert llm.count_tokens("abc") == 7 and llm.count_tokens("abc") == 3
    with pytest.raises(LLMError, match="gave no token count"):
        llm.count_tokens("abc")
    assert server.paths == ["/tokenize"] * 3
