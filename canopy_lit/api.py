"""One call to compress retrieved evidence: ``canopy_lit.compress(question, items, adapter=..., budget=...)``.

    >>> from canopy_lit import compress
    >>> ev = compress("Who designed the Eiffel Tower?", ["The Eiffel Tower is ... designed by ...", ...],
    ...               adapter="quickstart", budget=300)
    >>> print(ev.text)           # what a reader gets, items in the order given
    >>> ev.regions               # the kept regions: item, leaf range, score, text

The items go through the same code as one round of the evidence loop (``pipeline.round.compress_round`` and the
reader cap of ``reader.budget``), so the evaluate path gives the same evidence for the same items: region trees
(branching B), node scores from the node encoder (fθ with ``adapter``, f0 without), parent-relative
refinement (δ = ``descend_margin``), optionally item pruning (``item_margin``: an item whose best kept region
scores more than this below the best item's is dropped whole; off by default, as in the paper) and, with a
``budget``, the reader cap: items are kept whole in the
order given while they fit, the first that does not is cut at a region (or token) boundary, the rest dropped.
No LLM is called. ``Compressor`` keeps the encoder loaded and the node embeddings cached across calls.

Input is checked before any encoding (``canopy_lit.inputs``): each bad input is one error naming the item and
field, e.g. a dict ``title`` is a ``TypeError`` naming ``items[i].title``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.inputs import (
    MAX_ITEM_CHARS,
    ItemLike,
    as_item,
    check_budget,
    check_item_margin,
    check_margin,
    check_question,
    item_chars,
    items_list,
    media_file,
)
from canopy_lit.pipeline.round import compress_round
from canopy_lit.reader.budget import EvidenceBudget, ReaderBlock
from canopy_lit.refine import AggregationCheck, ParentRelativeRefiner
from canopy_lit.scoring.scorers import node_scorer
from canopy_lit.types import Modality, Question, VideoRef

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
        skipped: ids of text items with no text (empty or whitespace only): no block, no tokens.
        dropped: ids of items dropped whole by ``item_margin`` (their best region scored too far below the
            best item's); empty when ``item_margin`` is None.
    """

    blocks: list[str]
    regions: list[Region]
    tokens: int
    item_tokens: int
    cut: list[str] = field(default_factory=list)
    block_ids: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n\n".join(self.blocks)

    @property
    def kept_ratio(self) -> float:
        return self.tokens / self.item_tokens if self.item_tokens else 0.0

    def __str__(self) -> str:
        return self.text


