"""Modality routing (UniversalRAG style): an LLM picks the sub-index a query searches.

The prompt and output parsing live in the LLM layer (``canopy_lit.llm.ModalityRouter``); this
adapter offers it only the modalities the index actually holds and returns partition names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class LLMModalityRouter:
    """``route(query) -> [modality]`` for ``FaissRetriever``, backed by the LLM layer's router.

    Args:
        llm: an ``LLM`` (a ``ModalityRouter`` is built over ``modalities``), or a ready router with
            ``route(question) -> str``.
        modalities: the partitions to choose from (use ``index.groups``); ignored for a ready router.
        cache: remember the decision per query text (the same follow-up query costs one call).

    Example:
        >>> retriever.router = LLMModalityRouter(llm, retriever.index.groups)
    """

    def __init__(self, llm: Any, modalities: Sequence[str] = ("text", "table", "image", "video"), cache: bool = True) -> None:
        if hasattr(llm, "route"):
            self.router = llm
        else:
            from canopy_lit.llm.roles import ModalityRouter

            self.router = ModalityRouter(llm, tuple(modalities))
        self.modalities = tuple(getattr(self.router, "modalities", modalities))
        self.cache = cache
        self._seen: dict[str, list[str]] = {}
        self.calls = 0

    def restrict(self, groups: Sequence[str]) -> None:
        """Offer the LLM only the partitions an index holds (called by ``FaissRetriever``)."""
        keep = tuple(m for m in self.modalities if m in set(groups))
        if keep and keep != self.modalities and hasattr(self.router, "llm"):
            from canopy_lit.llm.roles import ModalityRouter

            self.router = ModalityRouter(self.router.llm, keep)
            self.modalities = keep
            self._seen.clear()

    def route(self, query: str) -> list[str]:
        """The chosen partition(s) for ``query`` (one modality; the LLM layer falls back to the first)."""
        if self.cache and query in self._seen:
            return self._seen[query]
        self.calls += 1
        choice = self.router.route(query)
        out = [choice] if isinstance(choice, str) else list(choice)
        if self.cache:
            self._seen[query] = out
        return out
