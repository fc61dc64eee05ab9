"""The OpenAI ``/chat/completions`` wire format shared by the llama.cpp and HTTP backends: the request body
and the response parsed into an ``LLMResponse``."""

from __future__ import annotations

import math
from typing import Any

from canopy_lit.llm.base import LLMError, LLMResponse, Message, PromptTooLongError, is_prompt_too_long
from canopy_lit.redaction import redact


def openai_request(
    messages: list[Message],
    *,
    json_mode: bool | dict[str, Any],
    logprobs: int,
    max_tokens: int,
    temperature: float,
    stop: list[str],
    model: str | None = None,
) -> dict[str, Any]:
    """The OpenAI ``/chat/completions`` body shared by the llama.cpp and HTTP backends."""
    req: dict[str, Any] = {"messages": messages, "max_tokens": max_tokens, "temperature": temperature}
    if model:
        req["model"] = model
    if stop:
        req["stop"] = stop
    if logprobs:
        req["logprobs"] = True
        req["top_logprobs"] = logprobs
    if isinstance(json_mode, dict):
        req["response_format"] = {"type": "json_schema", "json_schema": {"name": "reply", "schema": json_mode}}
    elif json_mode:
        req["response_format"] = {"type": "json_object"}
    return req


def parse_openai_response(body: dict[str, Any], *, source: str) -> LLMResponse:
    """OpenAI chat-completion JSON -> ``LLMResponse`` (top logprobs flattened to ``{token: logprob}``)."""
    if "error" in body and "choices" not in body:
        message = redact(f"{source}: server returned an error: {body['error']}")
        raise PromptTooLongError(message) if is_prompt_too_long(message) else LLMError(message)
    try:
        choice = body["choices"][0]
        text = choice["message"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError) as e:
        raise LLMError(f"{source}: malformed chat completion (no choices[0].message): {redact(str(body))[:300]}") from e
    if not isinstance(text, str):  # null (a refusal, a tool call, a broken server): no answer was generated
        refusal = choice["message"].get("refusal")
        detail = f"content {text!r}, finish_reason {choice.get('finish_reason')!r}"
        detail += f", refusal {refusal!r}" if refusal else ""
        raise LLMError(redact(f"{source}: chat completion without text ({detail})")[:400])
    # a reply leaves the process (predictions.jsonl, W&B, the viewer): a server that echoes the request's
    # Authorization header or URL credentials into it must not store them
    text = redact(text)
    try:
        tops = _top_logprobs(choice.get("logprobs"))
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise LLMError(redact(f"{source}: malformed logprobs in the chat completion ({e}): "
                              f"{str(choice.get('logprobs'))[:200]}")) from e  # fmt: skip
    usage = body.get("usage") or {}
    try:
        if not isinstance(usage, dict):
            raise TypeError(f"usage is {type(usage).__name__}")
        details = usage.get("prompt_tokens_details") or {}
        if not isinstance(details, dict):
            raise TypeError(f"prompt_tokens_details is {type(details).__name__}")
        prompt, completion, cached = (
            _token_count(usage, "prompt_tokens"), _token_count(usage, "completion_tokens"),
            _token_count(details, "cached_tokens"),
        )  # fmt: skip
    except TypeError as e:
        raise LLMError(redact(f"{source}: malformed usage in the chat completion ({e}): {str(usage)[:200]}")) from e
    return LLMResponse(
        text=text,
        prompt_tokens=prompt,
        completion_tokens=completion,
        top_logprobs=tops,
        finish_reason=str(choice.get("finish_reason") or ""),
        cached_tokens=cached,
    )


def _token_count(obj: dict[str, Any], key: str) -> int:
    """A non-negative integer count (absent or null = 0); a string, float or negative count raises ``TypeError``."""
    v = obj.get(key)
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise TypeError(f"{key} is {v!r}, not a token count")
    return v


def _top_logprobs(lp: Any) -> list[dict[str, float]]:
    """OpenAI ``choices[0].logprobs`` -> per generated token ``{token: logprob}``; wrong types raise."""
    if lp is None:
        return []
    if not isinstance(lp, dict):
        raise TypeError(f"logprobs is {type(lp).__name__}")
    content = lp.get("content") or []
    if not isinstance(content, list):
        raise TypeError(f"logprobs.content is {type(content).__name__}")
    tops: list[dict[str, float]] = []
    for tok in content:
        if not isinstance(tok, dict):
            raise TypeError(f"a logprobs.content entry is {type(tok).__name__}")
        alts = tok.get("top_logprobs") or []
        if not isinstance(alts, list) or not all(isinstance(a, dict) for a in alts):
            raise TypeError("top_logprobs is not a list of objects")
        out = {_token(a.get("token")): _logprob(a.get("logprob")) for a in alts}
        out.setdefault(_token(tok.get("token", "")), _logprob(tok.get("logprob", -math.inf)))
        tops.append(out)
    return tops


def _token(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"token {v!r} is not a string")
    return v


def _logprob(v: Any) -> float:
    # a log-probability is a number <= 0; -inf (never generated) is allowed, NaN and strings are not
    if isinstance(v, bool) or not isinstance(v, int | float) or math.isnan(v) or v > 1e-6:
        raise TypeError(f"logprob {v!r} is not a log-probability")
    return float(v)
