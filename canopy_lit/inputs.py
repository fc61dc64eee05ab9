"""Caller input to ``canopy_lit.compress`` (and the service and framework adapters over it), checked before any
encoding: each bad input is one error naming the item and field.

* ``question``: a non-empty ``str`` (``TypeError`` / ``ValueError``).
* ``items``: a sequence of items; one ``str``, dict or ``Item`` alone is one item (not one item per character).
  A text item that is empty or only whitespace is skipped (``CompressedEvidence.skipped``), never a block.
  Fields have their documented types (a dict ``title`` is a ``TypeError`` naming ``items[i].title``); a table
  needs ``header`` and ``rows``; text with a lone surrogate (not encodable as UTF-8) is a ``ValueError``.
* ``image`` / ``video.path``: an existing file with an image / video suffix (an image's first bytes must be one
  of PNG, JPEG, GIF, BMP, WebP, TIFF); with ``media_root`` a relative path resolves under it and no path may
  leave it (``..`` or a link out included).
* ``budget``: None or a whole number >= 1 (``True``, ``"lots"``, ``inf``, ``nan`` are refused).
* ``descend_margin``: a finite number; ``item_margin``: None or a finite number >= 0.
* size: an item longer than ``max_item_chars`` (default ``MAX_ITEM_CHARS``, text or table cells) is refused
  before any sentence splitting or encoding, so a huge input answers at once; split it into passages, or pass
  ``max_item_chars=None`` to take it whole (every node of it may be encoded: minutes for a megabyte).
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from canopy_lit.types import Item, Modality, Table, VideoRef

ItemLike = Item | str | Mapping[str, Any]
MAX_ITEM_CHARS = 20_000  # ~5k tokens, hundreds of sentences: well above a retrieved passage, seconds to compress
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp", ".tif", ".tiff")
VIDEO_SUFFIXES = (".mp4", ".mov", ".mkv", ".avi", ".webm", ".m4v", ".mpg", ".mpeg")
# First bytes of the image formats the describers open (a text file renamed .png is not an image).
_IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"BM", b"II*\x00", b"MM\x00*")


def as_item(item: ItemLike, index: int) -> Item:
    """An ``Item`` from an Item, a plain string (a text passage) or a dict (``Item.from_dict``'s fields).

    Raises:
        TypeError: not one of these, or a field of the wrong type (named ``items[index].<field>``).
        ValueError: a bad value (modality, a table without ``header``, ...), named the same way.
    """
    where = f"items[{index}]"
    if isinstance(item, Item):
        built = item
    elif isinstance(item, str):
        built = Item(f"item{index}", Modality.TEXT, text=item)
    elif isinstance(item, Mapping):
        built = _from_mapping(dict(item), index)
    else:
        raise TypeError(f"{where}: expected an Item, a str or a dict, got {type(item).__name__}")
    _check_fields(built, where)
    return built


_ITEM_FIELDS = frozenset(f.name for f in fields(Item))


def _from_mapping(d: dict[str, Any], index: int) -> Item:
    where = f"items[{index}]"
    unknown = sorted(str(k) for k in d if k not in _ITEM_FIELDS)
    if unknown:
        raise TypeError(f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(sorted(_ITEM_FIELDS))})")
    d.setdefault("id", f"item{index}")
    d.setdefault("modality", "text")
    _expect(d["modality"], str, f"{where}.modality")
    if d["modality"] not in {m.value for m in Modality}:
        raise ValueError(f"{where}.modality: {d['modality']!r} is not one of {', '.join(m.value for m in Modality)}")
    table, video = d.get("table"), d.get("video")
    if isinstance(table, Mapping):
        for key in ("header", "rows"):
            if key not in table:
                raise ValueError(f"{where}.table: no {key!r} field (a table is {{'header': [...], 'rows': [[...]]}})")
        extra = sorted(set(table) - {"header", "rows", "caption"})
        if extra:
            raise TypeError(f"{where}.table: unknown field {extra[0]!r} (fields: header, rows, caption)")
        d["table"] = Table(**table)
    if isinstance(video, Mapping):
        if "path" not in video:
            raise ValueError(f"{where}.video: no 'path' field")
        extra = sorted(set(video) - {"path", "start", "end"})
        if extra:
            raise TypeError(f"{where}.video: unknown field {extra[0]!r} (fields: path, start, end)")
        d["video"] = VideoRef(**video)
    try:
        return Item(**d)
    except ValueError as err:  # no payload for the modality: the message names the item id
        raise ValueError(f"{where}: {err}") from None


def _expect(value: Any, kind: type | tuple[type, ...], where: str) -> None:
    if not isinstance(value, kind) or isinstance(value, bool):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise TypeError(f"{where}: expected {names}, got {type(value).__name__}")


def _unicode(text: str, where: str) -> None:
    """Text the sentence splitter and tokenizers can encode: a lone surrogate is refused, named."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(
            f"{where}: not valid Unicode (a lone surrogate {text[err.start]!r} at character {err.start}); "
            "decode the source with errors='replace'"
        ) from None


