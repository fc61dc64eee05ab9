"""A loopback HTTP server for tests of the OpenAI-compatible backend.

Each POST goes to ``handle(path, body, headers) -> (status, body bytes)`` on a server thread (or
``(status, body bytes, content type)`` for a reply that is not ``application/json``); tests script the
replies (unit tier) or forward them to a real llama.cpp server (integration tier).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Handle = Callable[[str, bytes, Mapping[str, str]], tuple[int, bytes] | tuple[int, bytes, str]]


class LoopbackServer:
    """Serves ``handle`` on 127.0.0.1 at a free port until ``close()``; ``root`` is its base URL."""

    def __init__(self, handle: Handle) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status, data, *kind = handle(self.path, body, self.headers)
                self.send_response(status)
                self.send_header("Content-Type", kind[0] if kind else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.root = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
