"""The LLM protocol shared by every backend, message helpers and per-call accounting.

Messages are OpenAI-format dicts (``{"role": "user", "content": str | [parts]}``), the lingua franca
of vLLM, llama.cpp servers and hosted APIs. Image content parts may carry a ``description`` that
text-only models receive instead of the pixels (``render_text_only``).
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, runtime_checkable

from canopy_lit.redaction import (  # noqa: F401 - re-exported: the backends' import path
    redact,
    redact_http_logs,
    register_secret,
    register_url_credentials,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

Message = dict[str, Any]


class LLMError(RuntimeError):
    """A backend call failed for good (after retries), with the backend and cause in the message."""


class PromptTooLongError(ValueError):
    """A prompt that does not fit the backend's context.

    The caller's error, not the backend's: it fails its own question and never counts toward the
    run's backend-failure streak (``max_consecutive_failures``), since the backend is healthy.
    """


# What servers say when a prompt exceeds the context: llama.cpp (``exceed_context_size_error``),
# vLLM offline and served, OpenAI (``context_length_exceeded``).
_PROMPT_TOO_LONG = re.compile(
    r"(?i)exceed_context_size|exceeds the available context size|maximum context length"
    r"|context_length_exceeded|longer than the maximum model length"
)


def is_prompt_too_long(message: str) -> bool:
    """True when a server's error text says the prompt did not fit its context."""
    return bool(_PROMPT_TOO_LONG.search(message))


# --------------------------------------------------------------------------- secrets
# (one redaction for every text, config and name that leaves the process: canopy_lit.redaction)

# --------------------------------------------------------------------------- messages


def system(text: str) -> Message:
    return {"role": "system", "content": text}


def user(text: str, images: Sequence[str | dict[str, str]] = ()) -> Message:
    """A user message; ``images`` are paths/URLs or ``{"url", "description"}`` dicts (image parts)."""
    if not images:
        return {"role": "user", "content": text}
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    for im in images:
        im = {"url": im} if isinstance(im, str) else dict(im)
        part: dict[str, Any] = {"type": "image_url", "image_url": {"url": _as_url(im["url"])}}
        if im.get("description"):
            part["description"] = im["description"]
        parts.append(part)
    return {"role": "user", "content": parts}


def assistant(text: str) -> Message:
    return {"role": "assistant", "content": text}


def _as_url(path_or_url: str) -> str:
    if "://" in path_or_url or path_or_url.startswith("data:"):
        return path_or_url
    return Path(path_or_url).expanduser().resolve().as_uri()


def _describe_part(part: dict[str, Any]) -> str:
    kind = part.get("type", "")
    if kind == "text":
        return str(part.get("text", ""))
    desc = part.get("description")
    if kind in ("image_url", "image"):
        url = (part.get("image_url") or {}).get("url", "") if isinstance(part.get("image_url"), dict) else ""
        name = Path(url.split("?")[0]).name if url and not url.startswith("data:") else "inline image"
        return f"[image {name}: {desc}]" if desc else f"[image {name}: no description available]"
    if kind in ("video_url", "video"):
        return f"[video: {desc}]" if desc else "[video: no description available]"
    return f"[{kind}: {desc}]" if desc else f"[{kind}]"


def render_text_only(messages: Sequence[Message]) -> list[Message]:
    """Flatten content parts to plain text; image/video parts become ``[image name: description]``."""
    out = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, list):
            m = {**m, "content": "\n".join(_describe_part(p) for p in c)}
        out.append(m)
    return out


def strip_extensions(messages: Sequence[Message]) -> list[Message]:
    """Drop our non-OpenAI keys (``description``) from parts before sending to a multimodal backend."""
    out = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, list):
            m = {**m, "content": [{k: v for k, v in p.items() if k != "description"} for p in c]}
        out.append(m)
    return out


def has_media(messages: Sequence[Message]) -> bool:
    return any(
        isinstance(m.get("content"), list) and any(p.get("type") != "text" for p in m["content"]) for m in messages
    )


# --------------------------------------------------------------------------- responses + accounting


