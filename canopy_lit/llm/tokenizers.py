"""Local tokenizers for token counting when a backend cannot count itself (GGUF or Hugging Face).

The readers' tokenizers ship inside the package (``tokenizer_files/<asset>.tokenizer.json.gz``, sha256-pinned
in ``SHIPPED``): each is the tokenizer transformers builds from that GGUF asset's metadata, saved once, so
counting a reader's tokens (evidence mode, flat-matched budgets, the ablations) neither needs the model file
(1.1 GB for the Qwen reader) nor the ~20 s it takes to rebuild the tokenizer from it. A test checks that both
give the same ids on bundled texts.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
from collections.abc import Callable
from pathlib import Path

SHIPPED: dict[str, str] = {  # asset name -> sha256 of tokenizer_files/<name>.tokenizer.json.gz
    "qwen2.5-1.5b": "13c0f8dc7c63c8db880dfffeeacff9080c9a86fcae07890a93073d18df4b7b20",
    "smollm2-135m": "52f5276bff89fbd877526eb4e2b7917a98008d366992a442cd204577c454d1a8",
}
_FILES = Path(__file__).resolve().parent / "tokenizer_files"


def shipped_tokenizer(name: str) -> Callable[[str], list[int]]:
    """``text -> token ids`` of the tokenizer shipped for asset ``name``, its file checked against the pin.

    Raises:
        ValueError: no tokenizer ships for ``name``, or its file is missing or changed.
    """
    from tokenizers import Tokenizer

    if name not in SHIPPED:
        raise ValueError(f"no shipped tokenizer {name!r}; shipped: {', '.join(sorted(SHIPPED))}")
    path = _FILES / f"{name}.tokenizer.json.gz"
    if not path.is_file():
        raise ValueError(f"shipped tokenizer {name!r}: {path} is missing (a broken install? reinstall canopy-lit)")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != SHIPPED[name]:
        raise ValueError(f"shipped tokenizer {name!r}: {path} changed (sha256 differs from the pin); reinstall")
    fast = Tokenizer.from_str(gzip.decompress(data).decode("utf-8"))
    return lambda text: fast.encode(text, add_special_tokens=False).ids


def load_tokenizer(spec: str) -> Callable[[str], list[int]]:
    """``text -> token ids`` (no special tokens) for an asset name, GGUF file or tokenizer folder.

    An asset with a shipped tokenizer (``SHIPPED``) loads that, without its model file. GGUF files are read for their tokenizer metadata only (no
    weights), via transformers' GGUF support; folders go through ``AutoTokenizer``.
    """
    from canopy_lit.assets import resolve

    if spec in SHIPPED:  # an asset name, as resolve() reads it
        return shipped_tokenizer(spec)
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
