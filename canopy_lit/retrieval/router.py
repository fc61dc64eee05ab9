"""Modality routing (UniversalRAG style): an LLM picks the sub-index a query searches.

``ModalityRouter`` asks the LLM for one modality; ``LLMModalityRouter`` offers it only the modalities the
index actually holds and returns partition names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from canopy_lit.llm import prompts
from canopy_lit.llm.base import LLM
from canopy_lit.llm.context import fit_evidence
from canopy_lit.llm.parsing import PARSE_STATS, ParseStats, parse_label


class ModalityRouter:
    """Picks the corpus (modality) to search for a question; falls back to the first modality."""

    def __init__(self, llm: LLM, modalities: Sequence[str] = ("text", "table", "image", "video"), *,
                 constrained: bool = True, stats: ParseStats | None = None) -> None:  # fmt: skip
        if not modalities:
            raise ValueError("ModalityRouter: give at least one modality")
        self.llm, self.modalities, self.constrained = llm, tuple(modalities), constrained
        self.stats = stats or PARSE_STATS

    def route(self, question: str) -> str:
        msgs = fit_evidence(
            self.llm, lambda _: prompts.modality_router(question, self.modalities), [], 12, "router"
        )
        resp = self.llm.chat(
            msgs,
            json_mode=prompts.label_schema(self.modalities) if self.constrained else True,
            max_tokens=12,
            role="router",
        )
        return parse_label(resp.text, self.modalities, self.modalities[0], "router", self.stats)[0]


class LLMModalityRouter:
    """``route(query) -> [modality]`` for ``FaissRetriever``, backed by ``ModalityRouter``.

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
            self.router = ModalityRouter(llm, tuple(modalities))
        self.modalities = tuple(getattr(self.router, "modalities", modalities))
        self.cache = cache
        self._seen: dict[str, list[str]] = {}
        self.calls = 0

    def restrict(self, groups: Sequence[str]) -> None:
        """Offer the LLM only the partitions an index holds (called by ``FaissRetriever``)."""
        keep = tuple(m for m in self.modalities if m in set(groups))
        if keep and keep != self.modalities and hasattr(self.router, "llm"):
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
