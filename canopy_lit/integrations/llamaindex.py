"""LlamaIndex: ``CanopyNodePostprocessor``, CANOPY as a node postprocessor (``pip install canopy-lit[llamaindex]``).

    >>> from canopy_lit.integrations.llamaindex import CanopyNodePostprocessor
    >>> canopy = CanopyNodePostprocessor(adapter="quickstart", budget=300)
    >>> query_engine = index.as_query_engine(node_postprocessors=[canopy])

Each node is one item (its text, title: ``metadata["title"]``, pre-split sentences: ``metadata["sentences"]``,
which must join with single spaces to its text); each output ``NodeWithScore`` holds a copy
of one input node with the kept evidence as its text, the input's metadata plus ``canopy_regions`` and
``canopy_tokens``, and the input's score, in the input order. No LLM is called.
"""

from __future__ import annotations

from pathlib import Path

from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode

from canopy_lit.api import Compressor
from canopy_lit.integrations import (
    Passage,
    compress_passages,
    loaded_compressor,
    metadata_sentences,
    metadata_title,
)

# The kept regions stay out of what the LLM and the embedder see: the evidence text already holds them.
CANOPY_KEYS = ["canopy_regions", "canopy_tokens"]


class CanopyNodePostprocessor(BaseNodePostprocessor):
    """Keeps the question-relevant regions of retrieved nodes (``canopy_lit.api.Compressor``).

    Attributes:
        adapter: a trained node-encoder adapter folder; None = f0 (the backbone without LoRA).
        encoder: the backbone name (default the bundled all-MiniLM-L6-v2).
        budget: at most this many tokens over all nodes (nodes kept in order, the first that does not fit
            is cut, the rest dropped); None = what refinement keeps.
        branching: B of the region trees.
        descend_margin: δ of the refinement rule.
        tokenizer: the reader's tokenizer that counts ``budget`` and ``canopy_tokens`` (an asset name such as
            ``"qwen2.5-1.5b"``, a GGUF file or a tokenizer folder); None = the node encoder's.
        tokenizer: the reader's tokenizer that counts ``budget`` and ``canopy_tokens`` (an asset name such as
            ``"qwen2.5-1.5b"``, a GGUF file or a tokenizer folder); None = the node encoder's.
        item_margin: None (keep a region of every one) or drop nodes whose best region scores more than this
            below the best one's (experiments/frontier.md "Item drop").

    ``CanopyNodePostprocessor.from_compressor(c)`` shares a built ``Compressor`` (its settings win).
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
    def class_name(cls) -> str:
        return "CanopyNodePostprocessor"

    @classmethod
    def from_compressor(cls, compressor: Compressor, budget: int | None = None) -> CanopyNodePostprocessor:
        processor = cls(budget=budget)
        processor._compressor = compressor
        return processor

    def loaded(self) -> Compressor:
        """The compressor, its encoder loaded on the first call only."""
        return loaded_compressor(self)

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if query_bundle is None:
            raise ValueError("CanopyNodePostprocessor needs the query: postprocess_nodes(nodes, query_str=...)")
        texts = [n.node.get_content(MetadataMode.NONE) for n in nodes]
        passages = [
            Passage(text, metadata_title(n.node.metadata), n.node.node_id,
                    metadata_sentences(n.node.metadata, text, f"nodes[{i}]"))
            for i, (n, text) in enumerate(zip(nodes, texts, strict=True))
        ]  # fmt: skip
        out = []
        for kept in compress_passages(self.loaded(), query_bundle.query_str, passages, self.budget):
            source = nodes[kept.index]
            node = TextNode(
                id_=source.node.node_id,
                text=kept.text,
                metadata={**source.node.metadata, "canopy_regions": kept.regions, "canopy_tokens": kept.tokens},
                excluded_llm_metadata_keys=[*source.node.excluded_llm_metadata_keys, *CANOPY_KEYS],
                excluded_embed_metadata_keys=[*source.node.excluded_embed_metadata_keys, *CANOPY_KEYS],
                relationships=source.node.relationships,
            )
            out.append(NodeWithScore(node=node, score=source.score))
        return out
