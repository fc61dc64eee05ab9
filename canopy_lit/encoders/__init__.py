"""Node encoders: f0 (queries, adapter off) and fθ (nodes, LoRA on) over one shared backbone.

Usable without Hydra::

    from canopy_lit.encoders import load_encoder
    enc = load_encoder("minilm", adapter="outputs/train/runs/<run>/adapter")
    s = enc.encode_nodes(node_texts) @ enc.encode_queries([question]).T   # (N, 1) cosines
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from canopy_lit.encoders.base import FINGERPRINT_FILE, EncoderInput, NodeEncoder, input_text

QWEN3VL_ALIASES = {"qwen3vl", "qwen3-vl-embedding-2b", "qwen3vl_embedding_2b"}
QWEN3VL_HUB_ID = "Qwen/Qwen3-VL-Embedding-2B"


def load_encoder(
    backbone: str = "minilm", adapter: str | Path | None = None, adapter_scale: float = 1.0, **kwargs: Any
) -> NodeEncoder:
    """Build a node encoder and optionally load a trained adapter.

    Args:
        backbone: ``"minilm"`` (bundled all-MiniLM-L6-v2), ``"qwen3vl"`` (Qwen/Qwen3-VL-Embedding-2B),
            a hub id or a local folder (a folder with ``model_type: qwen3_vl`` is loaded as Qwen3-VL).
        adapter: a folder written by ``NodeEncoder.save_adapter`` (or ``None`` = f0 everywhere).
        adapter_scale: weight-space interpolation of fθ toward f0: W0 + scale * ΔW (1 = as trained, 0 = f0;
            ``NodeEncoder.load_adapter``). Only with an adapter.
        **kwargs: passed to the encoder class (``max_seq_length``, ``device``, ``torch_dtype`` ...).
            Without ``max_seq_length``, an adapter's own (from its fingerprint file) is used: the length
            is part of the backbone hash the adapter must match.
    """
    name = str(backbone)
    adapter_scale = float(adapter_scale)
    if not adapter and adapter_scale != 1.0:
        raise ValueError(f"adapter_scale={adapter_scale} needs an adapter (encoder.adapter is {adapter!r})")
    if adapter and "max_seq_length" not in kwargs:
        saved = Path(adapter) / FINGERPRINT_FILE
        length = json.loads(saved.read_text()).get("max_seq_length") if saved.is_file() else None
        if length:
            kwargs["max_seq_length"] = int(length)
    if name.lower() in QWEN3VL_ALIASES or _is_qwen3vl(name):
        from canopy_lit.encoders.qwen3vl import Qwen3VLEncoder

        enc: NodeEncoder = Qwen3VLEncoder(QWEN3VL_HUB_ID if name.lower() in QWEN3VL_ALIASES else name, **kwargs)
    else:
        from canopy_lit.encoders.text import TextEncoder

        enc = TextEncoder(name, **kwargs)
    if adapter:
        enc.load_adapter(adapter, scale=adapter_scale)
    return enc


def _is_qwen3vl(name: str) -> bool:
    cfg = Path(name).expanduser() / "config.json"
    if cfg.is_file():
        import json

        return json.loads(cfg.read_text()).get("model_type", "").startswith("qwen3_vl")
    return "qwen3-vl" in name.lower()


__all__ = ["FINGERPRINT_FILE", "EncoderInput", "NodeEncoder", "input_text", "load_encoder"]