def _check_fields(item: Item, where: str) -> None:
    """Field types of a built item (a dataclass does not check them) and text the pipeline can encode."""
    _expect(item.id, str, f"{where}.id")
    _expect(item.title, str, f"{where}.title")
    _unicode(item.title, f"{where}.title")
    if item.text is not None:
        _expect(item.text, str, f"{where}.text")
    if item.sentences is not None:
        _expect(item.sentences, (list, tuple), f"{where}.sentences")
        for i, sent in enumerate(item.sentences):
            _expect(sent, str, f"{where}.sentences[{i}]")
    if item.text is not None:
        _unicode(item.text, f"{where}.text")
    if item.table is not None:
        t = item.table
        _expect(t, Table, f"{where}.table")
        _expect(t.header, (list, tuple), f"{where}.table.header")
        _expect(t.rows, (list, tuple), f"{where}.table.rows")
        _expect(t.caption, str, f"{where}.table.caption")
        for i, cell in enumerate(t.header):
            _expect(cell, str, f"{where}.table.header[{i}]")
            _unicode(cell, f"{where}.table.header[{i}]")
        for r, row in enumerate(t.rows):
            _expect(row, (list, tuple), f"{where}.table.rows[{r}]")
            for c, cell in enumerate(row):
                _expect(cell, str, f"{where}.table.rows[{r}][{c}]")
                _unicode(cell, f"{where}.table.rows[{r}][{c}]")
    if item.image is not None:
        _expect(item.image, (str, os.PathLike), f"{where}.image")
    if item.video is not None:
        _expect(item.video, VideoRef, f"{where}.video")
        _expect(item.video.path, (str, os.PathLike), f"{where}.video.path")


def item_chars(item: Item) -> int:
    """Characters of an item's text or table cells (what sentence splitting and rendering read)."""
    if item.table is not None:
        t = item.table
        return len(t.caption) + sum(map(len, t.header)) + sum(len(c) for row in t.rows for c in row)
    return len(item.text or "")


def media_file(path: str | os.PathLike[str], where: str, kind: str, media_root: str | Path | None) -> Path:
    """``path`` checked as a media file of ``kind`` (``image`` or ``video``): it exists, is readable, has the
    kind's suffix (an image also its format's first bytes), and stays inside ``media_root`` when one is given
    (a relative path resolves under it). Returns the resolved path.

    Raises:
        ValueError: naming ``where`` and the file.
    """
    raw = Path(path)
    root = Path(media_root).resolve() if media_root is not None else None
    file = (root / raw if root is not None and not raw.is_absolute() else raw).resolve()
    if root is not None and not file.is_relative_to(root):
        raise ValueError(f"{where}: {path} is outside media_root={root}")
    suffixes = IMAGE_SUFFIXES if kind == "image" else VIDEO_SUFFIXES
    if file.suffix.lower() not in suffixes:
        raise ValueError(f"{where}: {path} is not an {kind} file (suffix {file.suffix or 'none'!r}; "
                         f"expected one of {', '.join(suffixes)})")
    if not file.is_file():
        raise ValueError(f"{where}: {kind} file not found: {file}")
    try:
        with file.open("rb") as fh:
            head = fh.read(12)
    except OSError as err:
        raise ValueError(f"{where}: cannot read {file}: {err.strerror or err}") from None
    is_image = head.startswith(_IMAGE_MAGIC) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")
    if kind == "image" and not is_image:
        raise ValueError(f"{where}: {file} is not an image (not PNG, JPEG, GIF, BMP, WebP or TIFF data)")
    return file


def check_question(question: Any) -> str:
    """A question ``compress`` can score: a non-empty str of valid Unicode."""
    if not isinstance(question, str):
        raise TypeError(f"question: expected a str, got {type(question).__name__}")
    if not question.strip():
        raise ValueError("question: empty (nothing to score the items against)")
    _unicode(question, "question")
    return question


def check_budget(budget: Any) -> int | None:
    """None, or a whole number of tokens >= 1 (``True`` is not a budget; ``300.0`` is 300)."""
    if budget is None:
        return None
    line = f"budget must be a positive whole number of tokens or None, got {budget!r}"
    if isinstance(budget, bool) or not isinstance(budget, numbers.Real):
        raise TypeError(line)
    if not math.isfinite(budget) or budget != int(budget) or budget < 1:
        raise ValueError(line)
    return int(budget)


def check_margin(descend_margin: Any) -> float:
    """δ: a finite number (NaN compares false everywhere, so every parent would be kept whole)."""
    if isinstance(descend_margin, bool) or not isinstance(descend_margin, numbers.Real):
        raise TypeError(f"descend_margin: expected a number, got {type(descend_margin).__name__}")
    if not math.isfinite(descend_margin):
        raise ValueError(f"descend_margin must be a finite number, got {descend_margin}")
    return float(descend_margin)


def check_item_margin(item_margin: Any) -> float | None:
    """None (every item keeps a region) or a finite number >= 0."""
    if item_margin is None:
        return None
    if isinstance(item_margin, bool) or not isinstance(item_margin, numbers.Real):
        raise TypeError(f"item_margin: expected a number or None, got {type(item_margin).__name__}")
    if not math.isfinite(item_margin) or item_margin < 0:
        raise ValueError(f"item_margin must be None or a finite number >= 0, got {item_margin}")
    return float(item_margin)


def items_list(items: Any) -> list[Any]:
    """``items`` as a list: one ``str``, dict or ``Item`` alone is one item."""
    if isinstance(items, (str, Item, Mapping)):
        return [items]  # one passage / item, not one item per character (or per key)
    if isinstance(items, (bytes, bytearray)):
        raise TypeError("items: expected a sequence of items or one str, got bytes (decode it first)")
    try:
        return list(items)
    except TypeError:
        raise TypeError(f"items: expected a sequence of items, got {type(items).__name__}") from None
