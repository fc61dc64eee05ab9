"""Study run folders as one deterministic zip each: ``experiments/runs/<study>.zip`` <-> ``experiments/runs/<study>/``.

    python -m canopy_lit.report pack experiments/runs/<study> [...]     # folder -> <study>.zip
    python -m canopy_lit.report unpack experiments/runs/<study>.zip [...] [--force]

A study folder holds run folders (a folder with ``metrics.json``) at any depth. Its archive keeps, per
run, what tables, plots and comparisons read: ``metrics.json``, ``run.json``, ``.hydra/config.yaml`` (the
composed config as Hydra saved it, interpolations kept, so no machine path is baked in), the per-question
rows (``*.jsonl``), the question list (``question_ids.json``) and a training run's logged curve
(``csv/version_*/metrics.csv``), and what a rerun needs to continue the run: ``settings.json`` (its settings,
paths kept relative to the ``paths.*`` folders), without which an unpacked run with results is refused
(``canopy_lit.eval.records.settings``). Hydra's ``hydra.yaml`` and ``overrides.yaml`` are left out after their
group choices and overrides are recorded in ``run.json`` (``choices``, ``overrides``); logs, per-run
``table.md``, ``multirun.yaml``, checkpoints and adapters (folders with ``adapter_config.json``, committed as
plain files) are left out too.

Entries are sorted, dated 1980-01-01 and mode 0644, so packing unchanged runs gives the same bytes
(with the same zlib); the zip's comment names it a study archive. Unpacking writes ``<study>/.unpacked.json`` (the archive's SHA-256 and each entry's
CRC): readers (``find_runs``, the generators in experiments/) unpack a study archive whose folder was never
unpacked or holds an older archive's files, and refuse, naming a file, when an unpacked file was edited
since (pack it, or unpack with ``--force``).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import zipfile
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

log = logging.getLogger(__name__)

SUFFIX = ".zip"
MARKER = ".unpacked.json"
# Paths inside a run folder that its archive keeps (fnmatch patterns, '/'-separated).
KEPT = ("metrics.json", "run.json", "settings.json", "question_ids.json", ".hydra/config.yaml", "*.jsonl",
        "csv/version_*/metrics.csv")
# Names a zip as a study archive: only those are unpacked without being asked (a project.zip above a checkout never is).
COMMENT = b"canopy-lit study archive (python -m canopy_lit.report unpack)"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest date a zip entry can hold
_MODE = 0o100644 << 16  # a regular file, rw-r--r--


class ArchiveError(RuntimeError):
    """An archive or the folder it unpacks into cannot be used as asked (the message names the file)."""


@dataclass
class PackResult:
    """What ``pack`` wrote: the archive, its run folders and entries, and the files it left out by name."""

    archive: Path
    runs: int
    entries: int
    left_out: Counter[str] = field(default_factory=Counter)


def archive_path(folder: str | Path) -> Path:
    """``experiments/runs/<study>`` -> ``experiments/runs/<study>.zip``."""
    folder = Path(folder)
    return folder.with_name(folder.name + SUFFIX)


def folder_path(archive: str | Path) -> Path:
    """``experiments/runs/<study>.zip`` -> ``experiments/runs/<study>``."""
    archive = Path(archive)
    if archive.suffix != SUFFIX:
        raise ArchiveError(f"{archive}: not a {SUFFIX} study archive")
    return archive.with_suffix("")


def _is_adapter(folder: Path) -> bool:
    return (folder / "adapter_config.json").is_file()


def _kept(rel: str) -> bool:
    return any(fnmatch.fnmatchcase(rel, pattern) and ("/" in pattern or "/" not in rel) for pattern in KEPT)


def _hydra_runtime_choices(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / ".hydra" / "hydra.yaml"
    if not path.is_file():
        return None
    try:
        runtime = ((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("hydra") or {}).get("runtime") or {}
    except yaml.YAMLError as err:
        raise ArchiveError(f"{path}: not valid YAML ({err})") from err
    choices = runtime.get("choices")
    return dict(choices) if isinstance(choices, dict) else None


def _hydra_overrides(run_dir: Path) -> list[str] | None:
    path = run_dir / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return None
    try:
        overrides = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    except yaml.YAMLError as err:
        raise ArchiveError(f"{path}: not valid YAML ({err})") from err
    if not isinstance(overrides, list):
        raise ArchiveError(f"{path}: expected a list of overrides")
    return [str(o) for o in overrides]


def run_record(run_dir: str | Path) -> dict[str, Any] | None:
    """``run.json`` with what the left-out Hydra files told reports, where it lacks it: the group ``choices``
    (``hydra.yaml``), the job's ``overrides`` (``overrides.yaml``) and, for a job of a multirun whose config
    names no study, ``study`` = the multirun folder's name (``multirun.yaml``; what reports called it). A
    training run, which has no ``run.json``, gets one with these keys; None when there is nothing to record."""
    run_dir = Path(run_dir)
    path = run_dir / "run.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except json.JSONDecodeError as err:
        raise ArchiveError(f"{path}: not valid JSON ({err})") from err
    if not isinstance(record, dict):
        raise ArchiveError(f"{path}: expected a JSON object")
    for key, read in (("choices", _hydra_runtime_choices), ("overrides", _hydra_overrides)):
        if key not in record and (value := read(run_dir)) is not None:
            record[key] = value
    if record.get("study") is None and (run_dir.parent / "multirun.yaml").is_file():
        record["study"] = run_dir.parent.name
    return record or None


def run_json_text(record: dict[str, Any]) -> str:
    """``run.json`` as the evaluation writes it (``records.write_run_axes``)."""
    return json.dumps(record, indent=2, ensure_ascii=False) + "\n"


def run_folders(folder: str | Path) -> list[Path]:
    """Run folders (``metrics.json``) under ``folder``, sorted; adapters and ``.hydra`` never count."""
    folder = Path(folder)
    return sorted(
        m.parent
        for m in folder.rglob("metrics.json")
        if ".hydra" not in m.relative_to(folder).parts and not _is_adapter(m.parent)
    )


def _walk_files(folder: Path) -> Iterator[Path]:
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            yield path


def committed_files(folder: str | Path) -> tuple[dict[str, bytes], Counter[str]]:
    """(entry name -> bytes, left-out file names counted) of a study folder's archive."""
    folder = Path(folder)
    runs = run_folders(folder)
    owners = set(runs)
    entries: dict[str, bytes] = {}
    left_out: Counter[str] = Counter()
    for run in runs:
        record = run_record(run)
        if record is not None:
            entries[(run / "run.json").relative_to(folder).as_posix()] = run_json_text(record).encode("utf-8")
    for path in _walk_files(folder):
        rel = path.relative_to(folder)
        if rel.as_posix() == MARKER or path.name.endswith(".tmp"):
            continue
        run = next((p for p in path.parents if p in owners), None)  # the nearest run folder above it
        inner = path.relative_to(run) if run is not None else None
        if inner is None or any(_is_adapter(run / sub) for sub in inner.parents if sub.parts):
            left_out[path.name] += 1
            continue
        name = rel.as_posix()
        if not _kept(inner.as_posix()):
            left_out[path.name] += 1
        elif name not in entries:
            entries[name] = path.read_bytes()
    return entries, left_out


