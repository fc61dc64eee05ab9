"""The FastAPI application of ``python -m canopy_lit.serve`` (see the package docstring for the endpoints).

Load control, in two stages:

* admission (``Admission``, an ASGI middleware on ``POST /compress``): at most ``max_concurrency + max_queue``
  requests are inside at once, counted from the moment their headers arrive, so request bodies in memory are
  bounded too; one more gets 503 + ``Retry-After`` at once. A declared ``Content-Length`` over
  ``max_body_bytes`` is a 413 before any byte is read; a chunked body is counted as it streams; a body not
  received within ``body_timeout`` seconds is a 408 (a slow client cannot hold its slot for ever).
* compute: an ``asyncio.Semaphore(max_concurrency)`` around a thread pool of as many workers, so the event loop
  keeps answering ``/health`` and refusing overload while the encoder runs.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import FastAPI, HTTPException
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request

from canopy_lit import api, inputs
from canopy_lit.api import MAX_ITEM_CHARS, CompressedEvidence, Compressor
from canopy_lit.refine import ParentRelativeRefiner

log = logging.getLogger("canopy_lit.serve")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# Modules whose TypeError / ValueError are the library's input checks (a 400); the same exception types
# raised anywhere else are a fault of the server (a 500), not of the request.
_INPUT_CHECK_MODULES = frozenset({api.__name__, inputs.__name__, "canopy_lit.types"})
_MARGIN_COMPRESSORS = 16  # distinct δ values kept (each is a shallow copy: the encoder and cache are shared)
INTERNAL_ERROR = "internal server error; the server log has the details"


@dataclass(frozen=True)
class Limits:
    """What one server process accepts (``python -m canopy_lit.serve --help`` has the same knobs).

    Attributes:
        max_concurrency: requests compressed at once (threads sharing the one encoder).
        max_queue: requests admitted beyond those, waiting for a compute slot; more get 503.
        max_items: items per request; more is a 413.
        max_body_bytes: request body size; more is a 413.
        body_timeout: seconds to receive a whole body; longer is a 408.
        media_root: image / video items must lie under it; None = no local media files are read (400).
        max_item_chars: the library's per-item size bound (None = none).
        retry_after: the ``Retry-After`` seconds of a 503.
    """

    max_concurrency: int = 1
    max_queue: int = 8
    max_items: int = 64
    max_body_bytes: int = 2_000_000
    body_timeout: float = 30.0
    media_root: Path | None = None
    max_item_chars: int | None = MAX_ITEM_CHARS
    retry_after: int = 1


# ----------------------------------------------------------------------------------------------- schema


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is a 422 naming it, not silently dropped


class TableIn(_Strict):
    """A table item's payload: column names and rows of cell strings."""

    header: list[str]
    rows: list[list[str]]
    caption: str = ""


class VideoIn(_Strict):
    """A video segment: a file under the server's ``--media-root`` and a window in seconds."""

    path: str
    start: float = 0.0
    end: float | None = None


class ItemIn(_Strict):
    """One retrieved item (``canopy_lit.types.Item``'s fields; ``Item.to_dict()`` is a valid one).

    ``text`` or ``sentences`` for a text item, ``table`` for a table, ``image`` / ``video`` (paths under the
    server's ``--media-root``) for media. ``id`` defaults to ``item<i>``; ids must be distinct.
    """

    id: str | None = None
    modality: Literal["text", "table", "image", "video"] = "text"
    title: str = ""
    text: str | None = None
    sentences: list[str] | None = None
    table: TableIn | None = None
    image: str | None = None
    video: VideoIn | None = None
    meta: dict[str, Any] = Field(default_factory=dict, description='free-form; meta.caption: an image\'s text')


class CompressRequest(_Strict):
    """``compress(question, items, budget=..., descend_margin=..., item_margin=...)`` as JSON."""

    question: str = Field(description="the user's question (non-empty)")
    items: list[str | ItemIn] = Field(description="retrieved items, most relevant first: passages or item objects")
    budget: Annotated[int, Field(strict=True)] | None = Field(
        default=None, description="at most this many tokens (the node encoder's tokenizer), >= 1; null = no cap"
    )
    descend_margin: Annotated[float, Field(allow_inf_nan=False)] = Field(
        default=0.0, description="δ of the refinement rule (0 = the paper); larger keeps more, coarser regions"
    )
    item_margin: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] | None = Field(
        default=None,
        description="null = every item keeps a region (the paper); else drop items whose best region scores "
        "more than this below the best item's",
    )


class RegionOut(BaseModel):
    """A kept region: leaves ``[start, end)`` of item ``item_id``, its node score and its text."""

    item_id: str
    start: int
    end: int
    score: float
    text: str


