"""``python -m canopy_lit.serve``: the real process on 127.0.0.1 with the real MiniLM and the shipped adapter,
answering real HTTP requests (httpx, and a raw socket where a request must stay half-sent).

One server for the module, started with tight limits so each refusal is reachable: one compute slot and no
queue (a second request while one is inside is a 503), 12 items, 64 KiB bodies, a 2 s body timeout and a
media root. Skips without the serve extra (``pip install canopy-lit[serve]``), except the check that the
command then says what to install.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

import canopy_lit
from canopy_lit.api import Compressor
from canopy_lit.data import load_benchmark

MAX_BODY = 65_536
MAX_ITEMS = 12
BODY_TIMEOUT = 2.0


@dataclass
class Server:
    url: str
    port: int
    log: Path
    media: Path
    outside: Path  # a real PNG outside the media root


def _png(path: Path) -> Path:
    from PIL import Image

    Image.new("RGB", (4, 4), (200, 30, 30)).save(path)
    return path


@pytest.fixture(scope="module")
def serve_extra() -> None:
    for module in ("fastapi", "uvicorn"):
        pytest.importorskip(module, reason="needs the serve extra: pip install canopy-lit[serve]")


def _cli(*args: str, hide: str = "") -> subprocess.CompletedProcess:
    code = (f"import sys; sys.modules[{hide!r}] = None; " if hide else "import sys; ")
    code += f"from canopy_lit.serve.__main__ import main; sys.exit(main({list(args)!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_without_the_extra_or_with_a_bad_flag_it_stops_in_one_line() -> None:
    missing = _cli("--port", "0", hide="fastapi")
    assert missing.returncode == 2 and missing.stderr.strip().splitlines() == [
        "canopy_lit.serve: needs the serve extra (fastapi is missing): pip install 'canopy-lit[serve]'"]
    if importlib.util.find_spec("fastapi") is None or importlib.util.find_spec("uvicorn") is None:
        return  # the rest needs the extra
    typo = _cli("--port", "0", "--adapter", "quickstrat")
    assert typo.returncode == 2 and typo.stderr.strip().splitlines() == [
        "canopy_lit.serve: --adapter quickstrat: no such folder, and not a shipped adapter (quickstart); "
        "'none' serves f0"]
    bad = _cli("--max-concurrency", "0")
    assert bad.returncode == 2 and "--max-concurrency: must be >= 1, got 0" in bad.stderr


@dataclass
class Launched:
    proc: subprocess.Popen
    log: Path
    media: Path
    outside: Path


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory, serve_extra: None) -> Iterator[Launched]:
    """The server process, started (it loads while ``reference`` computes the in-process evidence)."""
    tmp = tmp_path_factory.mktemp("serve")
    media = tmp / "media"
    media.mkdir()
    _png(media / "inside.png")
    log = tmp / "server.log"
    cmd = [sys.executable, "-m", "canopy_lit.serve", "--port", "0", "--adapter", "quickstart",
           "--max-concurrency", "1", "--max-queue", "0", "--max-items", str(MAX_ITEMS),
           "--max-body-bytes", str(MAX_BODY), "--body-timeout", str(BODY_TIMEOUT), "--media-root", str(media)]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=tmp,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        yield Launched(proc, log, media, _png(tmp / "outside.png"))
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    text = log.read_text()
    # uvicorn re-raises the SIGTERM it handled once it has shut down, so a clean stop exits by that signal
    assert proc.returncode in (0, -signal.SIGTERM), f"the server did not stop cleanly (exit {proc.returncode}):\n{text}"
    assert "Application shutdown complete" in text and "Finished server process" in text, text
    assert "Traceback" not in text, text


SETTINGS = [(None, 0.0, None), (120, 0.05, None), (None, 0.0, 0.1)]  # (budget, descend_margin, item_margin)


@pytest.fixture(scope="module")
def reference(launched: Launched, hotpot: tuple[str, list]) -> dict[tuple[int | None, float, float | None], object]:
    """``canopy_lit.compress`` in this process on the HotpotQA question, per setting."""
    question, items = hotpot
    return {(b, m, d): canopy_lit.compress(question, items, adapter="quickstart", budget=b, descend_margin=m,
                                           item_margin=d)
            for b, m, d in SETTINGS}


@pytest.fixture(scope="module")
def server(launched: Launched, reference: dict) -> Server:
    deadline = time.monotonic() + 180
    while not (m := re.search(r"ready on http://127\.0\.0\.1:(\d+)", launched.log.read_text())):
        assert launched.proc.poll() is None, (
            f"the server exited with {launched.proc.returncode}:\n{launched.log.read_text()}")
        assert time.monotonic() < deadline, f"no ready line in 180 s:\n{launched.log.read_text()}"
        time.sleep(0.1)
    port = int(m.group(1))
    return Server(f"http://127.0.0.1:{port}", port, launched.log, launched.media, launched.outside)


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def hotpot() -> tuple[str, list]:
    bench = load_benchmark("hotpotqa")
    question = bench.questions[0]
    return question.text, [bench.items[i] for i in bench.candidates[question.id]]


@pytest.fixture(scope="module")
def compressor() -> Compressor:
    return Compressor(adapter="quickstart")


def _expect_error(response: httpx.Response, status: int) -> object:
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert "Traceback" not in response.text and 'File "' not in response.text
    if isinstance(detail, str):
        assert "\n" not in detail and detail
    return detail


def test_health_names_the_loaded_model(client: httpx.Client, compressor: Compressor) -> None:
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["encoder"] == "minilm" and health["adapter"] == "quickstart"
    assert health["fingerprint"] == compressor.encoder.fingerprint  # the shipped fθ, not f0
    assert health["fingerprint"].rsplit(":adapter=", 1)[1] != "none"
    assert health["media"] is True and health["max_concurrency"] == 1 and health["max_queue"] == 0
    assert health["admitted"] == 0 and health["computing"] == 0
    schema = client.get("/openapi.json").json()
    assert {"/compress", "/health"} <= set(schema["paths"])
    assert {"question", "items", "budget", "descend_margin", "item_margin"} <= set(schema["components"]["schemas"]["CompressRequest"]["properties"])


@pytest.mark.parametrize(("budget", "margin", "item_margin"), SETTINGS)
def test_hotpotqa_over_http_is_compress_in_process(client: httpx.Client, hotpot: tuple[str, list], reference: dict,
                                                    budget: int | None, margin: float, item_margin: float | None) -> None:
    question, items = hotpot
    body = {"question": question, "items": [it.to_dict() for it in items], "budget": budget, "descend_margin": margin,
            "item_margin": item_margin}
    response = client.post("/compress", json=body)
    assert response.status_code == 200, response.text
    got = response.json()
    want = reference[(budget, margin, item_margin)]
    assert got["blocks"] == want.blocks and got["block_ids"] == want.block_ids and got["text"] == want.text
    assert (got["tokens"], got["item_tokens"], got["cut"], got["skipped"], got["dropped"]) == (
        want.tokens, want.item_tokens, want.cut, want.skipped, want.dropped)
    assert bool(got["dropped"]) == (item_margin is not None)  # HotpotQA's distractors: some are dropped
    assert [(r["item_id"], r["start"], r["end"], r["text"]) for r in got["regions"]] == [
        (r.item_id, r.start, r.end, r.text) for r in want.regions]
    assert [r["score"] for r in got["regions"]] == pytest.approx([r.score for r in want.regions], abs=1e-6)
    assert 0 < got["tokens"] < got["item_tokens"]
    if budget is not None:
        assert got["tokens"] <= budget and got["cut"]


def test_a_malformed_body_is_a_422_with_fastapis_detail(client: httpx.Client) -> None:
    headers = {"content-type": "application/json"}
    for body in (
        b"{not json",
        b'{"question": "q", "items": "one passage"}',  # items must be a list
        b'{"question": "q", "items": [{"txt": "a misspelt field"}]}',
        b'{"question": "q", "items": ["x"], "budget": true}',
        b'{"question": "q", "items": ["x"], "descend_margin": NaN}',  # Python's json reads NaN: still a 422
        b'{"question": "q", "items": ["x"], "item_margin": -0.1}',
        b'{"items": ["x"]}',
    ):
        detail = _expect_error(client.post("/compress", content=body, headers=headers), 422)
        assert isinstance(detail, list) and detail and all("loc" in d and "msg" in d for d in detail), body


def test_input_the_library_refuses_is_a_400_with_its_message(client: httpx.Client, server: Server) -> None:
    def refused(body: dict) -> str:
        detail = _expect_error(client.post("/compress", json=body), 400)
        assert isinstance(detail, str)
        return detail

    assert refused({"question": "", "items": ["x"]}) == "question: empty (nothing to score the items against)"
    assert refused({"question": "q", "items": ["x"], "budget": 0}).startswith("budget must be a positive whole")
    assert "distinct ids" in refused({"question": "q", "items": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]})
    assert refused({"question": "q", "items": ["x", {"modality": "table", "text": "no table"}]}).startswith("items[1]")
    assert "over max_item_chars" in refused({"question": "q", "items": ["word " * 5000]})  # 25k characters
    # media: a real image outside --media-root is refused, by an absolute path or by climbing out
    for path in (str(server.outside), "../outside.png"):
        detail = refused({"question": "q", "items": [{"modality": "image", "image": path}]})
        assert detail.startswith("items[0].image:") and "outside media_root" in detail


def test_too_much_is_a_413(client: httpx.Client) -> None:
    big = {"question": "q", "items": ["word " * (MAX_BODY // 5 + 10)]}
    detail = _expect_error(client.post("/compress", json=big), 413)
    assert f"--max-body-bytes={MAX_BODY}" in detail

    def chunked() -> Iterator[bytes]:  # no Content-Length: counted as it streams
        yield b'{"question": "q", "items": ["'
        for _ in range(MAX_BODY // 4096 + 2):
            yield b"x" * 4096
        yield b'"]}'

    response = client.post("/compress", content=chunked(), headers={"content-type": "application/json"})
    assert "content-length" not in response.request.headers
    assert f"--max-body-bytes={MAX_BODY}" in _expect_error(response, 413)
    many = {"question": "q", "items": [f"passage {i}" for i in range(MAX_ITEMS + 1)]}
    assert f"--max-items={MAX_ITEMS}" in _expect_error(client.post("/compress", json=many), 413)


def _half_sent(port: int, body: bytes, sent: int) -> socket.socket:
    """A POST /compress whose headers and first ``sent`` body bytes are on the wire; the rest is not."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    head = (f"POST /compress HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    sock.sendall(head + body[:sent])
    return sock


