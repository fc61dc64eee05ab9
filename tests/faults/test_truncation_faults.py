"""Nodes longer than the encoder reads: cut at ``max_seq_length``, counted, warned about once (real MiniLM).

At 512 tokens, 36 of the 250 gold-table roots of the bundled OTT-QA dev questions are cut (and with them
the parent/child pairs that differ only after the cut get identical inputs). The tests use two of those
tables, read through the OTT-QA reader from a slice of the bundled questions.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.scoring.node_cache import NodeEmbeddingCache

ROOT = Path(__file__).resolve().parents[2]
# Bundled OTT-QA gold tables whose root node is longer than 512 MiniLM tokens: the two smallest trees.
LONG_TABLES = ("Porphyria_0", "Prime_Minister's_Literary_Awards_0")
CUT_WARNING = "is longer than the encoder reads"


@pytest.fixture(scope="module")
def encoder():
    from canopy_lit.encoders import load_encoder

    # no max_seq_length: the library default; padded-token batches as configs/encoder/minilm.yaml (faster)
    return load_encoder("minilm", max_batch_tokens=2048)


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory):
    from canopy_lit.data import load_benchmark

    records = json.loads((ROOT / "data/ottqa/dev.traced.json").read_text())
    subset = tmp_path_factory.mktemp("ottqa") / "dev.traced.json"
    subset.write_text(json.dumps([r for r in records if r["table_id"] in LONG_TABLES]))
    bench = load_benchmark("ottqa", subset)  # the bundled tables file
    h = Hierarchy(2)
    return [h.build(bench.items[f"ottqa:{t}"]) for t in LONG_TABLES]


def cut_nodes(encoder, trees) -> int:
    """Nodes whose rendered text is longer than ``max_seq_length`` tokens, counted with the tokenizer."""
    h = Hierarchy(2)
    texts = [h.node_input(t, i).text for t in trees for i in range(len(t))]
    return sum(len(ids) > encoder.max_seq_length for ids in encoder.tokenizer(texts)["input_ids"])


def test_the_library_default_length_is_the_configured_one(encoder) -> None:
    # One default: a library user without an adapter reads as much of a node as a configured run does.
    configured = OmegaConf.load(ROOT / "configs/encoder/minilm.yaml").max_seq_length
    assert encoder.max_seq_length == configured == 512


def test_cut_nodes_are_counted_and_warned_about_once_per_run(encoder, trees, tmp_path, caplog) -> None:
    expected = cut_nodes(encoder, trees)
    assert expected >= len(trees)  # every root at least
    h = Hierarchy(2)
    with caplog.at_level(logging.WARNING):
        cache = NodeEmbeddingCache(encoder, h, cache_dir=tmp_path)
        cache.embed_trees(trees)
        cache.embed_trees(trees)  # memory hits: the same nodes, not counted twice
    assert cache.stats()["truncated"] == expected
    warnings = [r.getMessage() for r in caplog.records if CUT_WARNING in r.getMessage()]
    assert len(warnings) == 1 and "max_seq_length=512" in warnings[0] and "'truncated'" in warnings[0]
    cache.close()

    warm = NodeEmbeddingCache(encoder, h, cache_dir=tmp_path)  # the next run reads them from disk
    warm.embed_trees(trees[:1])
    assert warm.stats()["misses"] == 0 and warm.stats()["truncated"] == cut_nodes(encoder, trees[:1])
    warm.close()