class CompressResponse(BaseModel):
    """``CompressedEvidence`` as JSON (``text`` is the blocks joined by blank lines, what a reader gets)."""

    text: str
    blocks: list[str]
    block_ids: list[str]
    regions: list[RegionOut]
    tokens: int
    item_tokens: int
    kept_ratio: float
    cut: list[str]
    skipped: list[str]
    dropped: list[str] = Field(default_factory=list, description="items dropped whole by item_margin")

    @classmethod
    def of(cls, ev: CompressedEvidence) -> CompressResponse:
        return cls(
            text=ev.text, blocks=ev.blocks, block_ids=ev.block_ids, tokens=ev.tokens, item_tokens=ev.item_tokens,
            kept_ratio=ev.kept_ratio, cut=ev.cut, skipped=ev.skipped, dropped=ev.dropped,
            regions=[RegionOut(item_id=r.item_id, start=r.start, end=r.end, score=r.score, text=r.text)
                     for r in ev.regions],
        )


class Health(BaseModel):
    """What this process serves and how loaded it is."""

    status: Literal["ok"] = "ok"
    encoder: str
    adapter: str | None
    fingerprint: str
    branching: int
    media: bool = Field(description="whether image / video items are read (the server has a --media-root)")
    max_concurrency: int
    max_queue: int
    admitted: int = Field(description="requests inside now: receiving, waiting or computing")
    computing: int


class ErrorOut(BaseModel):
    detail: str


# ------------------------------------------------------------------------------------------------ state


class Service:
    """The loaded compressor, the load counters and the worker threads of one process."""

    def __init__(self, compressor: Compressor, limits: Limits, encoder: str, adapter: str | None) -> None:
        self.compressor = compressor
        self.limits = limits
        self.encoder_name = encoder
        self.adapter = adapter
        self.admitted = 0  # touched on the event loop only
        self.computing = 0
        self.pool = ThreadPoolExecutor(max_workers=limits.max_concurrency, thread_name_prefix="compress")
        self._slots: asyncio.Semaphore | None = None
        self._by_margin: OrderedDict[tuple[float, float | None], Compressor] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        return self.limits.max_concurrency + self.limits.max_queue

    @property
    def slots(self) -> asyncio.Semaphore:
        if self._slots is None:  # created on the running loop
            self._slots = asyncio.Semaphore(self.limits.max_concurrency)
        return self._slots

    def for_margin(self, margin: float, item_margin: float | None = None) -> Compressor:
        """The compressor of δ = ``margin`` and ``item_margin``: the loaded one with its own refiner (encoder
        and cache shared)."""
        key = (inputs.check_margin(margin), inputs.check_item_margin(item_margin))
        base = self.compressor
        if key == (base.refiner.descend_margin, base.refiner.item_margin):
            return base
        with self._lock:
            if key not in self._by_margin:
                twin = copy.copy(base)
                twin.refiner = ParentRelativeRefiner(descend_margin=key[0], item_margin=key[1])
                self._by_margin[key] = twin
                while len(self._by_margin) > _MARGIN_COMPRESSORS:
                    self._by_margin.popitem(last=False)
            self._by_margin.move_to_end(key)
            return self._by_margin[key]

    def run(self, request: CompressRequest, items: list[Any]) -> CompressedEvidence:
        compressor = self.for_margin(request.descend_margin, request.item_margin)
        return compressor(request.question, items, request.budget, media_root=self.limits.media_root,
                          max_item_chars=self.limits.max_item_chars)


def is_input_error(err: BaseException) -> bool:
    """A ``TypeError`` / ``ValueError`` raised by the library's input checks (its innermost frame is one)."""
    if not isinstance(err, (TypeError, ValueError)):
        return False
    tb = err.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_globals.get("__name__") in _INPUT_CHECK_MODULES


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def one_line(message: str) -> str:
    return " ".join(message.split())


def _as_library_items(items: list[str | ItemIn], media: bool) -> list[Any]:
    out: list[Any] = []
    for i, it in enumerate(items):
        if isinstance(it, str):
            out.append(it)
            continue
        if not media and (it.image is not None or it.video is not None):
            field = "image" if it.image is not None else "video.path"
            raise HTTPException(400, f"items[{i}].{field}: this server reads no local media files "
                                     "(start it with --media-root DIR to allow files under DIR)")
        out.append(it.model_dump(exclude_none=True))
    return out


# ------------------------------------------------------------------------------------------- middleware


async def _reply(send: Send, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
    response = JSONResponse({"detail": detail}, status_code=status, headers=headers)
    await response({"type": "http"}, _no_receive, send)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}


