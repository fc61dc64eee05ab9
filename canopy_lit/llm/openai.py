"""OpenAI-compatible HTTP backend: vLLM ``serve``, llama.cpp server, hosted APIs.

Timeouts on every request, retries with exponential backoff on connection errors, timeouts, 429
and 5xx (tenacity), bounded async concurrency for batches, and the API key read only from an
environment variable (never from a config file).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import httpx
from tenacity import (
    AsyncRetrying,
    RetryError,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from canopy_lit.llm.base import (
    BaseLLM,
    GenerationOptions,
    LLMError,
    LLMResponse,
    Message,
    generation_options,
    openai_request,
    parse_openai_response,
    redact,
    register_secret,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


class _RetryableStatus(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status}: {text[:200]}")
        self.status = status


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, httpx.TransportError | _RetryableStatus)


class OpenAILLM(BaseLLM):
    """Chat completions over HTTP.

    Args:
        model: model name the server expects.
        base_url: API root including ``/v1`` (e.g. ``http://127.0.0.1:8000/v1``).
        api_key_env: name of the environment variable holding the key (unset = no auth header).
        timeout: seconds per request (connect, read, write).
        max_retries: retries after the first attempt (so ``max_retries + 1`` attempts at most).
        backoff: first backoff in seconds, doubled per retry up to ``max_backoff``.
        max_total_seconds: hard bound on one call including retries.
        max_concurrency: in-flight requests in ``chat_batch``.
        multimodal: send image parts as is (vision models); otherwise render them as descriptions.
        tokenizer: asset name / path of a GGUF or Hugging Face tokenizer for ``count_tokens``;
            ``None`` asks the server's ``/tokenize`` (vLLM and llama.cpp servers provide one).
    """

    name = "openai"

    def __init__(
        self,
        model: str = "default",
        *,
        base_url: str = "http://127.0.0.1:8000/v1",
        api_key_env: str | None = "OPENAI_API_KEY",
        timeout: float = 60.0,
        max_retries: int = 4,
        backoff: float = 0.5,
        max_backoff: float = 20.0,
        max_total_seconds: float = 600.0,
        max_concurrency: int = 8,
        multimodal: bool = False,
        tokenizer: str | None = None,
        calibration: dict[str, float] | None = None,
    ) -> None:
        super().__init__(multimodal=multimodal, calibration=calibration)
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_total_seconds = max_total_seconds
        self.max_concurrency = max_concurrency
        self._tokenizer_spec = tokenizer
        self._tokenizer: Any = None
        key = os.environ.get(api_key_env) if api_key_env else None
        register_secret(key)  # servers may echo it in error bodies: never store or log it
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(timeout=timeout, headers=self._headers)

    # ---------------------------------------------------------------- retries

    def _retry_kwargs(self) -> dict[str, Any]:
        return {
            "retry": retry_if_exception(_retryable),
            "stop": stop_after_attempt(self.max_retries + 1) | stop_after_delay(self.max_total_seconds),
            "wait": wait_exponential(multiplier=self.backoff, max=self.max_backoff),
            "reraise": False,
        }

    def _fail(self, url: str, err: BaseException) -> LLMError:
        cause = err.last_attempt.exception() if isinstance(err, RetryError) else err
        attempts = err.last_attempt.attempt_number if isinstance(err, RetryError) else 1
        return LLMError(
            redact(f"openai backend: POST {url} failed after {attempts} attempt(s): {type(cause).__name__}: {cause}")
        )

    @staticmethod
    def _check(r: httpx.Response, url: str) -> dict[str, Any]:
        # Redact before cutting: a key cut in half would no longer match.
        if r.status_code in _RETRY_STATUS:
            raise _RetryableStatus(r.status_code, redact(r.text))
        if r.status_code >= 400:
            raise LLMError(f"openai backend: POST {url} -> HTTP {r.status_code}: {redact(r.text)[:300]}")
        try:
            return r.json()
        except ValueError as e:
            raise LLMError(f"openai backend: POST {url} returned non-JSON: {redact(r.text)[:200]!r}") from e

    def _request_body(self, messages: list[Message], **kw: Any) -> dict[str, Any]:
        return openai_request(messages, model=self.model, **kw)

    # ---------------------------------------------------------------- sync

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._post_raw(f"{self.base_url}{path}", body)

    def _complete(self, messages: list[Message], **kw: Any) -> LLMResponse:
        body = self._post("/chat/completions", self._request_body(messages, **kw))
        return parse_openai_response(body, source=f"openai backend ({self.base_url})")

    # ---------------------------------------------------------------- async batch

    def chat_batch(self, batch: Sequence[Sequence[Message]], **kwargs: Any) -> list[LLMResponse]:
        """All conversations concurrently, at most ``max_concurrency`` in flight; order preserved."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.achat_batch(batch, **kwargs))
        # called from inside an event loop (e.g. a notebook): run in a private loop on a thread
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1) as ex:
            return ex.submit(asyncio.run, self.achat_batch(batch, **kwargs)).result()

    async def achat_batch(
        self, batch: Sequence[Sequence[Message]], *, role: str = "reader", **options: Unpack[GenerationOptions]
    ) -> list[LLMResponse]:
        import time

        sem = asyncio.Semaphore(self.max_concurrency)
        url = f"{self.base_url}/chat/completions"
        kw = generation_options(**options)

        async with httpx.AsyncClient(timeout=self.timeout, headers=self._headers) as client:

            async def one(messages: Sequence[Message]) -> LLMResponse:
                body = self._request_body(self.prepare(messages), **kw)
                async with sem:
                    t0 = time.perf_counter()
                    try:
                        async for attempt in AsyncRetrying(**self._retry_kwargs()):
                            with attempt:
                                data = self._check(await client.post(url, json=body), url)
                    except (RetryError, httpx.HTTPError, _RetryableStatus) as e:
                        self.log.add(role, 0, 0, time.perf_counter() - t0, ok=False)
                        raise self._fail(url, e) from e
                    resp = parse_openai_response(data, source=f"openai backend ({self.base_url})")
                    return self._record(resp, role, time.perf_counter() - t0)

            return list(await asyncio.gather(*(one(m) for m in batch)))

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
        url = f"{root}/tokenize"
        # vLLM wants {"model", "prompt"} and answers {"count", "tokens"}; llama.cpp wants {"content"}
        body = {"model": self.model, "prompt": text, "content": text, "add_special_tokens": False,
                "add_special": False}  # fmt: skip
        data = self._post_raw(url, body)
        if "count" in data:
            return int(data["count"])
        if "tokens" in data:
            return len(data["tokens"])
        raise LLMError(f"openai backend: {url} gave no token count; set `tokenizer:` in the llm config")

    def _post_raw(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            for attempt in Retrying(**self._retry_kwargs()):
                with attempt:
                    return self._check(self._client.post(url, json=body), url)
        except (RetryError, httpx.HTTPError, _RetryableStatus) as e:
            raise self._fail(url, e) from e
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:
        return f"OpenAILLM({self.model!r} @ {self.base_url})"
