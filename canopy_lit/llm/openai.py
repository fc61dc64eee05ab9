"""OpenAI-compatible HTTP backend: vLLM ``serve``, llama.cpp server, hosted APIs.

Built on the official ``openai`` client (optional extra ``openai``, imported when the backend is
made): it owns timeouts and retries (connection errors, timeouts, 408/409/429 and 5xx, exponential
backoff with jitter). This module adds what the project needs on top: bounded async concurrency
for batches, the per-call log, token counting, the API key read only from an environment variable
(never from a config file) and redaction of that key (and of credentials in ``base_url``) from every
error text.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Annotated, Any

from annotated_types import Ge, Gt

from canopy_lit.llm.base import (
    BaseLLM,
    GenerationOptions,
    LLMError,
    LLMResponse,
    Message,
    PromptTooLongError,
    generation_options,
    is_prompt_too_long,
    redact,
    redact_http_logs,
    register_secret,
    register_url_credentials,
)
from canopy_lit.llm.wire import openai_request, parse_openai_response

if TYPE_CHECKING:
    from typing_extensions import Unpack

# The first line of a server-sent-events body (a streaming reply to a request that did not ask for one).
_SSE_LINE = re.compile(r"\s*(?:data|event|id|retry):")


def _import_openai() -> Any:
    """The ``openai`` package, or a ``ModuleNotFoundError`` naming the extra that installs it."""
    try:
        import openai
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(
            "the openai backend needs the `openai` package: pip install -e '.[openai]'", name="openai"
        ) from e
    return openai


class OpenAILLM(BaseLLM):
    """Chat completions through the official ``openai`` client.

    Args:
        model: model name the server expects.
        base_url: API root including ``/v1`` (e.g. ``http://127.0.0.1:8000/v1``).
        api_key_env: name of the environment variable holding the key (unset = no auth header).
        timeout: seconds per request (connect, read, write).
        max_retries: retries after the first attempt (so ``max_retries + 1`` attempts at most),
            with the client's exponential backoff (0.5 s doubling, at most 8 s, or the server's
            ``Retry-After``).
        max_concurrency: in-flight requests in ``chat_batch``.
        multimodal: send image parts as is (vision models); otherwise render them as descriptions.
        tokenizer: asset name / path of a GGUF or Hugging Face tokenizer for ``count_tokens``;
            ``None`` asks the server's ``/tokenize`` (vLLM and llama.cpp servers provide one).
        context_length: the served model's context in tokens (vLLM ``--max-model-len``, llama.cpp
            ``n_ctx`` per slot); prompts are fitted into it. ``None`` = unknown: a prompt the server
            rejects as too long fails its own question (``PromptTooLongError``).
    """

    name = "openai"

    def __init__(
        self,
        model: str = "default",
        *,
        base_url: str = "http://127.0.0.1:8000/v1",
        api_key_env: str | None = "OPENAI_API_KEY",
        timeout: Annotated[float, Gt(0)] = 60.0,
        max_retries: Annotated[int, Ge(0)] = 4,
        max_concurrency: Annotated[int, Ge(1)] = 8,
        multimodal: bool = False,
        tokenizer: str | None = None,
        context_length: int | None = None,
        calibration: dict[str, float] | None = None,
    ) -> None:
        super().__init__(multimodal=multimodal, calibration=calibration)
        self._openai = _import_openai()
        self.model = model
        self.base_url = base_url.rstrip("/")
        register_url_credentials(self.base_url)  # userinfo becomes a Basic header a server may echo
        redact_http_logs()  # the HTTP client logs every request's URL
        self.context_length = context_length
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_concurrency = max_concurrency
        self._tokenizer_spec = tokenizer
        self._tokenizer: Any = None
        key = os.environ.get(api_key_env) if api_key_env else None
        register_secret(key)  # servers may echo it in error bodies: never store or log it
        # Without a key the client gets a placeholder (it would otherwise read OPENAI_API_KEY behind the
        # config's back) and every request omits the Authorization header.
        self._client_kwargs: dict[str, Any] = {
            "base_url": self.base_url, "api_key": key or "unused", "timeout": timeout, "max_retries": max_retries,
        }  # fmt: skip
        self._headers: dict[str, Any] = {} if key else {"Authorization": self._openai.Omit()}
        self._client = self._openai.OpenAI(**self._client_kwargs)

    # ---------------------------------------------------------------- errors

    def _fail(self, url: str, err: BaseException) -> LLMError | PromptTooLongError:
        """One redacted ``LLMError`` naming the URL, the attempts made and the root cause; a prompt
        the server rejects as too long is the caller's ``PromptTooLongError`` instead."""
        openai = self._openai
        if isinstance(err, json.JSONDecodeError):  # the client parses a 200's body without a word about it
            return LLMError(redact(
                f"openai backend: POST {url}: the server answered with a body that is not JSON "
                f"({err.msg}): {err.doc[:200]!r}"
            ))  # fmt: skip
        attempts = 1
        if isinstance(err, openai.APIStatusError | openai.APIConnectionError):
            request = err.response.request if isinstance(err, openai.APIStatusError) else err.request
            # the client stamps every attempt with its retry number
            attempts = int(request.headers.get("x-stainless-retry-count", 0)) + 1
        if isinstance(err, openai.APIStatusError):
            # Redact before cutting: a key cut in half would no longer match.
            detail = f"HTTP {err.status_code}: {redact(err.response.text)[:300]}"
        else:
            cause = err.__cause__ if isinstance(err, openai.APIConnectionError) and err.__cause__ else err
            detail = f"{type(cause).__name__}: {cause}"
        message = redact(f"openai backend: POST {url} failed after {attempts} attempt(s): {detail}")
        if isinstance(err, openai.BadRequestError) and is_prompt_too_long(message):
            return PromptTooLongError(message)
        return LLMError(message)

    def _parse(self, completion: Any, url: str) -> LLMResponse:
        if isinstance(completion, str):  # the client hands over a body it was not told is JSON as text
            if _SSE_LINE.match(completion):
                raise LLMError(redact(
                    f"openai backend: POST {url}: the server answered with a streaming (text/event-stream) "
                    f"body; streaming replies are not supported: {completion[:200]!r}"
                ))  # fmt: skip
            raise LLMError(redact(f"openai backend: POST {url}: the server answered with a body that is not "
                                  f"a JSON chat completion: {completion[:200]!r}"))  # fmt: skip
        if isinstance(completion, dict):
            data = completion
        elif hasattr(completion, "model_dump"):
            # a server's wrong types stay as sent (checked below); pydantic's warnings about them are noise
            data = completion.model_dump(exclude_none=True, warnings=False)
        else:  # a JSON list, number or string
            raise LLMError(redact(f"openai backend: POST {url}: the server answered with JSON that is not an "
                                  f"object: {str(completion)[:200]}"))  # fmt: skip
        return parse_openai_response(data, source=f"openai backend ({redact(self.base_url)})")

    # ---------------------------------------------------------------- sync

    def _complete(self, messages: list[Message], **kw: Any) -> LLMResponse:
        body = openai_request(messages, model=self.model, **kw)
        try:
            completion = self._client.chat.completions.create(**body, extra_headers=self._headers)
        except (self._openai.OpenAIError, json.JSONDecodeError) as e:
            raise self._fail(f"{self.base_url}/chat/completions", e) from e
        return self._parse(completion, f"{self.base_url}/chat/completions")

    # ---------------------------------------------------------------- async batch

    def chat_batch(
        self, batch: Sequence[Sequence[Message]], *, return_exceptions: bool = False, **kwargs: Any
    ) -> list[Any]:
        """All conversations concurrently, at most ``max_concurrency`` in flight; order preserved.

        ``return_exceptions``: a failed conversation's error takes its place (else the first is raised).
        """
        kwargs["return_exceptions"] = return_exceptions
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.achat_batch(batch, **kwargs))
        # called from inside an event loop (e.g. a notebook): run in a private loop on a thread

        with ThreadPoolExecutor(1) as ex:
            return ex.submit(asyncio.run, self.achat_batch(batch, **kwargs)).result()

    async def achat_batch(
        self,
        batch: Sequence[Sequence[Message]],
        *,
        role: str = "reader",
        return_exceptions: bool = False,
        **options: Unpack[GenerationOptions],
    ) -> list[Any]:
        sem = asyncio.Semaphore(self.max_concurrency)
        url = f"{self.base_url}/chat/completions"
        kw = generation_options(**options)

        # an async client belongs to one event loop: one per batch, closed with it
        async with self._openai.AsyncOpenAI(**self._client_kwargs) as client:

            async def one(messages: Sequence[Message]) -> LLMResponse:
                body = openai_request(self.prepare(messages), model=self.model, **kw)
                async with sem:
                    t0 = time.perf_counter()
                    try:
                        completion = await client.chat.completions.create(**body, extra_headers=self._headers)
                    except (self._openai.OpenAIError, json.JSONDecodeError) as e:
                        self.log.add(role, 0, 0, time.perf_counter() - t0, ok=False)
                        raise self._fail(url, e) from e
                    try:
                        resp = self._parse(completion, url)
                    except (LLMError, PromptTooLongError):  # a failed call, as in ``chat``
                        self.log.add(role, 0, 0, time.perf_counter() - t0, ok=False)
                        raise
                    return self._record(resp, role, time.perf_counter() - t0)

            # every conversation runs to its end: one failure must not cost the others their replies
            outs = await asyncio.gather(*(one(m) for m in batch), return_exceptions=True)
        if not return_exceptions:
            for out in outs:
                if isinstance(out, BaseException):
                    raise out
        return list(outs)

    # ---------------------------------------------------------------- tokens

    def count_tokens(self, text: str) -> int:
        if not text:
            return 0
        if self._tokenizer_spec:
            if self._tokenizer is None:
                from canopy_lit.llm.tokenizers import load_tokenizer

                self._tokenizer = load_tokenizer(self._tokenizer_spec)
            return len(self._tokenizer(text))
        root = self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url
        url = f"{root}/tokenize"  # not an OpenAI route: the client's generic POST, same retries
        # vLLM wants {"model", "prompt"} and answers {"count", "tokens"}; llama.cpp wants {"content"}
        body = {"model": self.model, "prompt": text, "content": text, "add_special_tokens": False,
                "add_special": False}  # fmt: skip
        try:
            data = self._client.post(url, body=body, cast_to=object, options={"headers": self._headers})
        except (self._openai.OpenAIError, json.JSONDecodeError) as e:
            raise self._fail(url, e) from e
        advice = "set `tokenizer:` in the llm config"
        if isinstance(data, dict) and "count" in data:
            count = data["count"]
            if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
                return count
            raise LLMError(redact(f"openai backend: {url} gave count {str(count)[:80]!r}, not a token count; {advice}"))
        if isinstance(data, dict) and "tokens" in data:
            tokens = data["tokens"]
            if isinstance(tokens, list):
                return len(tokens)
            raise LLMError(redact(
                f"openai backend: {url} gave tokens of type {type(tokens).__name__}, not a list; {advice}"
            ))  # fmt: skip
        raise LLMError(redact(f"openai backend: {url} gave no token count ({str(data)[:120]}); {advice}"))

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:
        return f"OpenAILLM({self.model!r} @ {redact(self.base_url)})"