@dataclass
class LLMResponse:
    """One completion.

    Attributes:
        text: the generated text.
        prompt_tokens / completion_tokens: counted by the backend's own tokenizer.
        seconds: wall time of the call (including retries for HTTP backends).
        top_logprobs: per generated token, ``{token: logprob}`` of the top alternatives (empty if not asked).
        cached_tokens: prompt tokens served from a prefix cache (llama.cpp), when reported.
    """

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    top_logprobs: list[dict[str, float]] = field(default_factory=list)
    role: str = ""
    finish_reason: str = ""
    cached_tokens: int = 0


@dataclass(frozen=True)
class CallRecord:
    role: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    scope: str = ""
    ok: bool = True
    cached_tokens: int = 0  # prompt tokens served from the backend's prefix cache (not prefilled)


class CallLog:
    """Thread-safe record of every LLM call (role, tokens, wall time) for per-question accounting.

    Use ``with log.scope(question_id): ...`` to tag calls, then ``log.summary(scope=qid)``; or take
    ``mark = len(log)`` before a question and ``log.summary(since=mark)`` after.
    """

    def __init__(self) -> None:
        self.records: list[CallRecord] = []
        self._lock = threading.Lock()
        self._scope = threading.local()

    def __len__(self) -> int:
        return len(self.records)

    @contextlib.contextmanager
    def scope(self, name: str) -> Iterator[None]:
        prev = getattr(self._scope, "name", "")
        self._scope.name = name
        try:
            yield
        finally:
            self._scope.name = prev

    def add(
        self,
        role: str,
        prompt_tokens: int,
        completion_tokens: int,
        seconds: float,
        ok: bool = True,
        cached_tokens: int = 0,
        scope: str | None = None,
    ) -> None:
        """Record one call; ``scope`` overrides the thread's current scope (batched calls of many questions)."""
        name = getattr(self._scope, "name", "") if scope is None else scope
        rec = CallRecord(role, prompt_tokens, completion_tokens, seconds, name, ok, cached_tokens)
        with self._lock:
            self.records.append(rec)

    def summary(self, *, since: int = 0, scope: str | None = None) -> dict[str, Any]:
        """Totals and per-role breakdown: ``{"calls", "prompt_tokens", "cached_tokens", "prefill_tokens",
        "completion_tokens", "seconds", "failed", "by_role"}``; ``prefill_tokens`` = prompt tokens not
        served from a prefix cache (what the backend actually computed)."""
        with self._lock:
            recs = [r for r in self.records[since:] if scope is None or r.scope == scope]
        by_role: dict[str, dict[str, float]] = defaultdict(
            lambda: {"calls": 0, "prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0, "seconds": 0.0}
        )
        for r in recs:
            d = by_role[r.role]
            d["calls"] += 1
            d["prompt_tokens"] += r.prompt_tokens
            d["cached_tokens"] += r.cached_tokens
            d["completion_tokens"] += r.completion_tokens
            d["seconds"] += r.seconds
        return {
            "calls": len(recs),
            "prompt_tokens": sum(r.prompt_tokens for r in recs),
            "cached_tokens": sum(r.cached_tokens for r in recs),
            "prefill_tokens": sum(r.prompt_tokens - r.cached_tokens for r in recs),
            "completion_tokens": sum(r.completion_tokens for r in recs),
            "seconds": sum(r.seconds for r in recs),
            "failed": sum(not r.ok for r in recs),
            "by_role": {k: dict(v) for k, v in by_role.items()},
        }


# --------------------------------------------------------------------------- protocol + base class


class GenerationOptions(TypedDict, total=False):
    """The generation keywords of ``chat`` / ``chat_batch``, all optional (defaults: ``generation_options``).

    Attributes:
        json_mode: ``True`` constrains output to a JSON object; a dict is a JSON schema to follow.
        logprobs: number of top alternatives to return per generated token (0 = none).
        max_tokens: generation budget.
        temperature: sampling temperature (0 = greedy).
        stop: strings that end the generation.
    """

    json_mode: bool | dict[str, Any]
    logprobs: int
    max_tokens: int
    temperature: float
    stop: Sequence[str] | None


def generation_options(
    *,
    json_mode: bool | dict[str, Any] = False,
    logprobs: int = 0,
    max_tokens: int = 256,
    temperature: float = 0.0,
    stop: Sequence[str] | None = None,
) -> dict[str, Any]:
    """``GenerationOptions`` with defaults filled in and ``stop`` as a list: the keywords of ``_complete``.

    The one place the defaults live; an unknown keyword raises ``TypeError``.
    """
    return {
        "json_mode": json_mode,
        "logprobs": logprobs,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "stop": list(stop or []),
    }


@runtime_checkable
class LLM(Protocol):
    """What every stage needs from a language model.

    A backend may also say how many tokens one conversation holds (prompt + reply) as
    ``context_length`` (None or absent = unknown); the roles fit every prompt into it.
    """

    name: str
    log: CallLog
    calibration: dict[str, float]

    def chat(
        self, messages: Sequence[Message], *, role: str = "reader", **options: Unpack[GenerationOptions]
    ) -> LLMResponse: ...

    def chat_batch(
        self, batch: Sequence[Sequence[Message]], *, return_exceptions: bool = False, **kwargs: Any
    ) -> list[Any]: ...

    def count_tokens(self, text: str) -> int: ...


class BaseLLM(ABC):
    """Shared plumbing: media handling, timing and the call log. Backends implement ``_complete``.

    Args:
        multimodal: the model accepts image parts; otherwise they are rendered as text descriptions.
        calibration: model-specific numbers fit offline (e.g. ``critic_yes_threshold``), kept with the config.

    Attributes:
        context_length: tokens one conversation may hold, prompt and reply (None = unknown).
    """

    name: str = "llm"
    context_length: int | None = None

    def __init__(self, *, multimodal: bool = False, calibration: dict[str, float] | None = None) -> None:
        self.multimodal = multimodal
        self.calibration: dict[str, float] = dict(calibration or {})
        self.log = CallLog()

    def prepare(self, messages: Sequence[Message]) -> list[Message]:
        if not has_media(messages):
            return list(messages)
        return strip_extensions(messages) if self.multimodal else render_text_only(messages)

    def chat(
        self, messages: Sequence[Message], *, role: str = "reader", **options: Unpack[GenerationOptions]
    ) -> LLMResponse:
        """Generate one reply.

        Args:
            role: accounting label (critic, reader, router, ...).
            options: ``GenerationOptions`` (json_mode, logprobs, max_tokens, temperature, stop).
        """
        kw = generation_options(**options)
        t0 = time.perf_counter()
        try:
            resp = self._complete(self.prepare(messages), **kw)
        except Exception:
            self.log.add(role, 0, 0, time.perf_counter() - t0, ok=False)
            raise
        return self._record(resp, role, time.perf_counter() - t0)

    def chat_batch(
        self, batch: Sequence[Sequence[Message]], *, return_exceptions: bool = False, **kwargs: Any
    ) -> list[Any]:
        """Many independent conversations, replies in order; backends with real batching override this.

        Args:
            return_exceptions: a failed conversation's exception takes its place in the list (as in
                ``asyncio.gather``), so one bad prompt fails only itself; False raises the first one.
        """
        return chat_each(self.chat, batch, return_exceptions=return_exceptions, **kwargs)

    def _record(self, resp: LLMResponse, role: str, seconds: float) -> LLMResponse:
        """Account one successful call in ``log``; ``resp`` gets its wall time and role."""
        resp.seconds, resp.role = seconds, role
        self.log.add(role, resp.prompt_tokens, resp.completion_tokens, seconds, cached_tokens=resp.cached_tokens)
        return resp

    @abstractmethod
    def _complete(self, messages: list[Message], **options: Any) -> LLMResponse:
        """One completion of already ``prepare``-d messages.

        ``options`` is what ``generation_options`` returns: every one of ``json_mode``, ``logprobs``,
        ``max_tokens``, ``temperature`` and ``stop`` (a list), defaults filled in.
        """

    @abstractmethod
    def count_tokens(self, text: str) -> int: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the model/connection (optional)."""


def chat_each(
    chat: Callable[..., LLMResponse],
    batch: Sequence[Sequence[Message]],
    *,
    return_exceptions: bool = False,
    **kwargs: Any,
) -> list[Any]:
    """``chat`` on each conversation in turn; with ``return_exceptions`` a failed one's exception takes
    its place in the list, else the first failure is raised."""
    out: list[Any] = []
    for messages in batch:
        try:
            out.append(chat(messages, **kwargs))
        except Exception as err:
            if not return_exceptions:
                raise
            out.append(err)
    return out
