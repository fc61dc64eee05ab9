"""Streaming readers for JSON / JSONL (optionally gzipped) and the error that names file and record.

Benchmark files are read record by record: a JSONL file line by line, a JSON
array element by element (``raw_decode`` over a sliding buffer), so a full
official split never has to sit in memory twice. Every failure surfaces as a
``DataFormatError`` that names the file and the record, never a bare traceback
from deep inside a reader. No pickle / joblib anywhere.

Strict JSON: ``NaN`` / ``Infinity`` (which Python's ``json`` accepts) are an error naming the record and
the field, never a number or the string 'nan'; anything after a JSON array's closing ``]`` (a second array,
garbage) is an error, not ignored; a record nested too deeply to parse and text that is not UTF-8 are
errors naming the line.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

_CHUNK = 1 << 20
_WS = " \t\r\n"
_ID_KEYS = ("_id", "id", "qid", "question_id", "uid", "index")


class DataFormatError(ValueError):
    """Malformed benchmark input: names the file, the record (JSONL line, else index; id when known) and the problem."""

    def __init__(
        self,
        path: str | Path,
        message: str,
        record: int | None = None,
        record_id: Any = None,
        line: int | None = None,
    ) -> None:
        self.path = str(path)
        self.record = record
        self.record_id = record_id
        self.line = line
        where = self.path
        if line is not None:  # what an editor shows: the line, not the record's position among non-blank lines
            where += f", line {line}"
        elif record is not None:
            where += f", record {record}"
        if record_id is not None:
            where += f" (id {record_id!r})"
        super().__init__(f"{where}: {message}")


class RecordError(ValueError):
    """A wrong field inside one record; the message names the field (``items[1].gold_spans[0]: ...``).

    ``record_guard`` turns it into a ``DataFormatError`` that adds file and record.
    """


class _NonFinite:
    """What the decoder makes of ``NaN`` / ``Infinity`` / ``-Infinity``: no number and no string, so the
    record holding one is refused (``_check_finite``) before a reader sees it."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class _StrictDecoder(json.JSONDecoder):
    """``json.JSONDecoder`` that counts the non-finite constants it met (``seen``)."""

    def __init__(self) -> None:
        super().__init__(parse_constant=self._constant)
        self.seen = 0

    def _constant(self, text: str) -> _NonFinite:
        self.seen += 1
        return _NonFinite(text)


def _record_id(record: Any) -> Any:
    if isinstance(record, dict):
        return next((record[k] for k in _ID_KEYS if k in record and not isinstance(record[k], _NonFinite)), None)
    return None


def _non_finite_field(obj: Any, where: str = "") -> tuple[str, str] | None:
    """(field path, constant) of the first ``_NonFinite`` in ``obj``; iterative (records may nest deeply)."""
    stack: list[tuple[Any, str]] = [(obj, where)]
    while stack:
        value, at = stack.pop()
        if isinstance(value, _NonFinite):
            return at or "the record", value.text
        if isinstance(value, dict):
            stack.extend((v, f"{at}.{k}" if at else str(k)) for k, v in reversed(list(value.items())))
        elif isinstance(value, list):
            stack.extend((v, f"{at}[{i}]") for i, v in reversed(list(enumerate(value))))
    return None


def _check_finite(
    decoder: _StrictDecoder, seen: int, obj: Any, path: Path, record: int | None = None, line: int | None = None
) -> None:
    """Raise when decoding ``obj`` met a NaN / Infinity (``decoder.seen`` grew past ``seen``)."""
    if decoder.seen == seen:
        return
    hit = _non_finite_field(obj)
    field, text = hit if hit is not None else ("the record", "NaN")
    raise DataFormatError(
        path, f"{field}: {text} is not a JSON value (numbers must be finite: write null, a number or a string)",
        record=record, record_id=_record_id(obj), line=line,
    )  # fmt: skip


def _too_deep(err: RecursionError) -> str:
    return f"nested too deeply to parse ({err})"


