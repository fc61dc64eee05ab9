"""Durable per-question records: append + flush + fsync one JSON line per finished question, resume by id.

A run killed at any point (even SIGKILL mid-write) leaves at most one partial last
line; ``RecordLog`` cuts it off on open, so a restart re-does exactly the unfinished
questions and every question ends up in the file exactly once.

``RunLock`` keeps a second evaluation out of a run folder while one is writing it, and
``read_predictions`` is how anything else reads the file (one record per question id).
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def read_predictions(path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``predictions.jsonl`` ([] when absent), one per question id, in first-seen order.

    A later line for an id replaces the earlier one (a retried failure, or two runs that wrote
    the same folder before it was locked); a torn last line is ignored; a bad line before it
    raises ``ValueError`` naming file and line.
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
        out[str(rec.get("id", f"line {n}"))] = rec
    return list(out.values())


class RunLocked(RuntimeError):
    """Another live process holds the run folder; the message names its pid and host."""


class RunLock:
    """Exclusive use of a run folder: ``<run dir>/.lock`` holding the owner's pid, host and start time.

    The lock is a ``flock`` on that file, so the kernel releases it when the owner dies, even by
    SIGKILL: a lock file left by a dead process is stale and is taken over (and said so), with no
    pid-liveness guess and no window in which two takers both win. A live holder makes
    ``acquire`` raise ``RunLocked`` naming its pid and host. Released locks remove the file.

    Args:
        run_dir: the run folder (created if missing).
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / ".lock"
        self._fd: int | None = None

    def holder(self) -> dict[str, Any]:
        """What the lock file says about its owner ({} when absent or unreadable)."""
        try:
            return json.loads(self.path.read_text(encoding="utf-8") or "{}")
        except (OSError, ValueError):
            return {}

    def acquire(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                os.close(fd)
                if err.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                h = self.holder()
                raise RunLocked(
                    f"{self.path.parent}: run folder in use by pid {h.get('pid', '?')} on host {h.get('host', '?')} "
                    f"(started {h.get('started', '?')}); wait for it, or use another hydra.run.dir"
                ) from None
            # The holder may have released and unlinked the file between our open and flock: the
            # lock must be on the file that is at the path now, else another process can lock that one.
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        stale = self.holder()
        if stale:
            log.warning(
                "%s: taking over the stale lock of pid %s on host %s (that process is gone)",
                self.path, stale.get("pid", "?"), stale.get("host", "?"),
            )
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        os.fsync(fd)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        # Unlink while still holding the lock: a waiter that opened the old file sees the inode change.
        self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
