"""``encoder_fingerprint.json``: what an adapter folder says about the encoder it was trained on.

``NodeEncoder.save_adapter`` writes it beside the peft files: backbone name and content hash, adapter
hash, embedding size, encoder class and ``max_seq_length`` (part of the backbone hash). Read here, and the
content hashes computed here, without torch, so that reports, run records and the node cache can use them as
well as the encoders.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

FINGERPRINT_FILE = "encoder_fingerprint.json"


def read_fingerprint(adapter: str | Path) -> dict[str, Any] | None:
    """The fingerprint of adapter folder ``adapter`` (None when the folder has none).

    Raises:
        ValueError: the file is not a JSON object (names the file).
    """
    path = Path(adapter) / FINGERPRINT_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from err
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def adapter_max_seq_length(adapter: str | Path | None) -> int | None:
    """The token cap an adapter was trained at (None without an adapter or a recorded length): an encoder
    built without its own ``max_seq_length`` adopts it, since the length is part of the backbone hash."""
    if not adapter:
        return None
    length = (read_fingerprint(adapter) or {}).get("max_seq_length")
    return int(length) if length else None


def quick_file_hash(path: Path, chunk: int = 1 << 20) -> str:
    """sha256 of (size, first MiB, last MiB): cheap for multi-GB weights, still content-derived."""
    h = hashlib.sha256()
    size = path.stat().st_size
    h.update(str(size).encode())
    with path.open("rb") as f:
        h.update(f.read(chunk))
        if size > chunk:
            f.seek(max(size - chunk, chunk))
            h.update(f.read(chunk))
    return h.hexdigest()


def backbone_hash(model_dir: Path | None, name: str) -> str:
    """Content hash of a backbone folder's config and weight files (name only for hub ids not on disk)."""
    h = hashlib.sha256(name.encode())
    if model_dir is not None and model_dir.is_dir():
        for p in sorted(model_dir.rglob("*")):
            if p.is_file() and (p.suffix in {".safetensors", ".bin", ".pt"} or p.name == "config.json"):
                h.update(str(p.relative_to(model_dir)).encode())
                h.update(quick_file_hash(p).encode())
    return h.hexdigest()[:16]
