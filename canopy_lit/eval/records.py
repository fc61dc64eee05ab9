"""Durable per-question records: append + flush + fsync one JSON line per finished question, resume by id.

A run killed at any point (even SIGKILL mid-write) leaves at most one partial last
line; ``RecordLog`` cuts it off on open, so a restart re-does exactly the unfinished
questions and every question ends up in the file exactly once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


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
            with tmp.open("w", encoding="utf-8") as fh:
                fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in self.done.values())
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        self._fh = self.path.open("a", encoding="utf-8")

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
            self.done[str(rec["id"])] = rec  # a later line for the same id wins (retried failures)
        if end < len(raw):
            with self.path.open("r+b") as fh:
                fh.truncate(end)
        return len(raw) - end

    def __contains__(self, qid: str) -> bool:
        return qid in self.done

    def append(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.done[str(record["id"])] = record

    def records(self) -> Iterator[dict[str, Any]]:
        return iter(self.done.values())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> RecordLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
