"""Late-chunked node embeddings (``encoder.node_pooling=late``) on real MiniLM and bundled HotpotQA / OTT-QA items.

References are computed here, independently of ``TextEncoder.encode_spans``: the plain transformers model, one
forward over the whole rendered item, and each node's token set found from the tokenizer's offsets.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from canopy_lit.data import load_split
from canopy_lit.encoders.text import TextEncoder, window_plan
from canopy_lit.hierarchy import Hierarchy
from canopy_lit.scoring.node_cache import NodeEmbeddingCache
from canopy_lit.scoring.scorers import FrozenEncoderView, QuerySideEncoder
from canopy_lit.types import Item

DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.fixture(scope="module")
def encoders() -> tuple[TextEncoder, TextEncoder]:
    return TextEncoder("minilm"), TextEncoder("minilm", node_pooling="late")


@pytest.fixture(scope="module")
def hotpot_trees() -> list:
    bench, questions = load_split("hotpotqa", str(DATA / "hotpotqa"), split="val")
    h = Hierarchy(2)
    ids = list(dict.fromkeys(i for q in questions[:3] for i in bench.candidates[q.id][:3]))
    return [h.build(bench.items[i]) for i in ids]


def _reference(enc: TextEncoder, text: str, ranges: list[tuple[int, int]], specials: bool = True) -> torch.Tensor:
    """Normalised mean of the token states of ``ranges`` (+ [CLS], [SEP]) from one forward over ``text``."""
    tok = enc.tokenizer(text, return_offsets_mapping=True, return_tensors="pt")
    offsets = tok.pop("offset_mapping")[0].tolist()
    special = enc.tokenizer.get_special_tokens_mask(tok["input_ids"][0].tolist(), already_has_special_tokens=True)
    keep = [
        bool(special[j]) and specials or not special[j] and any(a < e and b > s for s, e in ranges if e > s) for j, (a, b) in enumerate(offsets)
    ]
    with torch.no_grad():
        hidden = enc.model(**tok).last_hidden_state[0]
    return F.normalize(hidden[torch.tensor(keep)].mean(0), dim=-1)


def test_node_spans_rebuild_each_nodes_own_rendering(hotpot_trees) -> None:
    bench, questions = load_split("ottqa", str(DATA / "ottqa" / "dev.traced.json"), "val",
                                  options={"tables": str(DATA / "ottqa" / "dev_tables_passages.json.gz")})  # fmt: skip
    h = Hierarchy(2)
    tables = [h.build(bench.items[i]) for i in bench.candidates[questions[0].id][:4]]
    assert any(t.item.modality.value == "table" for t in tables)
    for tree in [*hotpot_trees, *tables]:
        root, spans = h.node_spans(tree)
        assert root == h.node_text(tree, 0) and len(spans) == len(tree)
        for node, ranges in enumerate(spans):
            assert "".join(root[s:e] for s, e in ranges) == h.node_text(tree, node), (tree.item.id, node)


def test_late_node_embedding_is_the_mean_of_its_span_states_from_one_item_forward(encoders, hotpot_trees) -> None:
    _, late = encoders
    h = Hierarchy(2)
    tree = max(hotpot_trees, key=len)
    assert len(tree) >= 5  # a tree with internal nodes and leaves
    root, spans = h.node_spans(tree)
    got = late.encode_spans([(root, spans)])[0]
    want = torch.stack([_reference(late, root, r) for r in spans])
    assert torch.allclose(got, want, atol=1e-5)
    # context matters: a leaf's late vector is not its sentence encoded alone
    alone = late.encode_nodes([h.node_input(tree, len(tree) - 1)])[0]
    assert float(alone @ got[-1]) < 0.999


def test_late_region_pools_each_nodes_region_tokens_only(hotpot_trees) -> None:
    enc = TextEncoder("minilm", node_pooling="late_region")
    h = Hierarchy(2)
    tree = max(hotpot_trees, key=len)
    root, spans = h.node_spans(tree)
    assert all(len(r) == 2 for r in spans)  # title prefix, then the region
    got = enc.encode_spans([(root, spans)])[0]
    want = torch.stack([_reference(enc, root, r[-1:], specials=False) for r in spans])
    assert torch.allclose(got, want, atol=1e-5)
    with_title = TextEncoder("minilm", node_pooling="late").encode_spans([(root, spans)])[0]
    assert float((got * with_title).sum(1).max()) < 0.9999
    assert "nodes=late_region" in NodeEmbeddingCache(enc, h).fingerprint


def test_a_short_items_root_equals_its_per_node_embedding(encoders, hotpot_trees) -> None:
    node, late = encoders
    h = Hierarchy(2)
    trees = hotpot_trees[:4]
    late_roots = torch.stack([e[0] for e in late.encode_spans([h.node_spans(t) for t in trees])])
    node_roots = node.encode_nodes([h.node_input(t, 0) for t in trees])
    assert not any(node.truncated([h.node_input(t, 0) for t in trees]))
    assert torch.allclose(late_roots, node_roots, atol=1e-5)


def test_cache_keys_differ_between_poolings_and_late_vectors_come_from_the_item_forward(encoders, hotpot_trees) -> None:
    node, late = encoders
    h = Hierarchy(2)
    per_node, chunked = NodeEmbeddingCache(node, h), NodeEmbeddingCache(late, h)
    assert per_node.fingerprint != chunked.fingerprint and "nodes=late" in chunked.fingerprint
    assert "nodes=late" in FrozenEncoderView(late).fingerprint
    # query-side retrieval vectors never depend on the node pooling: shared between the two
    assert QuerySideEncoder(late).fingerprint == QuerySideEncoder(node).fingerprint
    tree = hotpot_trees[0]
    leaf = len(tree) - 1
    got = chunked.embed_trees([tree], [[leaf]])[0]  # one node asked: the whole tree is encoded and stored
    assert chunked.stats()["memory"] == len(tree)
    root, spans = h.node_spans(tree)
    np.testing.assert_allclose(got[0], _reference(late, root, spans[leaf]).numpy(), atol=1e-5)
    assert np.allclose(chunked.embed_tree(tree), late.encode_spans([(root, spans)])[0].numpy(), atol=1e-6)
    assert chunked.stats()["misses"] == 1 and chunked.stats()["hits"] == len(tree)


@pytest.mark.parametrize(("n", "width"), [(0, 8), (5, 8), (8, 8), (9, 8), (31, 8), (1000, 510), (1021, 510), (7, 1)])
def test_windows_cover_every_token_once_from_a_window_that_holds_it(n: int, width: int) -> None:
    windows, owner = window_plan(n, width)
    assert len(owner) == n
    assert all(b - a <= width for a, b in windows) and windows[0][0] == 0 and windows[-1][1] == n
    for j, w in enumerate(owner):
        a, b = windows[w]
        assert a <= j < b
        # no other window holding j has it nearer its centre
        assert all(abs(2 * j + 1 - (c + d)) >= abs(2 * j + 1 - (a + b)) for c, d in windows if c <= j < d)
    assert owner == sorted(owner)  # ownership is contiguous: each window hands over once
    if n > width:
        assert all(b2 - a2 == width for a2, b2 in windows) and windows[1][0] == min(max(1, width // 2), n - width)


def test_a_long_item_is_read_in_windows_each_token_from_its_most_central_one() -> None:
    enc = TextEncoder("minilm", node_pooling="late", max_seq_length=32)
    bench, questions = load_split("hotpotqa", str(DATA / "hotpotqa"), split="val")
    item = max((bench.items[i] for i in bench.candidates[questions[0].id]), key=lambda it: len(it.text or ""))
    h = Hierarchy(2)
    tree = h.build(item)
    root, spans = h.node_spans(tree)
    ids = enc.tokenizer(root, add_special_tokens=False)["input_ids"]
    assert len(ids) > 4 * 30  # several windows
    windows, owner = window_plan(len(ids), 30)
    cls, sep = enc.tokenizer.cls_token_id, enc.tokenizer.sep_token_id
    with torch.no_grad():
        states = [enc.model(input_ids=torch.tensor([[cls, *ids[a:b], sep]])).last_hidden_state[0] for a, b in windows]
    seq = torch.cat([states[0][:1], *(states[w][1 + j - windows[w][0]][None] for j, w in enumerate(owner)),
                     states[-1][-1:]])  # fmt: skip
    want = F.normalize(seq.mean(0), dim=-1)  # the root: every token
    got = enc.encode_spans([(root, spans)])[0]
    assert torch.allclose(got[0], want, atol=1e-5)
    assert got.shape == (len(tree), enc.dim) and torch.isfinite(got).all()


def test_late_pooling_refuses_items_without_text_spans_and_bad_values() -> None:
    item = Item(id="fixture:image", modality="image", title="Astronaut", image=str(DATA / "media/images/astronaut.png"))
    h = Hierarchy(2)
    with pytest.raises(NotImplementedError, match="node_pooling=late works on text and table items only"):
        h.node_spans(h.build(item))
    with pytest.raises(ValueError, match="encoder.node_pooling must be one of node, late, late_region, cross, got 'lat'"):
        TextEncoder("minilm", node_pooling="lat")


def test_node_pooling_composes_and_a_bad_value_is_one_clear_error(hydra_ctx) -> None:
    from hydra import compose

    from canopy_lit.schema import ConfigError, validate_eval_config, validate_train_config

    for config, validate in (("evaluate", validate_eval_config), ("train", validate_train_config)):
        for encoder in ("minilm", "mpnet"):
            cfg = compose(config, overrides=[f"encoder={encoder}", "encoder.node_pooling=late"])
            validate(cfg)
            assert cfg.encoder.node_pooling == "late"
        assert compose(config).encoder.node_pooling == "node"
    with pytest.raises(ConfigError) as err:
        validate_eval_config(compose("evaluate", overrides=["encoder.node_pooling=chunked"]))
    assert err.value.problems == ["encoder.node_pooling must be one of node, late, late_region, cross, got 'chunked'"]
