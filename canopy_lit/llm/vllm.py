"""In-process vLLM engine for batched generation on GPUs (optional extra ``canopy-lit[vllm]``).

``vllm`` is imported only when this backend is built, so CPU installs never need it.

``vllm.LLM`` is not thread-safe: with ``concurrency > 1`` the evaluation harness calls ``chat`` from
several threads, so every engine call here holds one lock (calls run one after another; batching the
loop's calls through ``chat_batch`` is what makes vLLM fast, and is separate work).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

from annotated_types import Ge, Interval

from canopy_lit.llm.base import (
    BaseLLM,
    GenerationOptions,
    LLMError,
    LLMResponse,
    Message,
    PromptTooLongError,
    chat_each,
    generation_options,
    is_prompt_too_long,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

_ANY_JSON_OBJECT: dict[str, Any] = {"type": "object"}


class VLLMLLM(BaseLLM):
    """A vLLM ``LLM`` engine; ``chat_batch`` sends the whole batch to the engine at once.

    Args:
        model: asset name, local folder, or hub id (hub only with downloads allowed, see ``assets.resolve``).
        tensor_parallel_size: GPUs to shard the model over.
        gpu_memory_utilization: fraction of GPU memory vLLM may take.
        max_model_len: context length (``None`` = model default).
        multimodal: send image parts to the model (vision-language models such as Qwen3-VL).
        engine_kwargs: anything else for ``vllm.LLM`` (dtype, enforce_eager, limit_mm_per_prompt, ...).
    """

    name = "vllm"

    def __init__(
        self,
        model: str,
        *,
        tensor_parallel_size: Annotated[int, Ge(1)] = 1,
        gpu_memory_utilization: Annotated[float, Interval(gt=0, le=1)] = 0.85,
        max_model_len: Annotated[int, Ge(1)] | None = 8192,
        seed: int = 0,
        multimodal: bool = False,
        trust_remote_code: bool = False,
        allow_downloads: bool | None = None,
        calibration: dict[str, float] | None = None,
        engine_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(multimodal=multimodal, calibration=calibration)
        try:
            import vllm
        except ImportError as e:
            raise LLMError("the vllm backend needs vLLM and a GPU: pip install 'canopy-lit[vllm]'") from e
        from canopy_lit.assets import AssetError, downloads_allowed, resolve

        try:
            model_path = str(resolve(model, allow_downloads=False))
        except AssetError:
            if not downloads_allowed(allow_downloads):
                raise
            model_path = model  # a hub id: vLLM downloads it itself
        self.model = model_path
        self._vllm = vllm
        self._engine_lock = threading.Lock()  # the engine is not thread-safe: one call at a time
        self._tokenizer_lock = threading.Lock()
        self.engine = vllm.LLM(
            model=model_path,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            seed=seed,
            trust_remote_code=trust_remote_code,
            **(engine_kwargs or {}),
        )
        self._tokenizer = self.engine.get_tokenizer()
        model_config = getattr(getattr(self.engine, "llm_engine", None), "model_config", None)
        self.context_length = getattr(model_config, "max_model_len", None) or max_model_len

    def _sampling(
        self, *, json_mode: bool | dict[str, Any], logprobs: int, max_tokens: int, temperature: float, stop: list[str]
    ) -> Any:
        kw: dict[str, Any] = {"max_tokens": max_tokens, "temperature": temperature, "stop": stop or None}
        if logprobs:
            kw["logprobs"] = logprobs
        if json_mode:
            schema = json_mode if isinstance(json_mode, dict) else _ANY_JSON_OBJECT
            sp = self._vllm.sampling_params
            if hasattr(sp, "StructuredOutputsParams"):  # vLLM >= 0.11
                kw["structured_outputs"] = sp.StructuredOutputsParams(json=schema)
            else:  # older releases
                kw["guided_decoding"] = sp.GuidedDecodingParams(json=schema)
        return self._vllm.SamplingParams(**kw)

    def _to_response(self, out: Any, logprobs: int) -> LLMResponse:
        gen = out.outputs[0]
        tops: list[dict[str, float]] = []
        if logprobs and gen.logprobs:
            for pos in gen.logprobs:
                tops.append({(lp.decoded_token or str(tid)): float(lp.logprob) for tid, lp in pos.items()})
        return LLMResponse(
            text=gen.text,
            prompt_tokens=len(out.prompt_token_ids or []),
            completion_tokens=len(gen.token_ids),
            top_logprobs=tops,
            finish_reason=str(gen.finish_reason or ""),
            cached_tokens=int(getattr(out, "num_cached_tokens", 0) or 0),
        )

    def _generate(self, conversations: list[list[Message]], **kw: Any) -> list[LLMResponse]:
        params = self._sampling(**kw)
        try:
            with self._engine_lock:
                outs = self.engine.chat(conversations, params, use_tqdm=False)
        except ValueError as e:  # vLLM validates every prompt first: one too long refuses the whole call
            if is_prompt_too_long(str(e)):
                raise PromptTooLongError(f"vllm ({self.model}): {e}") from e
            raise
        return [self._to_response(o, kw["logprobs"]) for o in outs]

    def _complete(self, messages: list[Message], **kw: Any) -> LLMResponse:
        return self._generate([messages], **kw)[0]

    def chat_batch(
        self,
        batch: Sequence[Sequence[Message]],
        *,
        role: str = "reader",
        return_exceptions: bool = False,
        **options: Unpack[GenerationOptions],
    ) -> list[Any]:
        """One engine call for the whole batch (continuous batching inside vLLM).

        The engine refuses a whole call for one bad conversation; with ``return_exceptions`` each
        conversation of a refused call is then sent alone, so only the bad ones fail (their error in
        their place).
        """
        kw = generation_options(**options)
        t0 = time.perf_counter()
        try:
            outs = self._generate([self.prepare(m) for m in batch], **kw)
        except Exception as err:
            if return_exceptions and len(batch) > 1:
                return [chat_each(self.chat, [m], return_exceptions=True, role=role, **kw)[0] for m in batch]
            for _ in batch:
                self.log.add(role, 0, 0, (time.perf_counter() - t0) / len(batch), ok=False)
            if not return_exceptions:
                raise
            return [err]
        per_call = (time.perf_counter() - t0) / max(1, len(outs))  # batch wall time shared evenly
        return [self._record(r, role, per_call) for r in outs]

    def count_tokens(self, text: str) -> int:
        if not text:
            return 0
        # HF fast tokenizers raise "Already borrowed" under concurrent use; a separate lock so that
        # counting does not wait for a generation in flight
        with self._tokenizer_lock:
            return len(self._tokenizer.encode(text, add_special_tokens=False))

    def __repr__(self) -> str:
        return f"VLLMLLM({getattr(self, 'model', '?')!r})"
