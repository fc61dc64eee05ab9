"""Atomic writes: a reader (or a killed run) sees the old file or the new one, never half of one."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to a temp file beside ``path``, fsync it, then rename it over ``path``. An ``OSError``
    without a file name (a failed ``write(2)``: a full disk) is raised naming ``path``, so the one-line error
    says where space ran out."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding=encoding) as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        if err.filename is None and err.errno is not None:
            raise OSError(err.errno, err.strerror, str(path)) from err
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a temp folder beside ``path``; on success it replaces ``path`` (renames only).

    On an exception the temp folder is removed and ``path`` is untouched. Between the two renames
    of a replacement the old folder is still on disk as ``.<name>.old``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = path.parent / f".{path.name}.old"
    shutil.rmtree(old, ignore_errors=True)
    if path.exists():
        os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def naming(path: str | Path) -> Iterator[None]:
    """Give an ``OSError`` raised inside the file name ``path`` when it has none: a failed ``write(2)``
    (a full disk) carries no name, and the user must learn where space ran out."""
    try:
        yield
    except OSError as err:
        if err.filename is not None or err.errno is None:
            raise
        raise OSError(err.errno, err.strerror, str(path)) from err


__all__ = ["atomic_dir", "atomic_write_text", "naming"]
