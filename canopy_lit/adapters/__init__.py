"""Trained node-encoder adapters that ship inside the package, by name.

``compress(question, items, adapter="quickstart")`` (and ``load_encoder(..., adapter="quickstart")``,
``Compressor``, the LangChain and LlamaIndex adapters, ``encoder.adapter=${shipped_adapter:quickstart}`` in a
config) finds the folder inside the installed package, so it works from any working directory after
``pip install``. Each shipped folder is pinned by the sha256 of its weights: a changed file is refused.

``quickstart``: the quickstart recipe's LoRA on all-MiniLM-L6-v2 (r = 8 on layers 3-5, ~165k parameters),
the adapter behind the README's frontier and probe numbers; a byte-for-byte copy of
``experiments/runs/recipe/base/adapter`` in the repository (a test keeps them equal).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

SHIPPED: dict[str, str] = {  # name -> sha256 of adapter_model.safetensors
    "quickstart": "294d3e5e3c47af15da544539d042b442e6c4b39d882a66d68f8783011580eace",
}
_FOLDER = Path(__file__).resolve().parent


def shipped_adapter(name: str) -> Path:
    """The folder of a shipped adapter, its weights checked against the pinned sha256.

    Raises:
        ValueError: ``name`` is not a shipped adapter (the message lists them) or its weights changed.
    """
    if name not in SHIPPED:
        raise ValueError(f"no shipped adapter {name!r}; shipped: {', '.join(sorted(SHIPPED))}")
    folder = _FOLDER / name
    weights = folder / "adapter_model.safetensors"
    if not weights.is_file():
        raise ValueError(f"shipped adapter {name!r}: {weights} is missing (a broken install? reinstall canopy-lit)")
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    if digest != SHIPPED[name]:
        raise ValueError(f"shipped adapter {name!r}: {weights} has sha256 {digest[:12]}, pinned "
                         f"{SHIPPED[name][:12]} (the file was changed; reinstall canopy-lit)")  # fmt: skip
    return folder


def resolve_adapter(adapter: str | Path | None) -> str | Path | None:
    """``adapter`` as a folder: a shipped adapter's name becomes its folder; an existing path, None, or
    anything else is returned unchanged (the loader reports a missing folder). An existing folder of the same
    name as a shipped adapter wins, so a user's ``./quickstart`` is never shadowed."""
    if isinstance(adapter, str) and adapter in SHIPPED and not Path(adapter).exists():
        return shipped_adapter(adapter)
    return adapter
