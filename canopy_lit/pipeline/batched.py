"""Round-synchronous evidence loop: the LLM calls of many questions reach the backend as batches.

The per-question logic stays in ``EvidenceLoop.run``: nothing of it is duplicated here. Each question
runs in its own thread as a coroutine. Its LLM calls go through ``BatchingLLM``, which parks the call
at a barrier (``RoundScheduler``) instead of sending it; only one question thread runs pipeline code
at a time (a baton), so the CPU stages stay single-threaded and deterministic. When every question in
flight is parked, the parked calls are sent as one ``chat_batch`` per stage (calls with the same role
and generation options: critic verdicts, follow-ups, reader answers, ...), ordered by question, and
each question resumes with its own reply. So every question advances stage by stage, and a backend
sees batches: one engine call on vLLM, concurrent requests on an OpenAI-compatible server, calls in
turn (or in ``n_parallel`` slots) on llama.cpp. A call that fails fails only its own question, as in
the sequential loop: the batch asks the backend for each conversation's error in its place.

A question that finishes frees its place: the next question starts (``run_all`` or the evaluation
harness with ``concurrency`` = batch size) and joins the next barrier, as in continuous batching.
With a greedy model the records equal the sequential loop's (``tests/integration/test_batched_loop.py``);
on llama.cpp with one slot, interleaving questions costs prefix-cache reuse, so use it on GPU servers.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from canopy_lit.llm.base import CallLog, LLMResponse, Message, chat_each, generation_options
from canopy_lit.pipeline.loop import QuestionRunner
from canopy_lit.pipeline.trace import QuestionRecord
from canopy_lit.types import Question


@dataclass
class _Request:
    """One parked LLM call of one question (``seq``: the question's start order, for a stable batch order)."""

    seq: int
    messages: Sequence[Message]
    role: str
    options: dict[str, Any]
    done: threading.Event = field(default_factory=threading.Event)
    response: LLMResponse | None = None
    error: BaseException | None = None

    def stage(self) -> str:
        """Calls that can share one ``chat_batch``: same role, same generation options."""
        return json.dumps([self.role, self.options], sort_keys=True, default=str)


class RoundScheduler:
    """Barrier that gathers the parked LLM calls of every question in flight and sends them in batches.

    Args:
        llm: the real backend (``chat_batch`` is what it receives).
        max_batch: most conversations per ``chat_batch`` call (None = no cap); larger stages are split.

    Attributes:
        batch_sizes: size of every ``chat_batch`` sent, in order (for benchmarks and tests).
    """

    def __init__(self, llm: Any, max_batch: int | None = None) -> None:
        self.llm = llm
        self.max_batch = max_batch
        self.batch_sizes: list[int] = []
        self._cond = threading.Condition()
        self._running = 0  # questions in flight (or about to start in a free slot) not parked at the barrier
        self._reserved = 0  # of those, slots counted before their question's thread entered
        self._queued = 0  # questions still waiting for a slot (``run_all``): a finished one hands its slot on
        self._pending: list[_Request] = []
        self._flushing = False
        self._baton = threading.Lock()  # held by the one question thread running pipeline code
        self._local = threading.local()
        self._seq = itertools.count()

    def active(self) -> bool:
        """True in a question thread entered with ``question()``."""
        return getattr(self._local, "seq", None) is not None

    @contextlib.contextmanager
    def question(self) -> Iterator[None]:
        """Run one question's pipeline inside: its LLM calls then wait for the barrier."""
        with self._cond:
            if self._reserved:
                self._reserved -= 1
            else:
                self._running += 1
            seq = next(self._seq)
        self._baton.acquire()
        self._local.seq = seq
        try:
            yield
        finally:
            self._local.seq = None
            self._baton.release()
            with self._cond:
                if self._queued:  # the next question takes this slot: the barrier waits for it
                    self._queued -= 1
                    self._reserved += 1
                else:
                    self._running -= 1
            self._drain()

    def admit(self, starting: int, queued: int) -> None:
        """Count ``starting`` questions as in flight before their threads run, and ``queued`` more that
        take a slot when one frees, so that no barrier passes before they reach it."""
        with self._cond:
            self._running += starting
            self._reserved += starting
            self._queued += queued

    def call(self, messages: Sequence[Message], role: str, options: dict[str, Any]) -> LLMResponse:
        """Park one call until its batch is answered; raise the backend's error if this call failed."""
        req = _Request(self._local.seq, messages, role, options)
        with self._cond:
            self._pending.append(req)
            self._running -= 1
        self._baton.release()
        try:
            self._drain()
            req.done.wait()
        finally:
            self._baton.acquire()
        if req.error is not None:
            raise req.error
        assert req.response is not None
        return req.response

    def _drain(self) -> None:
        """Send the parked calls once no question is running; at most one sender at a time."""
        while True:
            with self._cond:
                if self._flushing or self._running > 0 or not self._pending:
                    return
                self._flushing = True
                batch, self._pending = sorted(self._pending, key=lambda r: r.seq), []
            try:
                self._send(batch)
            finally:
                with self._cond:
                    self._flushing = False
                    self._running += len(batch)  # before waking them: no barrier may pass meanwhile
                for r in batch:
                    r.done.set()

    def _send(self, batch: list[_Request]) -> None:
        stages: dict[str, list[_Request]] = {}
        for r in batch:  # stages in order of their first question
            stages.setdefault(r.stage(), []).append(r)
        for reqs in stages.values():
            step = self.max_batch or len(reqs)
            for i in range(0, len(reqs), step):
                chunk = reqs[i : i + step]
                self.batch_sizes.append(len(chunk))
                for r, out in zip(chunk, self._answer(chunk), strict=True):
                    if isinstance(out, BaseException):
                        r.error = out
                    else:
                        r.response = out

    def _answer(self, chunk: list[_Request]) -> list[LLMResponse | BaseException]:
        """One reply or error per call of one stage, in order."""
        try:
            outs = self.llm.chat_batch(
                [r.messages for r in chunk], role=chunk[0].role, return_exceptions=True, **chunk[0].options
            )
            if len(outs) != len(chunk):
                raise RuntimeError(f"chat_batch returned {len(outs)} replies for {len(chunk)} conversations")
        except Exception as err:
            if len(chunk) == 1:
                return [err]
            # The backend refused the batch as a whole: each call alone, as the sequential loop sends it,
            # so that a bad conversation fails only its own question.
            return [
                chat_each(self.llm.chat, [r.messages], return_exceptions=True, role=r.role, **r.options)[0]
                for r in chunk
            ]
        return list(outs)


class BatchingLLM:
    """An ``LLM`` that parks calls at a ``RoundScheduler`` inside a question thread, else calls through.

    ``log`` is its own ``CallLog``: every call is recorded in the calling question's thread (scope),
    so per-question accounting holds whether the call went alone or in a batch. The wrapped
    backend's log keeps every call as well.
    """

    def __init__(self, llm: Any, max_batch: int | None = None) -> None:
        self.inner = llm
        self.scheduler = RoundScheduler(llm, max_batch)
        self.log = CallLog()

    @property
    def name(self) -> str:
        return str(getattr(self.inner, "name", "llm"))

    @property
    def calibration(self) -> dict[str, float]:
        return getattr(self.inner, "calibration", {}) or {}

    def __getattr__(self, attr: str) -> Any:
        """Anything else (multimodal, base_url, close, ...) is the backend's."""
        if attr == "inner":
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    def count_tokens(self, text: str) -> int:
        return int(self.inner.count_tokens(text))

    def chat(self, messages: Sequence[Message], *, role: str = "reader", **options: Any) -> LLMResponse:
        opts = generation_options(**options)  # unknown keywords raise here, as with any backend
        try:
            if self.scheduler.active():
                resp = self.scheduler.call(messages, role, opts)
            else:
                resp = self.inner.chat(messages, role=role, **opts)
        except Exception:
            self.log.add(role, 0, 0, 0.0, ok=False)
            raise
        self.log.add(
            role, resp.prompt_tokens, resp.completion_tokens, resp.seconds, cached_tokens=resp.cached_tokens
        )
        return resp

    def chat_batch(
        self, batch: Sequence[Sequence[Message]], *, return_exceptions: bool = False, **kwargs: Any
    ) -> list[Any]:
        return chat_each(self.chat, batch, return_exceptions=return_exceptions, **kwargs)


class BatchedQuestionRunner(QuestionRunner):
    """``QuestionRunner`` whose questions run round-synchronously when several are in flight.

    Called from several threads (the harness with ``concurrency`` > 1, or ``run_all``), the calls of the
    questions in flight are batched; called from one thread it behaves exactly like ``QuestionRunner``.
    """

    def __init__(self, loop: Any, llm: BatchingLLM) -> None:
        super().__init__(loop, llm)
        self.batching = llm

    def run(self, question: Question) -> QuestionRecord:
        with self.batching.scheduler.question():
            return super().run(question)

    def run_all(
        self, questions: Sequence[Question], batch_size: int = 64
    ) -> list[QuestionRecord | BaseException]:
        """Every question, ``batch_size`` in flight at once; a question's exception is returned in its place.

        Returns:
            one entry per question, in order: its record, or the exception its pipeline raised.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")

        def one(q: Question) -> QuestionRecord | BaseException:
            try:
                return self.run(q)
            except Exception as err:  # recorded in place, like the harness's failed records
                return err

        slots = min(batch_size, len(questions))
        if not slots:
            return []
        self.batching.scheduler.admit(slots, len(questions) - slots)
        with ThreadPoolExecutor(slots) as pool:
            return list(pool.map(one, questions))


__all__ = ["BatchedQuestionRunner", "BatchingLLM", "RoundScheduler"]