def write_archive(archive: str | Path, entries: dict[str, bytes]) -> Path:
    """Write ``entries`` as a deterministic zip (sorted names, fixed date and mode), atomically."""
    archive = Path(archive)
    tmp = archive.with_name(archive.name + ".tmp")
    with zipfile.ZipFile(tmp, "w") as zf:
        zf.comment = COMMENT
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # Unix, so the mode bits mean the same on every platform
            info.external_attr = _MODE
            zf.writestr(info, entries[name], compresslevel=9)
    tmp.replace(archive)
    return archive


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _write_marker(folder: Path, archive: Path, crcs: dict[str, int]) -> None:
    marker = {"archive": archive.name, "sha256": _sha256(archive), "files": dict(sorted(crcs.items()))}
    (folder / MARKER).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")


def _read_marker(folder: Path) -> dict[str, Any] | None:
    path = folder / MARKER
    if not path.is_file():
        return None
    try:
        marker = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ArchiveError(f"{path}: not valid JSON ({err}); delete it and unpack with --force") from err
    return marker if isinstance(marker, dict) else None


def edited_files(folder: str | Path) -> list[str]:
    """Files an earlier unpack wrote into ``folder`` that were changed or deleted since ([] when none)."""
    folder = Path(folder)
    marker = _read_marker(folder) or {}
    edited = []
    for name, crc in (marker.get("files") or {}).items():
        path = folder / name
        if not path.is_file() or zlib.crc32(path.read_bytes()) != crc:
            edited.append(name)
    return edited


def pack(folder: str | Path) -> PackResult:
    """Write ``<folder>.zip`` from the run folders under ``folder`` (the committed form, see the module).

    Raises:
        ArchiveError: ``folder`` has no run folder, or its archive exists but was never unpacked here
            (packing would drop every run it holds).
    """
    folder = Path(folder)
    archive = archive_path(folder)
    if not folder.is_dir():
        raise ArchiveError(f"{folder}: no such study folder")
    if archive.is_file() and _read_marker(folder) is None:
        raise ArchiveError(f"{folder}: {archive.name} was never unpacked here; unpack it first, then add runs and pack")
    entries, left_out = committed_files(folder)
    if not entries:
        raise ArchiveError(f"{folder}: no run folders (metrics.json) below it")
    for name, data in entries.items():  # run.json gained choices / overrides: the folder matches its archive
        path = folder / name
        if path.name == "run.json" and (not path.is_file() or path.read_bytes() != data):
            path.write_bytes(data)
    write_archive(archive, entries)
    _write_marker(folder, archive, {name: zlib.crc32(data) for name, data in entries.items()})
    return PackResult(archive, len(run_folders(folder)), len(entries), left_out)


