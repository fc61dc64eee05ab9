"""Secrets out of everything that leaves the process: error texts, model replies, configs and run names.

One rule for every exit (predictions.jsonl, evaluate.log, ``.hydra/*.yaml``, W&B configs, names and tables,
the HTML viewer): registered secrets (the configured API key, the password of a URL's userinfo and the
Basic credential an HTTP client makes of it) and anything shaped like a credential (``Bearer <token>``,
``sk-...`` keys, ``api_key=...``, an Authorization header's value, a URL's ``user:password@``, a Basic
token that decodes to ``user:password``) become ``***``.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
import re
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from canopy_lit.io import atomic_write_text

_SECRETS: set[str] = set()
# Credentials that look like credentials: "Bearer <token>", OpenAI-style "sk-..." keys, "api_key=...",
# the value of an Authorization header (any scheme).
_SECRET_PATTERNS = re.compile(
    r"(?i)(bearer\s+|api[_-]?key[\"']?\s*[:=]\s*[\"']?"
    r"|authorization[\"']?\s*[:=]\s*[\"']?(?:(?:basic|bearer|digest|token)\s+)?)[^\s\"',;&]+"
    r"|\bsk-[A-Za-z0-9_\-]{8,}"
)
# The userinfo of a URL (``scheme://user:password@host``), which HTTP clients send as Basic auth.
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/?#@\"'<>]+@")
# A URL with userinfo, whole (to register its credentials before redacting it).
_URL_WITH_USERINFO = re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://[^\s/?#@\"'<>]+@[^\s/?#\"'<>,]+")
# A Basic credential on its own (a server echoing the header): redacted when it decodes to user:password.
_BASIC_TOKEN = re.compile(r"(?i)\b(basic\s+)([A-Za-z0-9+/]{6,}={0,2})")


def register_secret(value: str | None) -> None:
    """Remember a credential (e.g. the configured API key) so that ``redact`` hides it everywhere."""
    if value and len(value) >= 4:  # shorter "keys" would blank ordinary words
        _SECRETS.add(value)


def register_url_credentials(url: str) -> None:
    """Register the password of ``url``'s userinfo (or a bare token in its place) and the Basic credential
    an HTTP client makes of them, so that ``redact`` hides them in any form a server echoes."""

    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:  # a malformed port or bracket: nothing an HTTP client would send either
        return
    if user is None and password is None:
        return
    user, password = user or "", password or ""
    for value in (password, unquote(password)) if password else (user, unquote(user)):
        register_secret(value)
    register_secret(base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode())


def _redact_basic(m: re.Match[str]) -> str:
    try:
        decoded = base64.b64decode(m.group(2), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return m.group(0)
    return f"{m.group(1)}***" if ":" in decoded else m.group(0)


def redact(text: str) -> str:
    """``text`` with registered secrets and credential-like tokens replaced by ``***``.

    A URL's userinfo becomes ``***@`` and an Authorization header's value ``***``. The credentials of a
    URL in ``text`` are registered first, so that the same password elsewhere (a server's echo of the
    Basic header, a bare copy) is hidden too.
    """
    for url in _URL_WITH_USERINFO.findall(text):
        register_url_credentials(url)
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, "***")
    text = _URL_USERINFO.sub(lambda m: m.group(1) + "***@", text)
    text = _BASIC_TOKEN.sub(_redact_basic, text)
    return _SECRET_PATTERNS.sub(lambda m: (m.group(1) or "") + "***", text)


def redact_config(obj: Any) -> Any:
    """A copy of plain config data (dicts, lists, scalars) with every string, keys too, ``redact``-ed: what
    goes to ``wandb.init``, a logger's hyperparameters or a saved config."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, Mapping):
        return {redact_config(k): redact_config(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(redact_config(x) for x in obj)
    return obj


def redact_file(path: str | Path) -> bool:
    """Rewrite a text file (a saved config) redacted, in place and atomically; True when it changed."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    clean = redact(text)
    if clean == text:
        return False
    atomic_write_text(path, clean)
    return True


def redact_saved_configs(folder: str | Path) -> list[Path]:
    """Redact every ``*.yaml`` in ``folder`` (a run's ``.hydra/``: config, hydra and overrides, which Hydra
    writes from the command line as typed); the files that changed."""
    folder = Path(folder)
    return [p for p in sorted(folder.glob("*.yaml")) if redact_file(p)] if folder.is_dir() else []


@contextlib.contextmanager
def redacted_argv() -> Iterator[None]:
    """``sys.argv`` redacted for the duration: W&B records the command line in a run's metadata when the run
    starts (``wandb.init``), and a password typed into ``llm.base_url=`` must not go with it."""
    argv = sys.argv
    sys.argv = [redact(a) for a in argv]
    try:
        yield
    finally:
        sys.argv = argv


# Loggers of the HTTP stacks under the backends: they log request URLs (userinfo included) at INFO.
_HTTP_LOGGERS = frozenset({"httpx", "httpx2", "httpcore", "openai", "urllib3"})
_log_factory_lock = threading.Lock()


def redact_http_logs() -> None:
    """Redact (``redact``) every log record of the HTTP client libraries from now on, before any
    handler (console, evaluate.log) sees it. Idempotent."""
    with _log_factory_lock:
        inner = logging.getLogRecordFactory()
        if getattr(inner, "redacts_http", False):
            return

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = inner(*args, **kwargs)
            if record.name.split(".", 1)[0] in _HTTP_LOGGERS:
                message = record.getMessage()
                clean = redact(message)
                if clean != message:
                    record.msg, record.args = clean, None
            return record

        factory.redacts_http = True  # type: ignore[attr-defined]
        logging.setLogRecordFactory(factory)


__all__ = [
    "redact",
    "redact_config",
    "redact_file",
    "redact_http_logs",
    "redact_saved_configs",
    "redacted_argv",
    "register_secret",
    "register_url_credentials",
]
