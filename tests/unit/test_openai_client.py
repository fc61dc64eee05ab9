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


def test_a_reply_with_null_content_is_a_failed_call(server: _Scripted) -> None:
    """Issue "Numbers you can trust, round 2" item 16: ``content: null`` is no answer, not an empty one."""
    null = {**COMPLETION, "choices": [{"index": 0, "finish_reason": "stop",
                                       "message": {"role": "assistant", "content": None}}]}  # fmt: skip
    server.replies = [(200, null)]
    llm = OpenAILLM("m", base_url=server.url, api_key_env=None)
    with pytest.raises(LLMError, match=r"chat completion without text \(content None, finish_reason 'stop'\)"):
        llm.chat([user("hi")])
    outs = llm.chat_batch([[user("a")], [user("b")]], return_exceptions=True)
    assert all(isinstance(o, LLMError) for o in outs)
    assert llm.log.summary()["failed"] == 3 and llm.log.summary()["calls"] == 3


class _RefusesBad(LoopbackServer):
    """Answers COMPLETION, except for a prompt holding "bad" (HTTP 400) or "huge" (a context overflow)."""

    def __init__(self) -> None:
        super().__init__(self._reply)
        self.url = f"{self.root}/v1"

    def _reply(self, path: str, body: bytes, headers: object) -> tuple[int, bytes]:
        text = body.decode()
        if "huge" in text:  # vLLM's wording
            message = "This model's maximum context length is 2048 tokens. However, you requested 9000 tokens"
            return 400, json.dumps({"error": {"message": message, "code": 400}}).encode()
        if "bad" in text:
            return 400, json.dumps({"error": {"message": "malformed request"}}).encode()
        return 200, json.dumps(COMPLETION).encode()


def test_one_failing_conversation_fails_only_itself_and_the_batched_loop_keeps_the_others() -> None:
    """Issue "Numbers you can trust, round 2" item 11 over real sockets: concurrent requests of one batch."""
    from canopy_lit.hierarchy import Hierarchy
    from canopy_lit.llm.base import PromptTooLongError
    from canopy_lit.pipeline.batched import BatchedQuestionRunner, BatchingLLM
    from canopy_lit.pipeline.loop import EvidenceLoop, LoopSettings, QuestionRunner
    from canopy_lit.reader import LLMReader
    from canopy_lit.refine import KeepWholeRefiner
    from canopy_lit.types import Question

    server = _RefusesBad()
    try:
        llm = OpenAILLM("m", base_url=server.url, api_key_env=None, max_retries=0)
        outs = llm.chat_batch([[user("a")], [user("bad")], [user("huge")], [user("c")]], return_exceptions=True)
        assert [type(o).__name__ for o in outs] == ["LLMResponse", "LLMError", "PromptTooLongError", "LLMResponse"]
        assert isinstance(outs[2], PromptTooLongError) and not isinstance(outs[2], LLMError)
        with pytest.raises(LLMError, match="HTTP 400"):
            llm.chat_batch([[user("a")], [user("bad")]])

        def reader_only() -> tuple[EvidenceLoop, BatchingLLM]:
            batching = BatchingLLM(llm)
            loop = EvidenceLoop(None, Hierarchy(), KeepWholeRefiner(), LLMReader(batching),
                                batching.count_tokens, settings=LoopSettings(max_rounds=0))  # fmt: skip
            return loop, batching

        questions = [Question(f"q{i}", "a bad one?" if i == 2 else f"good {i}?", ["Yes"], "unit") for i in range(6)]
        loop, batching = reader_only()
        batched = BatchedQuestionRunner(loop, batching).run_all(questions, batch_size=6)
        assert [isinstance(r, LLMError) for r in batched] == [False, False, True, False, False, False]
        assert batching.scheduler.batch_sizes == [6]  # one batch of concurrent requests
        loop, batching = reader_only()
        for q, rec in zip(questions, batched, strict=True):
            if q.id != "q2":
                alone = QuestionRunner(loop, batching).run(q)
                assert (rec.prediction, rec.llm_calls) == (alone.prediction, alone.llm_calls) == ("Yes", {"reader": 1})
    finally:
        server.close()


def test_a_200_whose_body_is_not_json_is_a_backend_error_naming_the_url() -> None:
    """Issue "Runs that never lie" item 10: a proxy's HTML page instead of a completion."""
    server = LoopbackServer(lambda path, body, headers: (200, b"<html>502 upstream</html>"))
    try:
        llm = OpenAILLM("m", base_url=f"{server.root}/v1", api_key_env=None, max_retries=0)
        pattern = rf"openai backend: POST {server.root}/v1/chat/completions: the server answered with a body that is not JSON"
        with pytest.raises(LLMError, match=pattern) as info:
            llm.chat([user("hi")])
        assert "502 upstream" in str(info.value)
        (out,) = llm.chat_batch([[user("hi")]], return_exceptions=True)
        assert isinstance(out, LLMError) and "not JSON" in str(out)
        with pytest.raises(LLMError, match=rf"POST {server.root}/tokenize: the server answered with a body"):
            llm.count_tokens("abc")
        assert llm.log.summary()["failed"] == 2
    finally:
        server.close()