def _response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    head, _, payload = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode().split("\r\n")
    return int(status_line.split()[1]), {k.lower(): v.strip() for k, v in (x.split(":", 1) for x in lines)}, payload


def _wait_admitted(client: httpx.Client, n: int) -> None:
    deadline = time.monotonic() + 30
    while client.get("/health").json()["admitted"] != n:
        assert time.monotonic() < deadline, f"the server never had {n} request(s) inside"
        time.sleep(0.02)


def test_overload_is_a_503_with_retry_after_and_the_held_request_still_answers(client: httpx.Client,
                                                                              server: Server) -> None:
    body = json.dumps({"question": "Who designed the tower?",
                       "items": ["The tower was designed by Gustave Eiffel's company. It opened in 1889."]}).encode()
    held = _half_sent(server.port, body, len(body) // 2)  # admitted: the only slot (1 + queue 0) is taken
    _wait_admitted(client, 1)
    busy = client.post("/compress", json={"question": "q", "items": ["x"]})
    detail = _expect_error(busy, 503)
    assert busy.headers["retry-after"] == "1" and "--max-concurrency=1" in detail
    held.sendall(body[len(body) // 2:])
    status, _, payload = _response(held)
    assert status == 200 and json.loads(payload)["block_ids"] == ["item0"]
    _wait_admitted(client, 0)
    assert client.post("/compress", json={"question": "q", "items": ["x"]}).status_code == 200  # the slot is free


def test_a_body_that_never_arrives_is_a_408_and_frees_its_slot(client: httpx.Client, server: Server) -> None:
    body = json.dumps({"question": "q", "items": ["x"]}).encode()
    start = time.monotonic()
    status, _, payload = _response(_half_sent(server.port, body, 5))
    assert status == 408 and "--body-timeout=2" in json.loads(payload)["detail"]
    assert BODY_TIMEOUT - 0.1 <= time.monotonic() - start < BODY_TIMEOUT + 20
    _wait_admitted(client, 0)


# In-process: the same application under FastAPI's TestClient, for faults an HTTP client cannot cause.


class _Broken:
    """A node scorer whose every method raises ``err``."""

    def __init__(self, err: Exception) -> None:
        self.err = err

    def __getattr__(self, name: str) -> object:
        def fail(*args: object, **kwargs: object) -> object:
            raise self.err

        return fail


def test_an_unexpected_error_is_a_generic_500_and_its_traceback_goes_to_the_log(
    serve_extra: None, compressor: Compressor, caplog: pytest.LogCaptureFixture
) -> None:
    from fastapi.testclient import TestClient

    from canopy_lit.serve import create_app

    for err in (RuntimeError("secret internals"), ValueError("secret internals")):  # a ValueError too: not input
        broken = copy.copy(compressor)
        broken.scorer = _Broken(err)  # the pipeline fails past the input checks
        with caplog.at_level(logging.ERROR, logger="canopy_lit.serve"), TestClient(create_app(broken)) as tc:
            caplog.clear()
            response = tc.post("/compress", json={"question": "q", "items": ["A passage. Another one."]})
        detail = _expect_error(response, 500)
        assert "secret" not in response.text and "server log" in detail
        assert any(r.exc_info and "secret internals" in str(r.exc_info[1]) for r in caplog.records), caplog.text


def test_without_a_media_root_no_local_file_is_read(serve_extra: None, compressor: Compressor, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from canopy_lit.serve import create_app

    image = _png(tmp_path / "photo.png")
    with TestClient(create_app(compressor)) as tc:
        assert tc.get("/health").json()["media"] is False
        for item in ({"modality": "image", "image": str(image)},
                     {"modality": "video", "video": {"path": str(tmp_path / "clip.mp4")}}):
            detail = _expect_error(tc.post("/compress", json={"question": "q", "items": [item]}), 400)
            assert "reads no local media files" in detail and "--media-root" in detail
