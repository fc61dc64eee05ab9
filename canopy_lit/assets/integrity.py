"""Verification: every asset is checked against its sha256 pin the first time a process opens it."""


from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from canopy_lit.assets.registry import Asset, sha256_file

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- verification
# Every process hashes each asset once and remembers the result in memory only: a record on disk (size +
# mtime + hash) would let rotten bytes with an unchanged size and mtime through.

_VERIFIED: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256 seen this process
_VERIFIED_LOCK = threading.Lock()


def hashed_file(asset: Asset, path: Path) -> Path:
    """The file whose sha256 is pinned: ``path`` itself, or ``verify_member`` inside a folder asset."""
    return path / asset.verify_member if asset.verify_member else path


def _key(hashed: Path) -> tuple[str, int, int]:
    st = hashed.stat()
    return (str(hashed.resolve()), st.st_size, st.st_mtime_ns)


def remember(hashed: Path, sha: str) -> None:
    with _VERIFIED_LOCK:
        _VERIFIED[_key(hashed)] = sha


def check(asset: Asset, path: Path, *, force: bool = False) -> tuple[bool, str]:
    """Full sha256 check of ``path`` (file, or folder holding ``verify_member``), once per process.

    Returns:
        ``(ok, got)``: whether it matches the pin, and the sha256 found (``"missing"`` without a file).
    """
    hashed = hashed_file(asset, path)
    if not hashed.is_file():
        return False, "missing"
    key = _key(hashed)
    if not force:
        with _VERIFIED_LOCK:
            seen = _VERIFIED.get(key)
        if seen == asset.sha256:
            return True, seen
    t0 = time.perf_counter()
    got = sha256_file(hashed)
    log.info("%s: sha256 of %s (%.0f MB) in %.1f s (once per process)", asset.name, hashed,
             key[1] / 2**20, time.perf_counter() - t0)  # fmt: skip
    if got == asset.sha256:
        with _VERIFIED_LOCK:
            _VERIFIED[key] = got
    return got == asset.sha256, got


def verify(asset: Asset, path: Path, *, force: bool = False) -> bool:
    """True iff ``path`` (file, or folder holding ``verify_member``) matches the asset's sha256."""
    return check(asset, path, force=force)[0]


def failed_line(asset: Asset, path: Path, got: str) -> str:
    return f"asset {asset.name} at {hashed_file(asset, path)} failed sha256 (expected {asset.sha256}, got {got})"


