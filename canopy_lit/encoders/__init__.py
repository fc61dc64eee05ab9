"""Node encoders: f0 (queries, adapter off) and fθ (nodes, LoRA on) over one shared backbone.

One class per backbone family, each the ``_target_`` of its ``configs/encoder/*.yaml``: ``TextEncoder``
(MiniLM, MPNet, any sentence-transformers folder) and ``Qwen3VLEncoder``. Usable without Hydra::

    from canopy_lit.encoders import load_encoder
    enc = load_encoder("minilm", adapter="outputs/train/runs/<run>/adapter")
    s = enc.encode_nodes(node_texts) @ enc.encode_queries([question]).T   # (N, 1) cosines

Names are imported lazily: ``canopy_lit.encoders.fingerprint`` (read by reports) must not pull in torch.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from canopy_lit.encoders.fingerprint import FINGERPRINT_FILE, read_fingerprint

if TYPE_CHECKING:
    from canopy_lit.encoders.base import EncoderInput, NodeEncoder, input_text
    from canopy_lit.encoders.qwen3vl import Qwen3VLEncoder
    from canopy_lit.encoders.text import TextEncoder

_EXPORTS = {
    "EncoderInput": "base",
    "NodeEncoder": "base",
    "input_text": "base",
    "TextEncoder": "text",
    "Qwen3VLEncoder": "qwen3vl",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'canopy_lit.encoders' has no attribute {name!r}")
    return getattr(importlib.import_module(f"canopy_lit.encoders.{_EXPORTS[name]}"), name)


def load_encoder(
    backbone: str = "minilm", adapter: str | Path | None = None, adapter_scale: float = 1.0, **kwargs: Any
) -> NodeEncoder:
    """The encoder class of a backbone name, built: ``Qwen3VLEncoder`` for a Qwen3-VL model (an alias such
    as ``qwen3vl``, a hub id, or a local folder whose config says so), else ``TextEncoder``.

    Args:
        backbone: ``"minilm"`` (bundled all-MiniLM-L6-v2), ``"mpnet"``, ``"qwen3vl"``, a hub id or a local folder.
        adapter: a folder written by ``NodeEncoder.save_adapter``, the name of an adapter shipped in the
            package (``"quickstart"``: ``canopy_lit.adapters``), or ``None`` = f0 everywhere.
        adapter_scale: weight-space interpolation of fθ toward f0 (1 = as trained, 0 = f0). Only with an adapter.
        **kwargs: the class's other arguments (``max_seq_length``, ``device``, ``torch_dtype`` ...).
    """
    from canopy_lit.adapters import resolve_adapter
    from canopy_lit.encoders.qwen3vl import Qwen3VLEncoder, is_qwen3vl
    from canopy_lit.encoders.text import TextEncoder

    adapter = resolve_adapter(adapter)
    name = str(backbone)
    if is_qwen3vl(name):
        return Qwen3VLEncoder(name, adapter=adapter, adapter_scale=adapter_scale, **kwargs)
    return TextEncoder(name, adapter=adapter, adapter_scale=adapter_scale, **kwargs)


__all__ = [
    "FINGERPRINT_FILE",
    "EncoderInput",
    "NodeEncoder",
    "Qwen3VLEncoder",
    "TextEncoder",
    "input_text",
    "load_encoder",
    "read_fingerprint",
]
