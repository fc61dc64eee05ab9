"""One call to compress retrieved evidence: ``canopy_lit.compress(question, items, adapter=..., budget=...)``.

    >>> from canopy_lit import compress
    >>> ev = compress("Who designed the Eiffel Tower?", ["The Eiffel Tower is ... designed by ...", ...],
    ...               adapter="experiments/runs/recipe/base/adapter", budget=300)
    >>> print(ev.text)           # what a reader gets, items in the order given
    >>> ev.regions               # the kept regions: item, leaf range, score, text

The items go through the same stages as one round of the evidence loop (``EvidenceLoop``): region trees
(branching B), node scores from the node encoder (fθ with ``adapter``, f0 without), parent-relative
refinement (δ = ``descend_margin``) and, with a ``budget``, the reader cap: items are kept whole in the
order given while they fit, the first that does not is cut at a region (or token) boundary, the rest dropped.
No LLM is called. ``Compressor`` keeps the encoder loaded and the node embeddings cached across calls.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.pipeline.loop import EvidenceLoop, LoopSettings, ReaderBlock
from canopy_lit.pipeline.scoring import NodeScorer
from canopy_lit.refine import ParentRelativeRefiner
from canopy_lit.retrieval.node_cache import NodeEmbeddingCache
from canopy_lit.types import Item, Modality, Question

ItemLike = Item | str | Mapping[str, Any]
UNLIMITED = 10**9  # "no budget": the reader cap never binds


@dataclass(frozen=True)
class Region:
    """One kept region: leaves ``[start, end)`` of item ``item_id``, its node score and its text."""

    item_id: str
    start: int
    end: int
    score: float
    text: str


@dataclass
class CompressedEvidence:
    """What ``compress`` keeps of the items.

    Attributes:
        blocks: one evidence block per item that kept anything, in the order the items were given.
        regions: the kept regions (whole nodes the reader gets) with their node scores.
        tokens: tokens of ``blocks`` (``count_tokens``); ``item_tokens``: of the whole items.
        cut: ids of items cut or dropped by the budget.
        block_ids: the item id of each of ``blocks`` (framework adapters map blocks back to their inputs).
    """

    blocks: list[str]
    regions: list[Region]
    tokens: int
    item_tokens: int
    cut: list[str] = field(default_factory=list)
    block_ids: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n\n".join(self.blocks)

    @property
    def kept_ratio(self) -> float:
        return self.tokens / self.item_tokens if self.item_tokens else 0.0

    def __str__(self) -> str:
        return self.text


def as_item(item: ItemLike, index: int) -> Item:
    """An ``Item`` from an Item, a plain string (a text passage) or a dict (``Item.from_dict``'s fields)."""
    if isinstance(item, Item):
        return item
    if isinstance(item, str):
        return Item(f"item{index}", Modality.TEXT, text=item)
    if isinstance(item, Mapping):
        d = dict(item)
        d.setdefault("id", f"item{index}")
        d.setdefault("modality", "text")
        return Item.from_dict(d)
    raise TypeError(f"items[{index}]: expected an Item, a str or a dict, got {type(item).__name__}")


class _GivenItems:
    """The loop's retriever seat: the caller's items, in the caller's order."""

    def __init__(self, items: Sequence[Item]) -> None:
        self.items = list(items)

    def retrieve(self, query: str, k: int, exclude: Any = (), question: Any = None) -> list[Item]:
        return self.items[:k]


class Compressor:
    """CANOPY compression with the encoder loaded once (see the module docstring for ``compress``).

    Args:
        adapter: a LoRA adapter folder (``train.py``'s ``<run dir>/adapter``); None = f0.
        encoder: the backbone (``"minilm"``, ``"mpnet"``, a Qwen3-VL folder ...) or a built ``NodeEncoder``.
        branching: B of the region trees (the paper: 2).
        descend_margin: δ of the refinement rule (0 = the paper); larger keeps more, coarser regions.
        count_tokens: the reader's token counter for ``budget``; default: the node encoder's tokenizer.
        cache_dir: a folder for node embeddings (None = in memory, for this object's lifetime).
    """

    def __init__(
        self,
        adapter: str | Path | None = None,
        encoder: Any = "minilm",
        branching: int = 2,
        descend_margin: float = 0.0,
        count_tokens: Callable[[str], int] | None = None,
        cache_dir: str | Path | None = None,
    ) -> None:
        if isinstance(encoder, str):
            from canopy_lit.encoders import load_encoder  # torch: only when a backbone must be loaded

            encoder = load_encoder(encoder, adapter=adapter)
        elif adapter is not None:
            raise ValueError("adapter= applies to a backbone name; a built encoder carries its own adapter")
        self.encoder = encoder
        self.hierarchy = Hierarchy(branching)
        self.refiner = ParentRelativeRefiner(descend_margin=descend_margin)
        cache = NodeEmbeddingCache(encoder, self.hierarchy, cache_dir=cache_dir)
        self.scorer = NodeScorer(encoder, self.hierarchy, cache)
        self.count_tokens = count_tokens or _tokenizer_counter(encoder)

    def __call__(self, question: str, items: Sequence[ItemLike], budget: int | None = None) -> CompressedEvidence:
        """Compress ``items`` (most relevant first) for ``question``; ``budget``: at most that many tokens."""
        if budget is not None and int(budget) < 1:
            raise ValueError(f"budget must be a positive number of tokens or None, got {budget}")
        built = [as_item(it, i) for i, it in enumerate(items)]
        ids = [it.id for it in built]
        if len(set(ids)) != len(ids):
            raise ValueError(f"items need distinct ids, got {ids}")
        if not built:
            return CompressedEvidence([], [], 0, 0)
        settings = LoopSettings(k=len(built), max_rounds=1, reader_max_tokens=int(budget or UNLIMITED),
                                aggregation_check=False)
        loop = EvidenceLoop(_GivenItems(built), self.hierarchy, self.refiner, _NoReader(), self.count_tokens,
                            scorer=self.scorer, settings=settings)
        _, capped = loop.run_with_evidence(Question("compress", question, []))
        blocks = [b for b in capped.items if b.text]
        whole = sum(self.count_tokens(self.hierarchy.evidence_text(b.evidence.tree, [0])) for b in capped.items)
        return CompressedEvidence(
            blocks=[b.text for b in blocks],
            regions=self._regions(question, blocks),
            tokens=capped.tokens,
            item_tokens=whole,
            cut=[b.evidence.tree.item.id for b in capped.items if b.cap != "whole"],
            block_ids=[b.evidence.tree.item.id for b in blocks],
        )

    def _regions(self, question: str, blocks: Sequence[ReaderBlock]) -> list[Region]:
        with_nodes = [b for b in blocks if b.node_ids]
        trees = [b.evidence.tree for b in with_nodes]
        scores = self.scorer.score(question, trees, [b.node_ids for b in with_nodes]) if trees else []
        return [
            Region(t.item.id, int(t.starts[v]), int(t.ends[v]), float(s), self.hierarchy.evidence_text(t, [v]))
            for b, t, row in zip(with_nodes, trees, scores, strict=True)
            for v, s in zip(b.node_ids, row, strict=True)
        ]


class _NoReader:
    def answer(self, question: Question, evidence: list[str]) -> str:
        return ""


def _tokenizer_counter(encoder: Any) -> Callable[[str], int]:
    tokenizer = getattr(encoder, "tokenizer", None)
    if tokenizer is None:
        return lambda text: len(text.split())
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


_COMPRESSORS: dict[tuple[Any, ...], Compressor] = {}


def compress(
    question: str,
    items: Sequence[ItemLike],
    adapter: str | Path | None = None,
    budget: int | None = None,
    *,
    encoder: str = "minilm",
    branching: int = 2,
    descend_margin: float = 0.0,
) -> CompressedEvidence:
    """Compress retrieved ``items`` for ``question`` with CANOPY (no LLM call).

    Args:
        question: the user's question.
        items: retrieved items, most relevant first: ``Item`` objects, plain text passages, or dicts of
            ``Item`` fields (``{"title": ..., "text": ...}``, ``{"modality": "table", "table": {...}}``).
        adapter: a trained node-encoder adapter folder; None = f0 (the backbone without LoRA).
        budget: at most this many tokens (the node encoder's tokenizer); None = what refinement keeps.
        encoder: backbone name (default the bundled all-MiniLM-L6-v2).
        branching: B of the region trees.
        descend_margin: δ of the refinement rule.

    Returns:
        ``CompressedEvidence``: ``.text`` for a reader, ``.regions`` with their scores, ``.tokens``.
        The encoder of one (adapter, encoder, branching, δ) is loaded once per process.
    """
    key = (str(adapter) if adapter is not None else None, encoder, int(branching), float(descend_margin))
    if key not in _COMPRESSORS:
        _COMPRESSORS[key] = Compressor(adapter, encoder, branching, descend_margin)
    return _COMPRESSORS[key](question, items, budget)
