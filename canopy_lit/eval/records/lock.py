"""``RunLock``: keeps a second evaluation out of a run folder while one is writing it."""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


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

