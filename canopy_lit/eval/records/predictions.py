"""Durable per-question records: append + flush + fsync one JSON line per finished question, resume by id
(``RecordLog``), and ``read_predictions``, how anything else reads the file (one record per question id)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from canopy_lit.data.readers._io import DataFormatError
from canopy_lit.io import naming

log = logging.getLogger(__name__)


class RecordLog:
    """Append-only JSONL keyed by ``id``.

    Args:
        path: the ``predictions.jsonl`` file (created with its folder if missing).
        retry_failed: forget records with ``status == "failed"`` (rewriting the file without them),
            so that those questions run again.
    """

    def __init__(self, path: str | Path, retry_failed: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.done: dict[str, dict[str, Any]] = {}
        self.repaired_bytes = self._load()
        if retry_failed and any(r.get("status") == "failed" for r in self.done.values()):
            self.done = {k: r for k, r in self.done.items() if r.get("status") != "failed"}
            tmp = self.path.with_suffix(".jsonl.tmp")
            with naming(tmp), tmp.open("w", encoding="utf-8") as fh:
                fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in self.done.values())
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        # Unbuffered: a failed write leaves nothing behind in a buffer for close() to retry.
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _load(self) -> int:
        if not self.path.exists():
            return 0
        raw = self.path.read_bytes()
        end = raw.rfind(b"\n") + 1  # everything after the last newline is a torn write
        for n, line in enumerate(raw[:end].splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{self.path}: line {n} is not valid JSON ({err}); fix or remove it to resume") from err
            if not isinstance(rec, dict) or "id" not in rec:
                raise DataFormatError(self.path, "expected a JSON object with an \"id\"; fix or remove it to resume", line=n)
            self.done[str(rec["id"])] = rec  # a later line for the same id wins (retried failures)
        if end < len(raw):
            with self.path.open("r+b") as fh:
                fh.truncate(end)
        return len(raw) - end

    def __contains__(self, qid: str) -> bool:
        return qid in self.done

    def append(self, record: dict[str, Any]) -> None:
        """Write ``record`` as one line and fsync it; an ``OSError`` (a full disk) names the file and leaves
        the file as it was, ending on a whole record."""
        line = memoryview((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
        assert self._fd is not None, "append to a closed RecordLog"
        start = os.fstat(self._fd).st_size
        with naming(self.path):
            try:
                while line:
                    line = line[os.write(self._fd, line) :]
                os.fsync(self._fd)
            except OSError:
                with contextlib.suppress(OSError):  # a full disk may have taken part of the line
                    os.ftruncate(self._fd, start)
                raise
        self.done[str(record["id"])] = record

    def records(self) -> Iterator[dict[str, Any]]:
        return iter(self.done.values())

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RecordLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_predictions(path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``predictions.jsonl`` ([] when absent), one per question id, in first-seen order.

    A later line for an id replaces the earlier one (a retried failure, or two runs that wrote
    the same folder before it was locked); a torn last line is ignored; a bad line before it, or a
    line that is not a JSON object, raises ``ValueError`` naming file and line.
    """
    path = Path(path)
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    out: dict[str, dict[str, Any]] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as err:
            if n == len(lines):
                log.warning("%s: ignoring a torn last line", path)
                break
            raise ValueError(f"{path}: line {n} is not valid JSON ({err})") from err
        if not isinstance(rec, dict):
            raise DataFormatError(path, f"expected a JSON object (one record per line), got {type(rec).__name__}", line=n)
        out[str(rec.get("id", f"line {n}"))] = rec
    return list(out.values())