def _bad_utf8_line(path: Path) -> int | None:
    """The 1-based line of the first byte sequence in ``path`` (gunzipped) that is not UTF-8."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    line = 1
    try:
        with open(path, "rb") as raw:
            gz = raw.read(2) == b"\x1f\x8b"
        with gzip.open(path, "rb") if gz else open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                pending = decoder.getstate()[0]  # bytes of a character cut by the last chunk
                try:
                    decoder.decode(chunk)
                except UnicodeDecodeError as err:
                    data = pending + chunk
                    return line + data[: max(err.start, 0)].count(b"\n")
                line += chunk.count(b"\n")
    except (OSError, EOFError, zlib.error):
        return None
    return None


def open_text(path: str | Path) -> IO[str]:
    """Open a text file, transparently gunzipping ``.gz`` (also detected by magic bytes)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"benchmark file not found: {p}")
    with open(p, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    if gz:
        return gzip.open(p, "rt", encoding="utf-8")
    return open(p, encoding="utf-8")


def _is_jsonl(path: Path) -> bool:
    name = path.name.lower().removesuffix(".gz")
    return name.endswith((".jsonl", ".ndjson"))


def _first_char(f: IO[str]) -> tuple[str, str, int]:
    """Skip leading whitespace; return (first non-space char, what was read so far after the whitespace,
    number of line breaks skipped)."""
    buf = ""
    while True:
        chunk = f.read(4096)
        if not chunk:
            return "", "", 0
        buf += chunk
        stripped = buf.lstrip(_WS)
        if stripped:
            return stripped[0], stripped, buf[: len(buf) - len(stripped)].count("\n")


def iter_json_array(f: IO[str], path: str | Path, start: str = "") -> Iterator[Any]:
    """Yield the elements of a top-level JSON array one at a time.

    ``start`` is text already read from ``f`` (beginning with ``[``). The buffer is
    consumed by position and compacted only when a new chunk arrives, so reading
    stays linear in the file size.
    """
    dec = _StrictDecoder()
    buf = start.lstrip(_WS)
    if not buf.startswith("["):
        raise DataFormatError(path, "expected a JSON array")
    pos, eof, index, after_record = 1, False, 0, False

    def more() -> bool:
        nonlocal buf, pos, eof
        chunk = "" if eof else f.read(_CHUNK)
        eof = not chunk
        buf = buf[pos:] + chunk
        pos = 0
        return bool(chunk)

    while True:
        while pos < len(buf) and buf[pos] in _WS:
            pos += 1
        if pos >= len(buf):
            if not more():
                raise DataFormatError(path, "file ends before the closing ']' (truncated?)", record=index)
            continue
        if buf[pos] == "," and after_record:
            pos, after_record = pos + 1, False
            continue
        if buf[pos] == "]":
            _check_rest(buf[pos + 1 :], f, path, index)
            return
        if after_record:
            raise DataFormatError(path, f"expected ',' or ']' after the record, got {buf[pos]!r}", record=index)
        if buf[pos] == ",":
            raise DataFormatError(path, "a ',' with no record before it", record=index)
        seen = dec.seen
        try:
            obj, end = dec.raw_decode(buf, pos)
        except json.JSONDecodeError as err:
            if more():  # the element may continue in the next chunk
                continue
            raise DataFormatError(path, f"invalid or truncated JSON ({err.msg})", record=index) from err
        except RecursionError as err:
            raise DataFormatError(path, _too_deep(err), record=index) from None
        # A number at the very end of the buffer may be cut mid-digits: decode again with more text.
        if end == len(buf) and more():
            continue
        _check_finite(dec, seen, obj, Path(path), record=index)
        yield obj
        index += 1
        pos, after_record = end, True


def _check_rest(rest: str, f: IO[str], path: str | Path, records: int) -> None:
    """After the closing ``]``: only whitespace may follow (a second array would be dropped silently)."""
    while True:
        text = rest.lstrip(_WS)
        if text:
            what = "a second JSON array" if text.startswith("[") else f"{text[:20]!r}"
            raise DataFormatError(
                path, f"{what} follows the closing ']' of the JSON array of {records} record(s): one array per file "
                "(merge the arrays, or write JSONL)",
            )  # fmt: skip
        rest = f.read(_CHUNK)
        if not rest:
            return


def iter_records(path: str | Path) -> Iterator[Any]:
    """Stream the records of a JSONL file, or the elements of a JSON array file, ``.gz`` or not.

    A JSON file whose top level is an object is yielded as one record (callers
    decide what the object means, e.g. HF dict-of-lists columns). Truncated gzip
    streams and malformed lines raise ``DataFormatError`` naming file and record.
    """
    for _, obj in iter_located_records(path):
        yield obj


def iter_located_records(path: str | Path) -> Iterator[tuple[int | None, Any]]:
    """``iter_records`` with each record's 1-based line number (JSONL; None for JSON elements)."""
    p = Path(path)
    index, lineno = 0, None
    dec = _StrictDecoder()
    try:
        with open_text(p) as f:
            if _is_jsonl(p):
                for lineno, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    seen = dec.seen
                    try:
                        obj = dec.decode(line)
                    except json.JSONDecodeError as err:
                        raise DataFormatError(p, f"not valid JSON ({err.msg})", record=index, line=lineno) from err
                    except RecursionError as err:
                        raise DataFormatError(p, _too_deep(err), record=index, line=lineno) from None
                    _check_finite(dec, seen, obj, p, record=index, line=lineno)
                    yield lineno, obj
                    index += 1
                return
            first, start, blank_lines = _first_char(f)
            if first == "[":
                for obj in iter_json_array(f, p, start):
                    yield None, obj
                    index += 1
            elif first == "{":
                rest = start + f.read()
                try:
                    obj, end = dec.raw_decode(rest)
                except json.JSONDecodeError as err:
                    raise DataFormatError(p, f"invalid or truncated JSON ({err.msg})") from err
                except RecursionError as err:
                    raise DataFormatError(p, _too_deep(err)) from None
                if rest[end:].strip():  # JSONL written with a .json name
                    yield from _jsonl_text(rest, p, first_line=blank_lines + 1)
                    return
                _check_finite(dec, 0, obj, p)
                yield None, obj
            elif first:
                raise DataFormatError(p, f"expected JSON or JSONL, file starts with {first!r}")
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise DataFormatError(p, f"truncated or corrupt gzip stream ({err})", record=index) from err
    except UnicodeDecodeError as err:
        # Text is decoded a chunk ahead of the records: find the line of the bad bytes in the file itself.
        bad = _bad_utf8_line(p)
        raise DataFormatError(p, f"not UTF-8 text ({err.reason})", record=None if bad else index, line=bad) from err


def _jsonl_text(text: str, path: Path, first_line: int = 1) -> Iterator[tuple[int, Any]]:
    index, dec = 0, _StrictDecoder()
    for lineno, line in enumerate(text.splitlines(), first_line):
        if not line.strip():
            continue
        seen = dec.seen
        try:
            obj = dec.decode(line)
        except json.JSONDecodeError as err:
            raise DataFormatError(path, f"not valid JSON ({err.msg})", record=index, line=lineno) from err
        except RecursionError as err:
            raise DataFormatError(path, _too_deep(err), record=index, line=lineno) from None
        _check_finite(dec, seen, obj, path, record=index, line=lineno)
        yield lineno, obj
        index += 1


def load_json(path: str | Path) -> Any:
    """Load one whole JSON document (``.gz`` or not) with errors naming the file."""
    p = Path(path)
    dec = _StrictDecoder()
    try:
        with open_text(p) as f:
            obj = dec.decode(f.read())
    except json.JSONDecodeError as err:
        raise DataFormatError(
            p, f"invalid or truncated JSON at line {err.lineno} col {err.colno} ({err.msg})"
        ) from err
    except RecursionError as err:
        raise DataFormatError(p, _too_deep(err)) from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise DataFormatError(p, f"truncated or corrupt gzip stream ({err})") from err
    except UnicodeDecodeError as err:
        raise DataFormatError(p, f"not UTF-8 text ({err.reason})", line=_bad_utf8_line(p)) from err
    _check_finite(dec, 0, obj, p)
    return obj


# Errors a reader hits on a record of the wrong shape; anything else is a bug and propagates.
_RECORD_ERRORS = (KeyError, TypeError, ValueError, IndexError, AttributeError)


@contextlib.contextmanager
def record_guard(
    path: str | Path,
    index: int,
    record: Any,
    skipped: Counter | None = None,
    strict: bool = True,
    line: int | None = None,
) -> Iterator[None]:
    """Turn a shape error while parsing one record into ``DataFormatError(file, record)``.

    With ``strict=False`` the record is counted as ``skipped["malformed"]`` and the
    error is swallowed, so the caller's loop moves on to the next record. ``line``: the
    record's line in a JSONL file, named instead of its index.
    """
    try:
        yield
    except DataFormatError:
        raise
    except _RECORD_ERRORS as err:
        rid = None
        if isinstance(record, dict):
            rid = _record_id(record)
        if isinstance(err, KeyError):
            msg = f"missing key {err}"
        elif isinstance(err, RecordError):
            msg = str(err)
        else:
            msg = f"{type(err).__name__}: {err}"
        if not strict and skipped is not None:
            skipped["malformed"] += 1
            return
        raise DataFormatError(path, msg, record=index, record_id=rid, line=line) from err


def require(record: Any, key: str, kind: type | tuple[type, ...]) -> Any:
    """``record[key]`` checked against ``kind``; raises KeyError / TypeError for ``record_guard`` to name."""
    if not isinstance(record, dict):
        raise TypeError(f"record is a {type(record).__name__}, expected an object")
    if key not in record:
        raise KeyError(key)
    value = record[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise TypeError(f"field {key!r} is a {type(value).__name__}, expected {names}")
    return value