class Compressor:
    """CANOPY compression with the encoder loaded once (see the module docstring for ``compress``).

    Args:
        adapter: a LoRA adapter folder (``train.py``'s ``<run dir>/adapter``), or ``"quickstart"``: the
            trained adapter shipped in the package (``canopy_lit.adapters``); None = f0.
        encoder: the backbone (``"minilm"``, ``"mpnet"``, a Qwen3-VL folder ...) or a built ``NodeEncoder``.
        branching: B of the region trees (the paper: 2).
        descend_margin: δ of the refinement rule (0 = the paper); larger keeps more, coarser regions.
        item_margin: None (the paper: every item keeps a region) or drop each item whose best kept region
            scores more than this below the best item's (0.3 dropped items at no measurable recall cost on the
            bundled benchmarks, 0.2 cost 3-6 points: experiments/frontier.md, "Item drop").
        count_tokens: the reader's token counter for ``budget``; default: the node encoder's tokenizer.
        cache_dir: a folder for node embeddings (None = in memory, for this object's lifetime).
        aggregation: a table-aggregation check (``is_aggregation(question) -> bool``, e.g.
            ``canopy_lit.refine.AggregationClassifier(llm)``), asked
            once per call with a table among the items; None = no check (tables are refined like any item).
    """

    def __init__(
        self,
        adapter: str | Path | None = None,
        encoder: Any = "minilm",
        branching: int = 2,
        descend_margin: float = 0.0,
        count_tokens: Callable[[str], int] | None = None,
        cache_dir: str | Path | None = None,
        item_margin: float | None = None,
        aggregation: AggregationCheck | None = None,
    ) -> None:
        check_margin(descend_margin)  # before the encoder loads
        check_item_margin(item_margin)
        if isinstance(encoder, str):
            from canopy_lit.adapters import resolve_adapter
            from canopy_lit.encoders import load_encoder  # torch: only when a backbone must be loaded
            from canopy_lit.encoders.base import adapter_node_pooling
            from canopy_lit.encoders.fingerprint import read_fingerprint

            # the adapter scores nodes the way it was trained (per node, late chunking, or read after the question)
            path = resolve_adapter(adapter)
            pooling = adapter_node_pooling(read_fingerprint(Path(path)) or {}) if path else "node"
            encoder = load_encoder(encoder, adapter=path, **({"node_pooling": pooling} if pooling != "node" else {}))
        elif adapter is not None:
            raise ValueError("adapter= applies to a backbone name; a built encoder carries its own adapter")
        self.encoder = encoder
        self.hierarchy = Hierarchy(branching)
        self.refiner = ParentRelativeRefiner(
            descend_margin=check_margin(descend_margin), item_margin=check_item_margin(item_margin)
        )
        self.scorer = node_scorer(encoder, self.hierarchy, cache_dir=cache_dir)
        self.count_tokens = count_tokens or _tokenizer_counter(encoder)
        self.aggregation = aggregation

    def __call__(
        self,
        question: str,
        items: Sequence[ItemLike] | ItemLike,
        budget: int | None = None,
        *,
        media_root: str | Path | None = None,
        max_item_chars: int | None = MAX_ITEM_CHARS,
        aggregation: bool | None = None,
    ) -> CompressedEvidence:
        """Compress ``items`` (most relevant first) for ``question``; ``budget``: at most that many tokens.

        ``media_root``: image / video paths must stay inside it (relative ones resolve under it).
        ``max_item_chars``: longer items are refused before any work (None = no bound). ``aggregation``: True =
        the question aggregates over tables, which are then kept whole (the loop's aggregation check); None = ask
        the compressor's ``aggregation`` check when a table is among the items. Input rules: the module docstring.
        """
        check_question(question)
        cap = check_budget(budget)
        built = []
        for i, it in enumerate(items_list(items)):
            item = as_item(it, i)
            chars = item_chars(item)
            if max_item_chars is not None and chars > max_item_chars:
                raise ValueError(
                    f"items[{i}] ({item.id!r}): {chars} characters, over max_item_chars={max_item_chars}; "
                    "split it into passages, or pass max_item_chars=None to compress it whole (slow)"
                )
            # the caller's Item is not changed: a checked copy carries the resolved path
            if item.image is not None:
                item = replace(item, image=str(media_file(item.image, f"items[{i}].image", "image", media_root)))
            if item.video is not None:
                path = media_file(item.video.path, f"items[{i}].video.path", "video", media_root)
                item = replace(item, video=VideoRef(str(path), item.video.start, item.video.end))
            built.append(item)
        ids = [it.id for it in built]
        if len(set(ids)) != len(ids):
            raise ValueError(f"items need distinct ids, got {ids}")
        skipped = [it.id for it in built if it.modality == Modality.TEXT and not (it.text or "").strip()]
        built = [it for it in built if it.id not in skipped]
        if not built:
            return CompressedEvidence([], [], 0, 0, skipped=skipped)
        trees = [self.hierarchy.build(it) for it in built]
        tables = [t.item.modality == Modality.TABLE for t in trees]
        if aggregation is None:  # as the loop: classified from the question alone, only when a table is there
            aggregation = any(tables) and self.aggregation is not None and bool(
                self.aggregation.is_aggregation(Question("compress", question, []))
            )
        flags = [bool(aggregation) and table for table in tables]
        # the evidence loop's round and reader cap, with the caller's items as the round's retrieved items
        kept = compress_round(question, trees, self.refiner, self.hierarchy, self.scorer, flags)
        held = [ev for ev in kept if ev.node_ids]
        budgeted = EvidenceBudget(self.hierarchy, self.count_tokens, cap or UNLIMITED)
        capped = budgeted.cap(held, [self.count_tokens(budgeted.block(ev)) for ev in held])
        blocks = [b for b in capped.items if b.text]
        # every item's whole tokens, those item pruning dropped (no region kept, no evidence held) included
        whole = sum(self.count_tokens(self.hierarchy.evidence_text(t, [0])) for t in trees)
        return CompressedEvidence(
            blocks=[b.text for b in blocks],
            regions=self._regions(question, blocks),
            tokens=capped.tokens,
            item_tokens=whole,
            cut=[b.evidence.tree.item.id for b in capped.items if b.cap != "whole"],
            block_ids=[b.evidence.tree.item.id for b in blocks],
            skipped=skipped,
            dropped=[ev.tree.item.id for ev in kept if not ev.node_ids],
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


def _tokenizer_counter(encoder: Any) -> Callable[[str], int]:
    tokenizer = getattr(encoder, "tokenizer", None)
    if tokenizer is None:
        return lambda text: len(text.split())
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


_COMPRESSORS: dict[tuple[Any, ...], Compressor] = {}


def compress(
    question: str,
    items: Sequence[ItemLike] | ItemLike,
    adapter: str | Path | None = None,
    budget: int | None = None,
    *,
    encoder: str = "minilm",
    branching: int = 2,
    descend_margin: float = 0.0,
    item_margin: float | None = None,
    media_root: str | Path | None = None,
    max_item_chars: int | None = MAX_ITEM_CHARS,
    tokenizer: str | None = None,
    aggregation: bool | None = None,
) -> CompressedEvidence:
    """Compress retrieved ``items`` for ``question`` with CANOPY (no LLM call).

    Args:
        question: the user's question (a non-empty str).
        items: retrieved items, most relevant first: ``Item`` objects, plain text passages, or dicts of
            ``Item`` fields (``{"title": ..., "text": ...}``, ``{"modality": "table", "table": {...}}``);
            one str (or one dict / Item) alone is one item.
        adapter: a trained node-encoder adapter folder or a shipped adapter's name (``"quickstart"``); None = f0.
        budget: at most this many tokens (``tokenizer``'s); None = what refinement keeps.
        encoder: backbone name (default the bundled all-MiniLM-L6-v2).
        branching: B of the region trees.
        descend_margin: δ of the refinement rule.
        item_margin: None, or drop items whose best region scores more than this below the best item's.
        media_root: image / video paths must stay inside this folder (relative ones resolve under it).
        max_item_chars: an item longer than this is refused at once (None = no bound).
        tokenizer: the reader's tokenizer that counts ``budget`` and ``.tokens`` (an asset name such as
            ``"qwen2.5-1.5b"``, a GGUF file or a tokenizer folder, as ``evidence.tokenizer``); None = the node
            encoder's.
        aggregation: True = the question aggregates over tables (tables are kept whole, as the evaluate path
            does when its aggregation classifier says so); None / False = tables are refined like any item.

    Returns:
        ``CompressedEvidence``: ``.text`` for a reader, ``.regions`` with their scores, ``.tokens``.
        The encoder of one (adapter, encoder, branching, δ, item margin) is loaded once per process.

    Raises:
        TypeError, ValueError: bad input, one line naming the argument, item and field (module docstring).
    """
    check_question(question)
    check_budget(budget)
    margin, drop = check_margin(descend_margin), check_item_margin(item_margin)
    key = (str(adapter) if adapter is not None else None, encoder, int(branching), margin, drop, tokenizer)
    if key not in _COMPRESSORS:
        count = None
        if tokenizer is not None:
            from canopy_lit.llm.tokenizers import token_counter

            count = token_counter(str(tokenizer))
        _COMPRESSORS[key] = Compressor(adapter, encoder, branching, margin, count_tokens=count, item_margin=drop)
    return _COMPRESSORS[key](
        question, items, budget, media_root=media_root, max_item_chars=max_item_chars, aggregation=aggregation
    )
