"""In-process llama.cpp backend (the ``xllamacpp`` wheel) on a GGUF file: the CPU default.

The engine is llama.cpp's own server code run inside this process: chat templates, JSON-schema
constrained decoding, top logprobs and prompt-prefix caching come from llama.cpp itself. It also
listens on a loopback port, which serves exact token counts (``/tokenize``) and lets other
processes reach the same model over the OpenAI API (``base_url``).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any

import httpx
from annotated_types import Ge

from canopy_lit.llm.base import (
    BaseLLM,
    LLMError,
    LLMResponse,
    Message,
    PromptTooLongError,
    chat_each,
    is_prompt_too_long,
)
from canopy_lit.llm.wire import openai_request, parse_openai_response


def free_cores() -> int:
    """CPU cores this process may use minus the ones busy right now (1-min load), at least 1.

    llama.cpp decoding collapses when its threads oversubscribe cores other work is using, so the
    default is the cores actually free rather than all cores.
    """
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS / Windows
        n = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    return max(1, min(n, round(n - load)))


class LlamaCppLLM(BaseLLM):
    """A GGUF model served in process by llama.cpp.

    Args:
        model: asset name (``qwen2.5-1.5b``), GGUF path, or ``org/repo:file.gguf`` hub spec (downloads opt-in).
        n_ctx: context length in tokens (shared by ``n_parallel`` slots).
        n_threads: decode threads; ``None`` = cores free at load time (``free_cores``).
        n_parallel: concurrent sequences (slots); ``chat_batch`` uses that many threads.
        seed: sampling seed (temperature 0 is greedy anyway).
        multimodal: leave False: these GGUFs are text-only, image parts are rendered as descriptions.
        cache_prompt: reuse the slot's KV cache for the longest common prompt prefix (llama.cpp
            ``cache_prompt``); False prefills every prompt in full (the no-reuse baseline of
            experiments/perf.md). Reused tokens are reported per call as ``cached_tokens``.
        calibration: model-specific numbers such as ``critic_yes_threshold``.
    """

    name = "llamacpp"

    def __init__(
        self,
        model: str | os.PathLike[str] = "qwen2.5-1.5b",
        *,
        n_ctx: Annotated[int, Ge(1)] = 4096,
        n_threads: Annotated[int, Ge(1)] | None = None,
        n_parallel: Annotated[int, Ge(1)] = 1,
        n_batch: Annotated[int, Ge(1)] = 512,
        seed: int = 0,
        multimodal: bool = False,
        calibration: dict[str, float] | None = None,
        allow_downloads: bool | None = None,
        cache_prompt: bool = True,
    ) -> None:
        super().__init__(multimodal=multimodal, calibration=calibration)
        try:
            import xllamacpp as xl
        except ImportError as e:  # a core dependency, but say what to do if it is missing
            raise LLMError("the llamacpp backend needs the `xllamacpp` package: pip install xllamacpp") from e
        from canopy_lit.assets import resolve

        self.model_path = Path(resolve(model, allow_downloads=allow_downloads))
        if not self.model_path.is_file():
            raise LLMError(f"llamacpp: model {model!r} resolved to {self.model_path}, which is not a GGUF file")
        self.model_name = str(model)
        self.n_threads = n_threads or free_cores()
        p = xl.CommonParams()
        p.model.path = str(self.model_path)
        p.n_ctx = n_ctx
        p.n_parallel = n_parallel
        p.n_batch = n_batch
        p.cpuparams.n_threads = self.n_threads
        p.cpuparams_batch.n_threads = self.n_threads
        p.sampling.seed = seed
        p.verbosity = -1  # llama.cpp logs nothing below errors
        p.warmup = False
        p.hostnames = ["127.0.0.1"]
        p.port = 0  # any free loopback port
        self.n_ctx = n_ctx
        self.n_parallel = n_parallel
        self.cache_prompt = cache_prompt
        try:
            self._server = xl.Server(p)
        except Exception as e:
            raise LLMError(f"llamacpp: could not load {self.model_path}: {e}") from e
        self.base_url = str(self._server.listening_address or "")
        self._http = httpx.Client(timeout=60.0) if self.base_url else None
        self._tok_lock = threading.Lock()
        self.context_length = self._slot_context()

    def _slot_context(self) -> int:
        """Tokens one conversation may hold: a slot's context, as the server reports it (``/slots``).

        The slots share ``n_ctx`` (each gets ``n_ctx / n_parallel``) unless llama.cpp unifies their
        KV cache; asking the server covers both.
        """
        fallback = max(1, self.n_ctx // self.n_parallel)
        if self._http is None:
            return fallback
        try:
            slots = self._http.get(f"{self.base_url}/slots").json()
            return min(int(slot["n_ctx"]) for slot in slots) or fallback
        except (httpx.HTTPError, ValueError, KeyError, TypeError):  # an older server without /slots
            return fallback

    def _complete(self, messages: list[Message], **kw: Any) -> LLMResponse:
        req = openai_request(messages, **kw)
        req["cache_prompt"] = self.cache_prompt
        try:
            body = self._server.handle_chat_completions(req)
        except Exception as e:  # llama.cpp raises on e.g. prompts longer than n_ctx
            message = f"llamacpp ({self.model_path.name}): {e}"
            raise (PromptTooLongError(message) if is_prompt_too_long(message) else LLMError(message)) from e
        return parse_openai_response(body, source=f"llamacpp ({self.model_path.name})")

    def chat_batch(
        self, batch: Sequence[Sequence[Message]], *, return_exceptions: bool = False, **kwargs: Any
    ) -> list[Any]:
        """Up to ``n_parallel`` conversations at once in llama.cpp's slots (as ``BaseLLM.chat_batch``)."""
        if self.n_parallel <= 1 or len(batch) <= 1:
            return super().chat_batch(batch, return_exceptions=return_exceptions, **kwargs)

        def one(messages: Sequence[Message]) -> Any:
            return chat_each(self.chat, [messages], return_exceptions=return_exceptions, **kwargs)[0]

        with ThreadPoolExecutor(self.n_parallel) as ex:
            return list(ex.map(one, batch))

    def tokenize(self, text: str) -> list[int]:
        """Token ids by the model's own tokenizer (llama.cpp ``/tokenize``, no special tokens added)."""
        if self._http is None:
            raise LLMError("llamacpp: the in-process server did not expose a loopback address for /tokenize")
        url = f"{self.base_url}/tokenize"
        r = self._http.post(url, json={"content": text, "add_special": False})
        try:
            if r.status_code == 200:
                return list(r.json()["tokens"])
        except (ValueError, KeyError, TypeError):
            pass
        raise LLMError(f"llamacpp: POST {url} gave no tokens (HTTP {r.status_code}): {r.text[:200]!r}")

    def count_tokens(self, text: str) -> int:
        if not text:
            return 0
        return self._count_cached(text)

    @functools.lru_cache(maxsize=65536)  # noqa: B019 - evidence blocks recur across rounds; engine lives as long
    def _count_cached(self, text: str) -> int:
        return len(self.tokenize(text))

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None
        self._server = None  # the engine shuts down when the Server object is freed

    def __repr__(self) -> str:
        return f"LlamaCppLLM({self.model_path.name}, n_ctx={self.n_ctx}, n_threads={self.n_threads})"
