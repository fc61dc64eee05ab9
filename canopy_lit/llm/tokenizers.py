"""Local tokenizers for token counting when a backend cannot count itself (GGUF or Hugging Face)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def load_tokenizer(spec: str) -> Callable[[str], list[int]]:
    """``text -> token ids`` (no special tokens) for an asset name, GGUF file or tokenizer folder.

    GGUF files are read for their tokenizer metadata only (no weights), via transformers' GGUF
    support; folders go through ``AutoTokenizer``.
    """
    from canopy_lit.assets import resolve

    path = Path(resolve(spec))
    if path.suffix == ".gguf":
        from transformers.integrations.gguf.gguf_tokenizer_mapping import (
            convert_gguf_tokenizer,
            get_gguf_tokenizer,
        )

        arch, tok_dict, _ = get_gguf_tokenizer(str(path))
        fast, _ = convert_gguf_tokenizer(arch, tok_dict)
        return lambda text: fast.encode(text, add_special_tokens=False).ids
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(path))
    return lambda text: hf(text, add_special_tokens=False)["input_ids"]
