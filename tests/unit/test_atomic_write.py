"""``atomic_write_text``: a failed write (a full disk) names the file it was writing and leaves no temp file."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from canopy_lit.io import atomic_write_text


def test_a_full_disk_names_the_destination_and_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "run.json"
    target.write_text("old\n")

    def full(fd: int) -> None:  # write(2)/fsync(2) on a full disk: an OSError with no file name
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as err:
        atomic_write_text(target, "new\n")
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(target)
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["run.json"]
