"""Local tokenizers for token counting when a backend cannot count itself (GGUF or Hugging Face)."""

from __future__ import annotations

import functools
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


@functools.lru_cache(maxsize=8)
def token_counter(spec: str) -> Callable[[str], int]:
    """``text -> tokens`` of a reader's tokenizer (asset name, GGUF file or tokenizer folder).

    GGUF tokenizers are read from the file's metadata (no weights, no LLM engine); one counter per
    spec and process, so the jobs of a multirun share it and its memo.
    """
    encode = load_tokenizer(spec)

    @functools.lru_cache(maxsize=200_000)
    def count(text: str) -> int:
        return len(encode(text)) if text else 0

    return count
