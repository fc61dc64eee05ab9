"""The OpenAI-compatible backend over real HTTP on loopback.

Main path: llama.cpp's own HTTP server (run in process by xllamacpp) serving the real SmolLM2-135M;
a small pass-through proxy in front of it counts in-flight requests, checks the auth header and
can fail the first request with a 503. Failure path: servers that drop connections or never
answer must end in a clear ``LLMError`` within a bounded time, not a hang.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from loopback import LoopbackServer

from canopy_lit.control import LLMCritic
from canopy_lit.llm import LLMError, ParseStats, user
from canopy_lit.llm.openai import OpenAILLM


class _Proxy(LoopbackServer):
    """Forwards POSTs to the real server, recording concurrency and headers; can inject 503s."""

    def __init__(self, upstream: str, fail_first: int = 0) -> None:
        self.upstream, self.fail_first = upstream, fail_first
        self.in_flight = self.max_in_flight = self.requests = 0
        self.auth: list[str | None] = []
        self.lock = threading.Lock()
        super().__init__(self._forward)
        self.url = self.root

    def _forward(self, path: str, body: bytes, headers) -> tuple[int, bytes]:
        with self.lock:
            self.requests += 1
            n = self.requests
            self.auth.append(headers.get("Authorization"))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if n <= self.fail_first:
                return 503, b'{"error": "warming up"}'
            r = httpx.post(
                self.upstream + path, content=body, headers={"Content-Type": "application/json"}, timeout=120
            )
            return r.status_code, r.content
        finally:
            with self.lock:
                self.in_flight -= 1


@pytest.fixture
def proxy(smollm2_llm) -> Iterator[_Proxy]:
    p = _Proxy(smollm2_llm.base_url)
    yield p
    p.close()


def test_round_trip_against_real_llamacpp_server(smollm2_llm, proxy, monkeypatch) -> None:
    monkeypatch.setenv("CANOPY_TEST_API_KEY", "sk-test-123")
    llm = OpenAILLM("smollm2", base_url=proxy.url + "/v1", api_key_env="CANOPY_TEST_API_KEY", timeout=60)
    r = llm.chat([user("Name a colour.")], max_tokens=4, logprobs=3, role="reader")
    assert r.text and r.prompt_tokens > 0 and r.completion_tokens > 0 and r.top_logprobs
    v = LLMCritic(llm, mode="json", max_tokens=32, stats=ParseStats()).judge(
        "Who wrote Hamlet?", ["Hamlet is a play."]
    )
    assert v.parsed and isinstance(v.sufficient, bool)
    assert proxy.auth and set(proxy.auth) == {"Bearer sk-test-123"}  # key came from the environment only
    text = "Tokens counted by the server's own tokenizer."
    assert llm.count_tokens(text) == smollm2_llm.count_tokens(text)
    assert llm.log.summary()["by_role"]["reader"]["calls"] == 1
    llm.close()


def test_batch_runs_concurrently_but_bounded(proxy) -> None:
    llm = OpenAILLM("smollm2", base_url=proxy.url + "/v1", api_key_env=None, max_concurrency=2)
    prompts = [[user(f"Say the number {i}.")] for i in range(5)]
    out = llm.chat_batch(prompts, max_tokens=2, role="reader")
    assert len(out) == 5 and all(r.completion_tokens > 0 for r in out)
    assert proxy.max_in_flight == 2  # > 1: concurrent; <= max_concurrency: bounded
    assert set(proxy.auth) == {None}  # no key configured: no Authorization header at all
    assert llm.log.summary()["calls"] == 5


def test_transient_503_is_retried(smollm2_llm) -> None:
    flaky = _Proxy(smollm2_llm.base_url, fail_first=2)
    try:
        llm = OpenAILLM("smollm2", base_url=flaky.url + "/v1", api_key_env=None, max_retries=3)
        r = llm.chat([user("Hi")], max_tokens=2)
        assert r.completion_tokens > 0 and flaky.requests == 3
    finally:
        flaky.close()


def _read_request(conn: socket.socket) -> None:
    """Read one HTTP request whole (headers, then Content-Length bytes of body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)  # fmt: skip
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return
        body += chunk


class _BadServer:
    """A TCP server that drops every connection after reading, or accepts and never answers."""

    def __init__(self, mode: str) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.accepted = 0
        self.mode = mode
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            if self.mode == "drop":
                _read_request(conn)  # all of it: unread bytes at close() send a reset (ReadError), not a clean drop
                conn.close()
            else:
                self.held.append(conn)  # never reply

    def close(self) -> None:
        self.sock.close()
        for c in self.held:
            c.close()


@pytest.mark.parametrize(("mode", "error"), [("drop", "RemoteProtocolError"), ("hang", "ReadTimeout")])
def test_dead_server_ends_in_clear_error_not_a_hang(mode: str, error: str) -> None:
    bad = _BadServer(mode)
    try:
        llm = OpenAILLM("m", base_url=bad.url, api_key_env=None, timeout=0.5, max_retries=2)
        t0 = time.perf_counter()
        with pytest.raises(LLMError, match=f"failed after 3 attempt\\(s\\): {error}"):
            llm.chat([user("Hi")], max_tokens=2)
        assert time.perf_counter() - t0 < 10
        assert bad.accepted == 3
        assert llm.log.summary()["failed"] == 1
        with pytest.raises(LLMError, match="failed after 3 attempt"):
            llm.chat_batch([[user("a")], [user("b")]], max_tokens=2)
    finally:
        bad.close()
