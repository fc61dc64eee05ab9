"""LangChain and LlamaIndex adapters over real HotpotQA paragraphs, the real MiniLM and the committed adapter.

Each framework's tests skip when its extra is not installed (``pip install canopy-lit[langchain]``,
``pip install canopy-lit[llamaindex]``)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from canopy_lit.api import Compressor

ROOT = Path(__file__).resolve().parents[2]
ADAPTER = ROOT / "experiments" / "runs" / "recipe" / "base" / "adapter"
BUDGET = 120


@pytest.fixture(scope="module")
def record() -> dict:
    return json.loads((ROOT / "data" / "hotpotqa" / "hotpot_dev_distractor_100.json").read_text())[0]


@pytest.fixture(scope="module")
def compressor() -> Compressor:
    return Compressor(adapter=ADAPTER)


def in_input_order(kept_ids: list[str], input_ids: list[str]) -> bool:
    return kept_ids == [i for i in input_ids if i in kept_ids]


def test_langchain_compressor_keeps_fewer_tokens_per_document_in_order(record: dict, compressor: Compressor) -> None:
    pytest.importorskip("langchain_core", reason="needs the langchain extra: pip install canopy-lit[langchain]")
    from langchain_core.documents import Document

    from canopy_lit.integrations.langchain import CanopyDocumentCompressor

    docs = [
        Document(page_content=" ".join(sentences), metadata={"id": f"p{i}", "title": title, "source": "hotpot"})
        for i, (title, sentences) in enumerate(record["context"])
    ]
    canopy = CanopyDocumentCompressor.from_compressor(compressor)
    out = canopy.compress_documents(docs, record["question"])
    input_tokens = sum(compressor.count_tokens(d.page_content) for d in docs)
    assert 0 < len(out) <= len(docs) and 0 < sum(d.metadata["canopy_tokens"] for d in out) < input_tokens
    assert in_input_order([d.metadata["id"] for d in out], [d.metadata["id"] for d in docs])
    by_id = {d.metadata["id"]: d for d in docs}
    for d in out:
        source = by_id[d.metadata["id"]]
        assert d.metadata["title"] == source.metadata["title"] and d.metadata["source"] == "hotpot"
        assert d.page_content.startswith(f"{source.metadata['title']}: ")  # the evidence block names its item
        assert d.metadata["canopy_regions"] and all(r["item_id"] == d.metadata["id"] for r in d.metadata["canopy_regions"])
        assert d.metadata["canopy_tokens"] == compressor.count_tokens(d.page_content)

    capped = CanopyDocumentCompressor.from_compressor(compressor, budget=BUDGET).compress_documents(docs, record["question"])
    assert 0 < sum(d.metadata["canopy_tokens"] for d in capped) <= BUDGET
    assert in_input_order([d.metadata["id"] for d in capped], [d.metadata["id"] for d in docs])


def test_langchain_compressor_builds_its_encoder_once_and_ids_fall_back_to_positions(record: dict) -> None:
    pytest.importorskip("langchain_core", reason="needs the langchain extra: pip install canopy-lit[langchain]")
    from langchain_core.documents import Document

    from canopy_lit.integrations.langchain import CanopyDocumentCompressor

    canopy = CanopyDocumentCompressor(adapter=str(ADAPTER), budget=BUDGET)
    docs = [Document(page_content=" ".join(s)) for _, s in record["context"][:3]] + [Document(page_content=" ")]
    first = canopy.compress_documents(docs, record["question"])
    built = canopy.loaded()
    assert canopy.compress_documents(docs, record["question"]) == first and canopy.loaded() is built
    assert {r["item_id"] for d in first for r in d.metadata["canopy_regions"]} <= {"0", "1", "2"}
    assert all(d.metadata["canopy_tokens"] > 0 for d in first)


def test_llamaindex_postprocessor_keeps_scores_metadata_and_order(record: dict, compressor: Compressor) -> None:
    pytest.importorskip("llama_index.core", reason="needs the llamaindex extra: pip install canopy-lit[llamaindex]")
    from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode

    from canopy_lit.integrations.llamaindex import CanopyNodePostprocessor

    nodes = [
        NodeWithScore(node=TextNode(id_=f"n{i}", text=" ".join(sentences), metadata={"title": title, "rank": i}),
                      score=1.0 - i / 10)
        for i, (title, sentences) in enumerate(record["context"])
    ]
    canopy = CanopyNodePostprocessor.from_compressor(compressor)
    out = canopy.postprocess_nodes(nodes, query_str=record["question"])
    input_tokens = sum(compressor.count_tokens(n.node.get_content()) for n in nodes)
    assert 0 < len(out) <= len(nodes) and 0 < sum(n.node.metadata["canopy_tokens"] for n in out) < input_tokens
    assert in_input_order([n.node.node_id for n in out], [n.node.node_id for n in nodes])
    by_id = {n.node.node_id: n for n in nodes}
    for n in out:
        source = by_id[n.node.node_id]
        assert n.score == source.score and n.node.metadata["rank"] == source.node.metadata["rank"]
        assert n.node.metadata["canopy_regions"] and n.node.metadata["canopy_tokens"] > 0
        # The LLM sees the evidence and the title, not the region bookkeeping.
        assert "canopy_regions" not in n.node.get_content(MetadataMode.LLM)
    assert [n.node.get_content() for n in nodes] == [" ".join(s) for _, s in record["context"]]  # inputs untouched

    capped = CanopyNodePostprocessor.from_compressor(compressor, budget=BUDGET).postprocess_nodes(
        nodes, query_str=record["question"])
    assert 0 < sum(n.node.metadata["canopy_tokens"] for n in capped) <= BUDGET
    with pytest.raises(ValueError, match="needs the query"):
        canopy.postprocess_nodes(nodes)


def test_item_margin_drops_irrelevant_documents_in_both_frameworks(record: dict, compressor: Compressor) -> None:
    every = compressor(record["question"], [" ".join(s) for _, s in record["context"]])
    pruned = Compressor(adapter=ADAPTER, item_margin=0.1)
    pruned.encoder, pruned.scorer = compressor.encoder, compressor.scorer
    want = pruned(record["question"], [" ".join(s) for _, s in record["context"]])
    assert 0 < len(want.block_ids) < len(every.block_ids)
    if importlib.util.find_spec("langchain_core") is not None:
        from langchain_core.documents import Document

        from canopy_lit.integrations.langchain import CanopyDocumentCompressor

        docs = [Document(page_content=" ".join(s), metadata={"id": f"item{i}"}) for i, (_, s) in enumerate(record["context"])]
        assert CanopyDocumentCompressor(item_margin=0.1).item_margin == 0.1
        out = CanopyDocumentCompressor.from_compressor(pruned).compress_documents(docs, record["question"])
        assert [d.metadata["id"] for d in out] == want.block_ids
        with pytest.raises(ValueError, match="item_margin"):
            CanopyDocumentCompressor(item_margin=-1)
    if importlib.util.find_spec("llama_index") is not None:
        from llama_index.core.schema import NodeWithScore, TextNode

        from canopy_lit.integrations.llamaindex import CanopyNodePostprocessor

        nodes = [NodeWithScore(node=TextNode(id_=f"item{i}", text=" ".join(s)), score=1.0)
                 for i, (_, s) in enumerate(record["context"])]
        out = CanopyNodePostprocessor.from_compressor(pruned).postprocess_nodes(nodes, query_str=record["question"])
        assert [n.node.node_id for n in out] == want.block_ids
        with pytest.raises(ValueError, match="item_margin"):
            CanopyNodePostprocessor(item_margin=float("nan"))


def test_pre_split_sentences_are_the_leaves_as_given(record: dict, compressor: Compressor) -> None:
    """A chunk that carries its sentences is not split again: the same evidence as ``compress`` on items with
    those sentences, every kept region a run of the given sentences (HotpotQA's own split)."""
    from canopy_lit.integrations import Passage, compress_passages
    from canopy_lit.types import Item

    passages = [Passage(" ".join(s), title, f"p{i}", tuple(s)) for i, (title, s) in enumerate(record["context"])]
    kept = compress_passages(compressor, record["question"], passages, BUDGET)
    items = [Item(p.id, "text", title=p.title, sentences=list(p.sentences)) for p in passages]
    direct = compressor(record["question"], items, BUDGET)
    assert [k.text for k in kept] == direct.blocks and kept
    sentences = {p.id: p.sentences for p in passages}
    for k in kept:
        for region in k.regions:
            given = sentences[region["item_id"]]
            assert 0 <= region["start"] < region["end"] <= len(given)
            if region["end"] - region["start"] == 1:
                assert region["text"].split(": ", 1)[-1].strip() == given[region["start"]].strip()


def test_langchain_reads_sentences_from_metadata_and_counts_in_the_readers_tokenizer(record: dict) -> None:
    pytest.importorskip("langchain_core", reason="needs the langchain extra: pip install canopy-lit[langchain]")
    from langchain_core.documents import Document

    from canopy_lit.integrations.langchain import CanopyDocumentCompressor
    from canopy_lit.llm.tokenizers import token_counter

    docs = [
        Document(page_content=" ".join(s), metadata={"id": f"p{i}", "title": title, "sentences": list(s)})
        for i, (title, s) in enumerate(record["context"])
    ]
    canopy = CanopyDocumentCompressor(adapter=str(ADAPTER), budget=BUDGET, tokenizer="qwen2.5-1.5b")
    out = canopy.compress_documents(docs, record["question"])
    count = token_counter("qwen2.5-1.5b")
    assert out and all(d.metadata["canopy_tokens"] == count(d.page_content) for d in out)
    assert sum(d.metadata["canopy_tokens"] for d in out) <= BUDGET
    docs[1].metadata["sentences"] = ["not", "this"]
    with pytest.raises(ValueError, match=r"documents\[1\]: metadata\['sentences'\] joined by single spaces"):
        canopy.compress_documents(docs, record["question"])
