"""CANOPY inside retrieval frameworks, as optional extras over ``canopy_lit.api.Compressor``.

* ``canopy_lit.integrations.langchain``: ``CanopyDocumentCompressor`` (``pip install canopy-lit[langchain]``)
* ``canopy_lit.integrations.llamaindex``: ``CanopyNodePostprocessor`` (``pip install canopy-lit[llamaindex]``)

This module imports no framework: both adapters share ``compress_passages``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from canopy_lit.api import Compressor


@dataclass(frozen=True)
class Passage:
    """One retrieved chunk as a framework holds it: its text, a title (or ""), an id when it has one, and its
    sentences when the chunk was split already (they become the tree's leaves as they are, not split again)."""

    text: str
    title: str = ""
    id: str | None = None
    sentences: tuple[str, ...] | None = None


@dataclass(frozen=True)
class KeptPassage:
    """What compression kept of ``passages[index]``: the evidence block, its regions and its tokens."""

    index: int
    text: str
    regions: list[dict[str, Any]]
    tokens: int


def passage_ids(passages: Sequence[Passage]) -> list[str]:
    """The passages' own ids when all are given and distinct, else their positions (ids only map back)."""
    own = [p.id for p in passages]
    if all(i is not None for i in own) and len(set(own)) == len(own):
        return [str(i) for i in own]
    return [str(i) for i in range(len(passages))]


def compress_passages(
    compressor: Compressor, question: str, passages: Sequence[Passage], budget: int | None = None
) -> list[KeptPassage]:
    """Compress ``passages`` (most relevant first) for ``question``: one entry per passage that kept
    anything, in the passages' order. Passages without text keep nothing."""
    ids = passage_ids(passages)
    index_of = {item_id: i for i, item_id in enumerate(ids)}
    items = [
        {"id": item_id, "title": p.title, **({"sentences": list(p.sentences)} if p.sentences else {"text": p.text})}
        for item_id, p in zip(ids, passages, strict=True)
        if p.text.strip()
    ]
    evidence = compressor(question, items, budget)
    regions: dict[str, list[dict[str, Any]]] = {}
    for region in evidence.regions:
        regions.setdefault(region.item_id, []).append(asdict(region))
    return [
        KeptPassage(index_of[item_id], block, regions.get(item_id, []), compressor.count_tokens(block))
        for item_id, block in zip(evidence.block_ids, evidence.blocks, strict=True)
    ]


def loaded_compressor(owner: Any) -> Compressor:
    """``owner``'s ``Compressor`` (its ``adapter``, ``encoder``, ``branching``, ``descend_margin``,
    ``item_margin`` and ``tokenizer`` fields), built on the first call and kept in ``owner._compressor``: both
    adapters load the encoder once, lazily."""
    if owner._compressor is None:
        count = None
        if owner.tokenizer is not None:
            from canopy_lit.llm.tokenizers import token_counter

            count = token_counter(str(owner.tokenizer))
        owner._compressor = Compressor(
            owner.adapter, owner.encoder, owner.branching, owner.descend_margin, count_tokens=count,
            item_margin=owner.item_margin,
        )
    return owner._compressor


def metadata_sentences(metadata: Mapping[str, Any], text: str, where: str) -> tuple[str, ...] | None:
    """A chunk's pre-split sentences from its metadata ("sentences"), None when it has none.

    Raises:
        ValueError: naming ``where``: not a list of str, or the sentences joined by single spaces are not the
            chunk's text (its regions would render other text than the chunk holds).
    """
    sentences = metadata.get("sentences")
    if sentences is None:
        return None
    if not isinstance(sentences, list | tuple) or not all(isinstance(x, str) for x in sentences):
        raise ValueError(f"{where}: metadata['sentences'] must be a list of str, got {type(sentences).__name__}")
    if " ".join(sentences) != text:
        raise ValueError(f"{where}: metadata['sentences'] joined by single spaces are not the chunk's text")
    return tuple(sentences)


def metadata_title(metadata: Mapping[str, Any]) -> str:
    """A chunk's title from its metadata ("title"), "" when it has none."""
    title = metadata.get("title")
    return str(title) if title else ""
