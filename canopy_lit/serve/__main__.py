"""``python -m canopy_lit.serve [--host 127.0.0.1] [--port 8000] [--adapter quickstart|PATH|none] ...``

Loads one ``Compressor``, binds the port, prints ``canopy_lit.serve: ready on http://HOST:PORT`` and serves until
SIGTERM / Ctrl-C (running requests finish first). ``--port 0`` takes a free port (the ready line names it).
Exit 2 with one line when the extra is missing or the compressor cannot be loaded.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from canopy_lit.api import MAX_ITEM_CHARS

log = logging.getLogger("canopy_lit.serve")


def _count(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _folder(text: str) -> Path:
    path = Path(text).expanduser().resolve()
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"not a folder: {text}")
    return path


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m canopy_lit.serve",
                                description="canopy_lit.compress as an HTTP service (docs/how-to/serve.md).")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default: loopback only)")
    p.add_argument("--port", type=_count(0), default=8000, help="TCP port; 0 = a free one (default: 8000)")
    p.add_argument("--encoder", default="minilm", help="node-encoder backbone (default: minilm)")
    p.add_argument("--adapter", default="quickstart",
                   help="a shipped adapter name, an adapter folder, or 'none' for f0 (default: quickstart)")
    p.add_argument("--branching", type=_count(2), default=2, help="B of the region trees (default: 2)")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="node embeddings on disk, shared across restarts (default: in memory)")
    p.add_argument("--max-concurrency", type=_count(1), default=1,
                   help="requests compressed at once, one thread each (default: 1)")
    p.add_argument("--max-queue", type=_count(0), default=8,
                   help="requests waiting beyond those; more get 503 + Retry-After (default: 8)")
    p.add_argument("--max-items", type=_count(1), default=64, help="items per request, more is a 413 (default: 64)")
    p.add_argument("--max-body-bytes", type=_count(1), default=2_000_000,
                   help="request body size, more is a 413 (default: 2000000)")
    p.add_argument("--body-timeout", type=_seconds, default=30.0,
                   help="seconds to receive a body, longer is a 408 (default: 30)")
    p.add_argument("--max-item-chars", type=_count(0), default=MAX_ITEM_CHARS,
                   help=f"characters per item, more is a 400; 0 = no bound (default: {MAX_ITEM_CHARS})")
    p.add_argument("--media-root", type=_folder, default=None,
                   help="image / video items must lie under this folder; without it no local media is read")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--no-access-log", action="store_true", help="no line per request")
    return p


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: the kernel picks a free one)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        import uvicorn

        from canopy_lit.serve.app import Limits, create_app
    except ImportError as err:
        print(f"canopy_lit.serve: needs the serve extra ({err.name or err} is missing): "
              "pip install 'canopy-lit[serve]'", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from canopy_lit.api import Compressor
    from canopy_lit.quiet import quiet_third_party

    quiet_third_party()
    adapter = None if args.adapter.lower() == "none" else args.adapter
    from canopy_lit.adapters import SHIPPED

    if adapter is not None and adapter not in SHIPPED and not Path(adapter).expanduser().is_dir():
        # before the backbone loads (seconds): a typo answers at once
        print(f"canopy_lit.serve: --adapter {adapter}: no such folder, and not a shipped adapter "
              f"({', '.join(sorted(SHIPPED))}); 'none' serves f0", file=sys.stderr)
        return 2
    log.info("loading %s (adapter %s)", args.encoder, adapter or "none: f0")
    try:
        compressor = Compressor(adapter=adapter, encoder=args.encoder, branching=args.branching,
                                cache_dir=args.cache_dir)
        compressor("Is the encoder ready?", ["The encoder is ready."])  # first-call costs before the port opens
    except (OSError, ValueError, ImportError) as err:
        print(f"canopy_lit.serve: cannot load the compressor: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    limits = Limits(
        max_concurrency=args.max_concurrency, max_queue=args.max_queue, max_items=args.max_items,
        max_body_bytes=args.max_body_bytes, body_timeout=args.body_timeout, media_root=args.media_root,
        max_item_chars=args.max_item_chars or None,
    )
    app = create_app(compressor, limits, encoder=args.encoder, adapter=adapter)
    try:
        sock = bind(args.host, args.port)
    except OSError as err:
        print(f"canopy_lit.serve: cannot listen on {args.host}:{args.port}: {err.strerror or err}", file=sys.stderr)
        return 2
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(app, log_level=args.log_level, access_log=not args.no_access_log,
                            timeout_graceful_shutdown=60)
    server = uvicorn.Server(config)
    # The port is bound: connections made from now on wait in the backlog until the loop accepts them.
    print(f"canopy_lit.serve: ready on http://{shown}:{port} (encoder {args.encoder}, adapter {adapter or 'none'})",
          flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    return 0 if server.started else 3  # 3: uvicorn's startup failure (the log says why)


if __name__ == "__main__":
    sys.exit(main())
