"""Item-level pruning (``refine.item_margin``): off by default, the same decisions lazily and eagerly,
the best item always kept, configured and recorded like any other refiner knob."""

from __future__ import annotations

import numpy as np
import pytest
from hydra import compose
from hypothesis import given
from hypothesis import strategies as st
from test_refine import RecordingScores, tree_and_scores, tree_of

from canopy_lit.eval.records import run_axes
from canopy_lit.refine import ParentRelativeRefiner, drop_items, parent_relative
from canopy_lit.schema import ConfigError, validate_eval_config


def test_hand_computed_drop() -> None:
    trees = [tree_of(3), tree_of(3), tree_of(3)]
    # roots win everywhere (children lower): each item keeps its root; item scores 0.8, 0.7, 0.5
    scores = [np.array([r, r - 0.1, r - 0.1, r - 0.2, r - 0.2]) for r in (0.8, 0.7, 0.5)]
    kept = [parent_relative(t, s) for t, s in zip(trees, scores)]
    assert kept == [[0], [0], [0]]
    assert drop_items(kept, scores, 0.15) == [[0], [0], []]  # 0.5 < 0.8 - 0.15
    assert drop_items(kept, scores, 0.1) == [[0], [0], []]  # 0.7 is exactly 0.1 below: kept (ties stay)
    assert drop_items(kept, scores, 0.05) == [[0], [], []]
    assert drop_items(kept, scores, 0.0) == [[0], [], []]  # only the best item
    assert drop_items(kept, scores, 1.0) == kept


def test_the_best_kept_node_counts_not_the_root() -> None:
    tree = tree_of(4)  # 0=[0,4) 1=[0,2) 2=[2,4) 3..6 leaves
    low_root = np.array([0.3, 0.9, 0.1, 0.2, 0.2, 0.0, 0.0])  # descends to node 1 (0.9)
    flat = np.array([0.6, 0.5, 0.5, 0.4, 0.4, 0.4, 0.4])  # keeps its root (0.6)
    kept = [parent_relative(tree, low_root), parent_relative(tree, flat)]
    assert kept == [[1], [0]]
    assert drop_items(kept, [low_root, flat], 0.2) == [[1], []]  # 0.6 < 0.9 - 0.2, though its root is higher


def test_off_by_default_and_unscored_items_are_never_dropped() -> None:
    assert ParentRelativeRefiner().item_margin is None
    trees = [tree_of(3), tree_of(3)]
    scores = [np.array([0.9, 0.1, 0.1, 0.0, 0.0]), np.array([0.1, 0.0, 0.0, 0.0, 0.0])]
    assert ParentRelativeRefiner(lazy=False)(trees, scores) == [[0], [0]]
    # the second item is an aggregation table (kept whole, never scored in the lazy path): it stays
    refiner = ParentRelativeRefiner(lazy=False, item_margin=0.1)
    assert refiner(trees, scores) == [[0], []]
    assert refiner(trees, scores, [False, True]) == [[0], [0]]
    assert refiner.refine_lazily(trees, RecordingScores(scores), [False, True]) == [[0], [0]]


@given(st.lists(tree_and_scores(), min_size=1, max_size=5), st.sampled_from([0.0, 0.05, 0.1, 0.3]))
def test_lazy_equals_eager_and_the_best_item_stays(batch, margin: float) -> None:
    trees, scores = [t for t, _ in batch], [s for _, s in batch]
    refiner = ParentRelativeRefiner(item_margin=margin)
    eager = refiner(trees, scores)
    assert refiner.refine_lazily(trees, RecordingScores(scores)) == eager
    plain = ParentRelativeRefiner()(trees, scores)
    assert all(k in ([], p) for k, p in zip(eager, plain))  # an item is kept as refined, or dropped whole
    assert any(eager)  # the round's best item is never dropped


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf")])
def test_a_bad_margin_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="item_margin"):
        ParentRelativeRefiner(item_margin=bad)


def test_the_config_knob_is_validated_and_recorded(hydra_ctx, tmp_path) -> None:
    base = ["mode=evidence", "data=hotpotqa", f"paths.root_dir={tmp_path}"]
    cfg = compose("evaluate", overrides=base)
    assert cfg.refine.item_margin is None and "item_margin" not in run_axes(cfg)  # off: run.json as before
    validate_eval_config(cfg)
    cfg = compose("evaluate", overrides=[*base, "refine.item_margin=0.1"])
    validate_eval_config(cfg)
    assert run_axes(cfg)["item_margin"] == 0.1
    with pytest.raises(ConfigError, match="item_margin"):
        validate_eval_config(compose("evaluate", overrides=[*base, "refine.item_margin=-0.5"]))
