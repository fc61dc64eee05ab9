"""What names a node-cache row: the fingerprint's file name, the item's content digest (media files by content)
and the per-row checksum that catches a vector stored under another key."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from canopy_lit.types import Item


def fingerprint_slug(fingerprint: str) -> str:
    """A filesystem-safe, collision-resistant name for a fingerprint."""
    return hashlib.sha256(fingerprint.encode()).hexdigest()[:20]


def row_checksum(item: str, digest: str, start: int, end: int, cut: bool, blob: bytes) -> bytes:
    """8-byte BLAKE2b of a row's key, truncation flag and vector bytes: a vector stored under another key
    fails it too."""
    h = hashlib.blake2b(digest_size=8)
    h.update(f"{item}\0{digest}\0{start}\0{end}\0{int(cut)}\0".encode())
    h.update(blob)
    return h.digest()


# (path, size, mtime_ns) -> content hash: a media file is read once per process, not once per lookup
MEDIA_HASHES: dict[tuple[str, int, int], str] = {}


def media_hash(path: str) -> str:
    """Content hash of an image or video file (size + first and last MiB); "" when it cannot be read."""
    from canopy_lit.encoders.fingerprint import quick_file_hash

    try:
        st = os.stat(path)
    except OSError:
        return ""  # the renderer reports the missing file when it needs the pixels
    key = (path, st.st_size, st.st_mtime_ns)
    if key not in MEDIA_HASHES:
        MEDIA_HASHES[key] = quick_file_hash(Path(path))
    return MEDIA_HASHES[key]


def item_digest(item: Item) -> str:
    """16 hex digits of BLAKE2b over what an item's nodes render from: its whole record (title, text,
    sentences, table, caption ...) and, for an image or a video, the media file's content."""
    h = hashlib.blake2b(digest_size=8)
    h.update(json.dumps(item.to_dict(), sort_keys=True, ensure_ascii=False, default=str).encode())
    media = item.image if item.image is not None else (item.video.path if item.video is not None else None)
    if media is not None:
        h.update(b"\0" + media_hash(media).encode())
    return h.hexdigest()