class Admission:
    """Admission control and the body limits of the compute routes (the module docstring)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], service: Service,
                 paths: frozenset[str] = frozenset({"/compress"})) -> None:
        self.app = app
        self.service = service
        self.paths = paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return
        service, limits = self.service, self.service.limits
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                await _reply(send, 400, f"Content-Length: not a number ({declared[:40]!r})")
                return
            if length > limits.max_body_bytes:
                await _reply(send, 413, f"body of {length} bytes, over this server's "
                                        f"--max-body-bytes={limits.max_body_bytes}")
                return
        if service.admitted >= service.capacity:
            await _reply(send, 503, f"busy: {service.admitted} requests in progress or queued "
                                    f"(--max-concurrency={limits.max_concurrency}, --max-queue={limits.max_queue}); "
                                    "retry later", {"Retry-After": str(limits.retry_after)})
            return
        service.admitted += 1
        try:
            await self.app(scope, self._limited(receive), send)
        finally:
            service.admitted -= 1

    def _limited(self, receive: Receive) -> Receive:
        limits = self.service.limits
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limits.body_timeout
        received = 0
        done = False

        async def limited() -> Message:
            nonlocal received, done
            if done:  # the body is in: later calls wait for a disconnect, no deadline
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0.001))
            except asyncio.TimeoutError:
                raise HTTPException(408, f"body not received within --body-timeout={limits.body_timeout:g} s") from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limits.max_body_bytes:
                    raise HTTPException(413, f"body over this server's --max-body-bytes={limits.max_body_bytes}")
                done = not message.get("more_body", False)
            return message

        return limited


# -------------------------------------------------------------------------------------------------- app


def create_app(compressor: Compressor, limits: Limits | None = None, *, encoder: str = "minilm",
               adapter: str | None = None) -> FastAPI:
    """The service around a loaded ``compressor`` (``encoder`` / ``adapter``: how ``/health`` names them)."""
    service = Service(compressor, limits or Limits(), encoder, adapter)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        yield
        service.pool.shutdown(wait=True)  # graceful shutdown: running compressions finish first

    app = FastAPI(
        title="canopy-lit compression service",
        summary="CANOPY evidence compression (canopy_lit.compress) over HTTP",
        version=_version(),
        lifespan=lifespan,
    )
    app.state.service = service
    app.add_middleware(Admission, service=service)
    errors: dict[int | str, dict[str, Any]] = {
        code: {"model": ErrorOut, "description": what} for code, what in (
            (400, "input the library refuses (the message names the item and field)"),
            (408, "body not received within --body-timeout"),
            (413, "body over --max-body-bytes, or more than --max-items items"),
            (500, "an unexpected error (the traceback is in the server log)"),
            (503, "busy: --max-concurrency + --max-queue requests inside; see Retry-After"),
        )
    }

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        # FastAPI's detail list, with inputs JSON can carry (a NaN budget would make the 422 itself fail)
        return JSONResponse({"detail": _json_safe(jsonable_encoder(err.errors()))}, status_code=422)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, err: Exception) -> JSONResponse:
        log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=err)
        return JSONResponse({"detail": INTERNAL_ERROR}, status_code=500)

    @app.post("/compress", response_model=CompressResponse, responses=errors)
    async def compress(request: CompressRequest) -> CompressResponse:
        """Compress `items` for `question`: the kept regions of each item, in the order given (no LLM call)."""
        if len(request.items) > service.limits.max_items:
            raise HTTPException(413, f"items: {len(request.items)} items, over this server's "
                                     f"--max-items={service.limits.max_items}; send them in several requests")
        items = _as_library_items(request.items, media=service.limits.media_root is not None)
        async with service.slots:
            service.computing += 1
            try:
                ev = await asyncio.get_running_loop().run_in_executor(service.pool, service.run, request, items)
            except (TypeError, ValueError) as err:
                if not is_input_error(err):
                    log.exception("compress failed")
                    raise HTTPException(500, INTERNAL_ERROR) from None
                raise HTTPException(400, one_line(str(err))) from None
            except Exception:
                log.exception("compress failed")
                raise HTTPException(500, INTERNAL_ERROR) from None
            finally:
                service.computing -= 1
        return CompressResponse.of(ev)

    @app.get("/health", response_model=Health)
    async def health() -> Health:
        """The loaded model and the current load (not subject to the concurrency limit)."""
        c = service.compressor
        return Health(
            encoder=service.encoder_name, adapter=service.adapter, fingerprint=str(c.encoder.fingerprint),
            branching=c.hierarchy.branching, media=service.limits.media_root is not None,
            max_concurrency=service.limits.max_concurrency, max_queue=service.limits.max_queue,
            admitted=service.admitted, computing=service.computing,
        )

    return app


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("canopy-lit")
    except PackageNotFoundError:
        return "0+unknown"
