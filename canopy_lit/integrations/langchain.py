"""LangChain: ``CanopyDocumentCompressor``, CANOPY as a ``BaseDocumentCompressor`` (``pip install canopy-lit[langchain]``).

    >>> from canopy_lit.integrations.langchain import CanopyDocumentCompressor
    >>> compressor = CanopyDocumentCompressor(adapter="quickstart", budget=300)
    >>> docs = compressor.compress_documents(retrieved_docs, "Who designed the Eiffel Tower?")

Plugs into ``ContextualCompressionRetriever(base_compressor=compressor, base_retriever=...)`` like any
LangChain compressor. Each document is one item (title: ``metadata["title"]``; pre-split sentences:
``metadata["sentences"]``, which must join with single spaces to ``page_content``, are its leaves as they are); each output document holds
the kept evidence of one input, in the input order, with the input's metadata plus ``canopy_regions`` (item
id, leaf range, node score, text of every kept region) and ``canopy_tokens``. No LLM is called.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.callbacks import Callbacks
from langchain_core.documents import Document
from langchain_core.documents.compressor import BaseDocumentCompressor
from pydantic import ConfigDict, Field, PrivateAttr

from canopy_lit.api import Compressor
from canopy_lit.integrations import (
    Passage,
    compress_passages,
    loaded_compressor,
    metadata_sentences,
    metadata_title,
)


class CanopyDocumentCompressor(BaseDocumentCompressor):
    """Keeps the question-relevant regions of retrieved documents (``canopy_lit.api.Compressor``).

    Attributes:
        adapter: a trained node-encoder adapter folder; None = f0 (the backbone without LoRA).
        encoder: the backbone name (default the bundled all-MiniLM-L6-v2).
        budget: at most this many tokens over all documents (documents kept in order, the first that does
            not fit is cut, the rest dropped); None = what refinement keeps.
        branching: B of the region trees.
        descend_margin: δ of the refinement rule.
        tokenizer: the reader's tokenizer that counts ``budget`` and ``canopy_tokens`` (an asset name such as
            ``"qwen2.5-1.5b"``, a GGUF file or a tokenizer folder); None = the node encoder's.
        item_margin: None (keep a region of every one) or drop documents whose best region scores more than this
            below the best one's (experiments/frontier.md "Item drop").

    The ``Compressor`` is built on first use and kept; ``CanopyDocumentCompressor.from_compressor(c)``
    shares a built one (its settings win).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    adapter: str | Path | None = None
    encoder: str = "minilm"
    budget: int | None = Field(default=None, ge=1)
    branching: int = Field(default=2, ge=2)
    descend_margin: float = 0.0
    item_margin: float | None = Field(default=None, ge=0.0, allow_inf_nan=False)
    tokenizer: str | None = None
    _compressor: Compressor | None = PrivateAttr(default=None)

    @classmethod
    def from_compressor(cls, compressor: Compressor, budget: int | None = None) -> CanopyDocumentCompressor:
        document_compressor = cls(budget=budget)
        document_compressor._compressor = compressor
        return document_compressor

    def loaded(self) -> Compressor:
        """The compressor, its encoder loaded on the first call only."""
        return loaded_compressor(self)

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        passages = [
            Passage(d.page_content, metadata_title(d.metadata), _document_id(d),
                    metadata_sentences(d.metadata, d.page_content, f"documents[{i}]"))
            for i, d in enumerate(documents)
        ]  # fmt: skip
        return [
            Document(
                page_content=kept.text,
                metadata={**documents[kept.index].metadata, "canopy_regions": kept.regions,
                          "canopy_tokens": kept.tokens},
                id=documents[kept.index].id,
            )
            for kept in compress_passages(self.loaded(), query, passages, self.budget)
        ]


def _document_id(document: Document) -> str | None:
    own: Any = document.metadata.get("id", document.id)
    return None if own is None else str(own)
