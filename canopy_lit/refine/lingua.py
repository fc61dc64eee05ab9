"""LongLLMLingua as a refiner: whole items, compressed at the token level by a small causal LM."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from annotated_types import Interval

from canopy_lit.hierarchy import ELISION, Hierarchy
from canopy_lit.refine.rule import KeepWholeRefiner
from canopy_lit.types import Tree


class LongLLMLinguaRefiner(KeepWholeRefiner):
    """LongLLMLingua (Jiang et al., 2024): question-aware coarse (item) + fine (token) compression of the
    round's whole items by a small causal LM, at a target rate (``canopy_lit.longllmlingua``).

    Its evidence is compressed text, not regions: as ``KeepWholeRefiner`` it keeps every item whole (the root)
    and the loop then asks ``compress`` for each item's block (``compresses_text``); an item the coarse step drops
    gets no block. Titles, captions and table headers pass through verbatim (they reach the reader with
    any region under every other refiner); the rest of each block is compressed. Scores are not read, so
    no node scorer is loaded; aggregation flags are ignored (the compressor has no table rule).

    The arguments are ``LongLLMLingua``'s, named here so that the ``refine`` group's keys are checked against
    them (the config targets this class).

    Args:
        model: the compressor's causal LM, an offline asset (``smollm2-135m``) or a GGUF path.
        rate: target share of the items' tokens kept (ρ; the paper's Table 7 runs 0.55).
        condition_in_question: where the question conditions the token perplexities (LongLLMLingua's knob).
        dynamic_context_compression_ratio: how much the kept rate rises with an item's coarse rank.
        context_budget: slack on the coarse step's token budget (``"+100"``).
        iterative_size: tokens per step of the iterative fine compression.

    Raises:
        ImportError: one line naming the ``lingua`` extra when ``llmlingua`` (or ``gguf``) is missing.
    """

    compresses_text = True

    def __init__(
        self,
        model: str = "smollm2-135m",
        rate: Annotated[float, Interval(gt=0.0, le=1.0)] = 0.55,
        condition_in_question: str = "after_condition",
        dynamic_context_compression_ratio: float = 0.3,
        context_budget: str = "+100",
        iterative_size: int = 200,
    ) -> None:
        from canopy_lit.longllmlingua import LongLLMLingua, lm_name, require_llmlingua

        require_llmlingua()  # at build time, before any question runs
        self.compressor = LongLLMLingua(
            model, rate, condition_in_question, dynamic_context_compression_ratio, context_budget, iterative_size
        )
        self.label = f"LongLLMLingua ({lm_name(model)})"

    def compress(
        self, query: str, trees: Sequence[Tree], kept: Sequence[Sequence[int]], hierarchy: Hierarchy
    ) -> list[str | None]:
        """Each item's block: its head verbatim + its kept regions' text compressed (None: dropped whole)."""
        heads, bodies = [], []
        for tree, ids in zip(trees, kept, strict=True):
            head = hierarchy.evidence_text(tree, []).removesuffix(ELISION)
            full = hierarchy.evidence_text(tree, list(ids))
            head = head if full.startswith(head) else ""
            heads.append(head)
            bodies.append(full[len(head):])
        return self.compressor(query, heads, bodies)
