"""Refinement decisions do not depend on how the encoder batched the nodes (real MiniLM, real HotpotQA).

The same node scores ~1e-7 apart when encoded alone or padded beside a long text; at a near-tie a strict
``s(c) >= s(v) + δ`` would then keep the parent in one run and descend in the other (lazy vs eager scoring,
``max_batch_tokens``, ``compress()`` vs evaluate). ``refine.TIE_TOLERANCE`` makes both runs agree.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from canopy_lit.data import load_benchmark
from canopy_lit.encoders import load_encoder
from canopy_lit.refine import TIE_TOLERANCE, parent_relative, parent_relative_lazily
from canopy_lit.supervision import pair_holds
from canopy_lit.types import Item, Leaf, Modality, Tree


def _two_leaf_trees(n: int) -> list[Tree]:
    bench = load_benchmark("hotpotqa")
    trees = []
    for item in bench.items.values():
        if item.sentences and len(item.sentences) >= 2:
            a, b = item.sentences[0], item.sentences[1]
            trees.append(Tree(Item(id=item.id, modality=Modality.TEXT, text=a + b), [Leaf(0, a), Leaf(1, b)], 2))
        if len(trees) == n:
            break
    return trees


def _scores(enc, query: str, tree: Tree, padding: str | None) -> np.ndarray:
    texts = [tree.item.text, tree.leaves[0].text, tree.leaves[1].text]
    nodes = enc.encode_nodes(texts + ([padding] if padding else []))[:3]
    q = enc.encode_queries([query])[0]
    return (nodes @ q).double().numpy()


@pytest.fixture(scope="module")
def encoder():
    torch.manual_seed(0)
    return load_encoder("minilm")


def test_a_near_tie_decides_the_same_alone_and_in_a_padded_batch(encoder) -> None:
    query = "Which magazine was started first, Arthur's Magazine or First for Women?"
    long_text = " ".join(["The quick brown fox jumps over the lazy dog near the river bank."] * 30)
    found = None
    for tree in _two_leaf_trees(40):
        alone, padded = _scores(encoder, query, tree, None), _scores(encoder, query, tree, long_text)
        gaps = (alone[1] - alone[0], padded[1] - padded[0])
        if gaps[0] != gaps[1]:
            found = tree, alone, padded, gaps
            break
    assert found is not None, "batching changed no score: the near-tie this test needs never arose"
    tree, alone, padded, gaps = found
    assert abs(gaps[0] - gaps[1]) < TIE_TOLERANCE / 10  # the noise the tolerance is sized for
    delta = max(gaps)  # δ exactly at the larger gap: the strict rule splits the two runs here
    strict = [bool(s[1] >= s[0] + delta) for s in (alone, padded)]
    assert strict[0] != strict[1]
    kept = [parent_relative(tree, s, delta) for s in (alone, padded)]
    assert kept[0] == kept[1] and 1 in kept[0]
    lazy = parent_relative_lazily([tree], lambda req: [padded[r] for r in req], descend_margin=delta)[0][0]
    assert lazy == kept[0]
    # supervision reads a pair as refinement acts on it, under the same rule
    assert pair_holds(tree, alone, 1, 0, delta) == pair_holds(tree, padded, 1, 0, delta) == (1 in kept[0])