def _safe_name(archive: Path, name: str) -> PurePosixPath:
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts or name.endswith("/"):
        raise ArchiveError(f"{archive}: entry {name!r} is not a relative file path")
    return rel


def read_archive(archive: str | Path) -> dict[str, bytes]:
    """Entry name -> bytes of a study archive (CRC-checked)."""
    archive = Path(archive)
    try:
        with zipfile.ZipFile(archive) as zf:
            return {info.filename: zf.read(info) for info in zf.infolist() if _safe_name(archive, info.filename)}
    except (zipfile.BadZipFile, OSError) as err:
        raise ArchiveError(f"{archive}: not a readable zip archive ({err})") from err


def unpack(archive: str | Path, dest: str | Path | None = None, *, force: bool = False) -> Path:
    """Write the archive's files into ``dest`` (default: the folder beside it, ``<study>/``); returns it.

    Files of the folder that the archive does not hold (your own runs, adapters) are left alone.

    Raises:
        ArchiveError: an unreadable archive, an entry outside the folder, or (without ``force``) a file
            of an earlier unpack that was edited since.
    """
    archive = Path(archive)
    folder = Path(dest) if dest is not None else folder_path(archive)
    edited = edited_files(folder) if folder.is_dir() else []
    if edited and not force:
        raise ArchiveError(
            f"{folder}: {len(edited)} unpacked file(s) changed since they were unpacked (first: {edited[0]}); "
            f"pack them (python -m canopy_lit.report pack {folder}) or unpack with --force to overwrite them"
        )
    entries = read_archive(archive)
    for name, data in entries.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    _write_marker(folder, archive, {name: zlib.crc32(data) for name, data in entries.items()})
    log.info("unpacked %s (%d files) into %s", archive, len(entries), folder)
    return folder


def is_current(folder: str | Path) -> bool:
    """Whether ``folder`` holds the files of the archive beside it (True when it has no archive)."""
    folder = Path(folder)
    archive = archive_path(folder)
    if not archive.is_file():
        return True
    marker = _read_marker(folder)
    return marker is not None and marker.get("sha256") == _sha256(archive)


def is_study_archive(path: str | Path) -> bool:
    """Whether ``path`` is a zip written by ``pack`` (its comment says so)."""
    try:
        with zipfile.ZipFile(path) as zf:
            return zf.comment == COMMENT
    except (zipfile.BadZipFile, OSError):
        return False


def covering_archives(path: str | Path) -> list[Path]:
    """The study archives that hold files under ``path``: the one of ``path`` or of a folder above it,
    else every archive directly inside ``path`` (``experiments/runs`` -> each ``<study>.zip``)."""
    path = Path(path)
    for folder in (path, *path.parents):
        if folder.name and archive_path(folder).is_file() and is_study_archive(archive_path(folder)):
            return [archive_path(folder)]
    return sorted(p for p in path.glob("*" + SUFFIX) if is_study_archive(p)) if path.is_dir() else []


def _zip_error(path: Path) -> str | None:
    """Why ``path`` cannot be opened as a zip (None when it can)."""
    try:
        with zipfile.ZipFile(path) as zf:
            zf.comment  # noqa: B018 - opening reads the central directory, where a cut or overwritten zip fails
    except (zipfile.BadZipFile, OSError) as err:
        return f"{type(err).__name__}: {err}"
    return None


def corrupt_archives(path: str | Path) -> list[tuple[Path, str]]:
    """``(archive, why)`` for each zip that could hold the runs under ``path`` but cannot be opened: ``path``
    itself (a ``.zip``), the archive of ``path`` or of a folder above it, and the zips directly inside
    ``path``. ``covering_archives`` skips such a file (its comment is unreadable), so a report that finds
    no runs asks here why."""
    path = Path(path)
    candidates = [path] if path.suffix == SUFFIX and path.is_file() else []
    candidates += [archive_path(f) for f in (path, *path.parents) if f.name and archive_path(f).is_file()]
    if path.is_dir():
        candidates += sorted(path.glob("*" + SUFFIX))
    out = []
    for archive in dict.fromkeys(candidates):
        why = _zip_error(archive)
        if why is not None:
            out.append((archive, why))
    return out


def ensure_unpacked(paths: Iterable[str | Path]) -> list[Path]:
    """Unpack every archive behind ``paths`` whose folder does not hold its files yet; returns those unpacked.

    Raises:
        ArchiveError: an archive changed since its folder was unpacked and files unpacked there were edited.
    """
    done = []
    for path in paths:
        for archive in covering_archives(path):
            folder = folder_path(archive)
            if not is_current(folder):
                done.append(unpack(archive))
    return done


__all__ = [
    "ArchiveError", "PackResult", "archive_path", "committed_files", "corrupt_archives", "covering_archives", "edited_files",
    "ensure_unpacked", "folder_path", "is_current", "is_study_archive", "pack", "read_archive", "run_record", "unpack",
    "write_archive",
]  # fmt: skip
