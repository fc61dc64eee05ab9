"""Hostile backend replies, round 3 (issue 44 items 23 and 26).

23: critic JSON of the wrong types (``"sufficient": 0.3``, a list as ``followup_query``) is a parse failure,
counted as one, never a verdict or a query made of a list's repr.
26: wrong types in a chat completion's logprobs or usage, a ``/tokenize`` reply without a usable count, a 200
``text/event-stream`` body and a server that echoes the request back are one clear error naming the
backend and the URL. The servers are real HTTP servers on loopback (``tests/loopback.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from evaluate_runner import records, run_script
from loopback import LoopbackServer

from canopy_lit.llm.base import LLMError, user
from canopy_lit.llm.parsing import ParseStats, parse_critic, parse_followup

Q = "When did the Eiffel Tower open?"

# --------------------------------------------------------------------------- 23: critic types


@pytest.mark.parametrize(
    "reply",
    [
        '{"sufficient": 0.3, "missing": [], "followup_query": ""}',
        '{"sufficient": 2, "missing": [], "followup_query": ""}',
        '{"sufficient": null, "missing": [], "followup_query": ""}',
        '{"sufficient": [true], "missing": [], "followup_query": ""}',
        '{"sufficient": "maybe", "missing": [], "followup_query": ""}',
    ],
)
def test_a_sufficient_that_is_no_boolean_is_a_parse_failure(reply: str) -> None:
    stats = ParseStats()
    v = parse_critic(reply, Q, stats)
    assert not v.sufficient and not v.parsed and v.followup_query == Q
    assert stats.failures["critic"] == 1 and stats.attempts["critic"] == 1


def test_a_followup_query_that_is_a_list_is_a_parse_failure_not_its_repr() -> None:
    stats = ParseStats()
    v = parse_critic('{"sufficient": false, "missing": ["year"], "followup_query": ["when", "1889"]}', Q, stats)
    assert v.followup_query == Q and "[" not in v.followup_query and not v.parsed
    assert stats.failures["critic"] == 1
    v = parse_critic('{"sufficient": false, "missing": {"a": 1}, "followup_query": "opening year"}', Q, stats)
    assert not v.parsed and stats.failures["critic"] == 2
    missing, follow, ok = parse_followup('{"missing": [], "followup_query": ["when", "1889"]}', Q, stats)
    assert (missing, follow, ok) == ([], Q, False) and stats.failures["followup"] == 1
    missing, follow, ok = parse_followup('{"missing": [], "followup_query": 1889}', Q, stats)
    assert (follow, ok) == (Q, False) and stats.failures["followup"] == 2


def test_the_verdicts_that_are_still_read() -> None:
    """JSON booleans, 0/1 and yes/no words are verdicts; a list of strings and numbers is ``missing``."""
    stats = ParseStats()
    for reply, expected in [
        ('{"sufficient": true}', True), ('{"sufficient": false}', False), ('{"sufficient": 1}', True),
        ('{"sufficient": 0}', False), ('{"sufficient": "yes"}', True), ('{"sufficient": "No"}', False),
        ('{"sufficient": "true"}', True), ('{"sufficient": "false"}', False),
    ]:  # fmt: skip
        v = parse_critic(reply, Q, stats)
        assert v.parsed and v.sufficient is expected, reply
    v = parse_critic('{"sufficient": false, "missing": ["year", 1889], "followup_query": null}', Q, stats)
    assert v.parsed and v.missing == ["year", "1889"] and v.followup_query == Q
    assert stats.failures["critic"] == 0


# --------------------------------------------------------------------------- 26: backend replies

COMPLETION: dict[str, Any] = {
    "id": "c1", "object": "chat.completion", "created": 0, "model": "m",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Paris"}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
}  # fmt: skip


class Scripted(LoopbackServer):
    """Answers every POST with ``reply(path, body)``: ``(status, body bytes[, content type])``."""

    def __init__(self) -> None:
        self.reply: Any = lambda path, body: (200, json.dumps(COMPLETION).encode())
        super().__init__(lambda path, body, headers: self.reply(path, body))


@pytest.fixture
def server() -> Iterator[Scripted]:
    s = Scripted()
    yield s
    s.close()


def backend(server: Scripted) -> Any:
    from canopy_lit.llm.openai import OpenAILLM

    return OpenAILLM("m", base_url=f"{server.root}/v1", api_key_env=None, max_retries=0, timeout=10)


def completion(**changes: Any) -> bytes:
    body = json.loads(json.dumps(COMPLETION))
    for key, value in changes.items():
        if key == "logprobs":
            body["choices"][0]["logprobs"] = value
        else:
            body[key] = value
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("changes", "what"),
    [
        ({"usage": {"prompt_tokens": "many", "completion_tokens": 1}}, "malformed usage"),
        ({"usage": {"prompt_tokens": 3, "completion_tokens": 1.5}}, "malformed usage"),
        ({"usage": [12, 1]}, "malformed usage"),
        ({"usage": {"prompt_tokens": 3, "prompt_tokens_details": {"cached_tokens": "all"}}}, "malformed usage"),
        ({"logprobs": {"content": [{"token": "Paris", "logprob": "high"}]}}, "malformed logprobs"),
        ({"logprobs": {"content": [{"token": "Paris", "logprob": -0.1, "top_logprobs": "x"}]}}, "malformed logprobs"),
        ({"logprobs": {"content": "Paris"}}, "malformed logprobs"),
        ({"logprobs": [1, 2]}, "malformed logprobs"),
    ],
)
def test_wrong_types_in_usage_or_logprobs_are_one_error_naming_backend_and_url(
    server: Scripted, changes: dict[str, Any], what: str
) -> None:
    server.reply = lambda path, body: (200, completion(**changes))
    llm = backend(server)
    with pytest.raises(LLMError, match=f"^openai backend \\({server.root}/v1\\): {what}"):
        llm.chat([user("hi")], logprobs=2)
    (out,) = llm.chat_batch([[user("hi")]], return_exceptions=True)
    assert isinstance(out, LLMError) and what in str(out) and server.root in str(out)


def test_well_typed_logprobs_and_usage_are_still_read(server: Scripted) -> None:
    lp = {"content": [{"token": "Yes", "logprob": -0.1, "top_logprobs": [{"token": "No", "logprob": -2.5}]}]}
    server.reply = lambda path, body: (200, completion(logprobs=lp))
    resp = backend(server).chat([user("hi")], logprobs=2)
    assert resp.top_logprobs == [{"No": -2.5, "Yes": -0.1}] and resp.prompt_tokens == 12


@pytest.mark.parametrize(
    ("reply", "what"),
    [({"count": "many"}, "gave count 'many', not a token count"),
     ({"count": -3}, "gave count '-3', not a token count"),
     ({"tokens": None}, "gave tokens of type NoneType, not a list"),
     ({"tokens": "abc"}, "gave tokens of type str, not a list")],
)  # fmt: skip
def test_a_tokenize_reply_without_a_usable_count_names_backend_and_url(
    server: Scripted, reply: dict[str, Any], what: str
) -> None:
    server.reply = lambda path, body: (200, json.dumps(reply).encode())
    with pytest.raises(LLMError) as info:
        backend(server).count_tokens("hello world")
    assert str(info.value).startswith(f"openai backend: {server.root}/tokenize {what}")
    assert "set `tokenizer:` in the llm config" in str(info.value)


def test_a_streaming_reply_says_streaming_is_not_supported(server: Scripted) -> None:
    sse = b'data: {"choices": [{"delta": {"content": "Par"}}]}\n\ndata: [DONE]\n\n'
    server.reply = lambda path, body: (200, sse, "text/event-stream")
    llm = backend(server)
    url = f"{server.root}/v1/chat/completions"
    with pytest.raises(LLMError, match="streaming replies are not supported") as info:
        llm.chat([user("hi")])
    assert str(info.value).startswith(f"openai backend: POST {url}: the server answered with a streaming")
    (out,) = llm.chat_batch([[user("hi")]], return_exceptions=True)
    assert isinstance(out, LLMError) and "streaming replies are not supported" in str(out)


@pytest.mark.parametrize(
    ("reply", "what"),
    [(lambda path, body: (200, body), "malformed chat completion (no choices[0].message)"),
     (lambda path, body: (200, b"[1, 2]"), "the server answered with JSON that is not an object"),
     (lambda path, body: (200, b"hello", "text/plain"), "the server answered with a body that is not a JSON chat")],
)  # fmt: skip
def test_a_server_echoing_the_request_is_one_error_naming_the_url(server: Scripted, reply: Any, what: str) -> None:
    server.reply = reply
    llm = backend(server)
    with pytest.raises(LLMError, match=r"^openai backend") as info:
        llm.chat([user("hi")])
    assert what in str(info.value) and server.root in str(info.value)


def test_an_evaluation_against_a_server_with_wrong_usage_types_exits_1_naming_backend_and_url(
    tmp_path: Path, server: Scripted
) -> None:
    """Before: every question failed with ``ValueError: invalid literal for int()`` and no backend named."""
    server.reply = lambda path, body: (
        (200, b'{"count": 5}') if path.endswith("/tokenize") else (200, completion(usage={"prompt_tokens": "many"}))
    )
    run_dir = tmp_path / "run"
    out = run_script(
        "evaluate.py", run_dir, "method=no_retrieval", "llm=openai", f"llm.base_url={server.root}/v1",
        "llm.max_retries=0", "data=hotpotqa", "data.split=test", "limit=3", "max_consecutive_failures=2",
    )  # fmt: skip
    assert out.status == 1
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("evaluate.py: error:")]
    assert "stopped after 2 consecutive backend failures" in line
    assert f"openai backend ({server.root}/v1): malformed usage in the chat completion" in line
    recs = records(run_dir)
    assert len(recs) == 2 and all(r["backend_failure"] and "prompt_tokens is 'many'" in r["error"] for r in recs)
