"""Baselines as the originals define them: RECOMP's extractive selector (tiny hand-made trees)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.refine import ExtractiveRefiner, leaf_ids
from canopy_lit.scoring.scorers import FrozenEncoderView, node_scorer
from canopy_lit.types import Item, Table

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
H = Hierarchy(2)
TEXT = H.build(Item("a", "text", title="A", sentences=["A one.", "A two.", "A three.", "A four."]))
TABLE = H.build(Item("t", "table", title="T", table=Table(["x", "y"], [["1", "2"], ["3", "4"], ["5", "6"]])))


def leaf_scores(tree, values) -> np.ndarray:
    """Full (num_nodes,) scores: ``values`` on the leaves (leaf order), +10 on inner nodes, so that a
    selector reading inner nodes (or keeping a whole table) would be caught."""
    s = np.full(len(tree), 10.0, dtype=np.float32)
    s[leaf_ids(tree)] = values
    return s


def test_top_m_leaves_across_items_in_leaf_order() -> None:
    scores = [leaf_scores(TEXT, [0.1, 0.9, 0.3, 0.8]), leaf_scores(TABLE, [0.2, 0.85, 0.7])]
    kept = ExtractiveRefiner(m=3)([TEXT, TABLE], scores)
    ids_text, ids_table = leaf_ids(TEXT), leaf_ids(TABLE)
    assert kept == [[int(ids_text[1]), int(ids_text[3])], [int(ids_table[1])]]


def test_tables_of_aggregation_questions_are_not_kept_whole() -> None:
    """RECOMP has no aggregation classifier: the loop's flags change nothing."""
    scores = [leaf_scores(TEXT, [0.1, 0.9, 0.3, 0.8]), leaf_scores(TABLE, [0.2, 0.85, 0.7])]
    r = ExtractiveRefiner(m=2)
    assert r([TEXT, TABLE], scores, [False, True]) == r([TEXT, TABLE], scores)
    assert [0] not in r([TEXT, TABLE], scores, [False, True])


def test_lazy_selection_encodes_leaves_only_and_matches_full_scores() -> None:
    full = [leaf_scores(TEXT, [0.4, 0.1, 0.6, 0.2]), leaf_scores(TABLE, [0.5, 0.3, 0.35])]
    asked: list[list[int]] = []

    def score_nodes(requests):
        asked.extend(list(r) for r in requests)
        return [f[list(r)] for f, r in zip(full, requests)]

    r = ExtractiveRefiner(m=4)
    assert r.refine_lazily([TEXT, TABLE], score_nodes) == r([TEXT, TABLE], full)
    assert asked == [leaf_ids(TEXT).tolist(), leaf_ids(TABLE).tolist()]


def test_bad_settings_name_their_config_key() -> None:
    with pytest.raises(ValueError, match="refine.m"):
        ExtractiveRefiner(m=0)


class AdapterEncoder:
    """Records whether the adapter was off during each call (stands in for a ``NodeEncoder``)."""

    fingerprint = "TextEncoder:minilm:abc:adapter=1234"
    has_adapter = True
    dim = 3

    def __init__(self) -> None:
        self.off = False
        self.calls: list[tuple[str, bool]] = []

    def adapter_disabled(self):
        enc = self

        class Off:
            def __enter__(self):
                enc.off = True

            def __exit__(self, *exc):
                enc.off = False

        return Off()

    def encode_nodes(self, inputs, batch_size=None):
        self.calls.append(("nodes", self.off))
        return np.zeros((len(inputs), 3), np.float32)

    def encode_queries(self, texts, batch_size=None):
        self.calls.append(("queries", self.off))
        return np.zeros((len(texts), 3), np.float32)


def test_frozen_view_encodes_nodes_with_the_adapter_off_and_keys_the_cache_as_f0() -> None:
    enc = AdapterEncoder()
    view = node_scorer(enc, H, frozen=True).encoder  # scorer=f0
    assert isinstance(view, FrozenEncoderView)
    view.encode_nodes(["x"])
    assert enc.calls == [("nodes", True)]
    assert view.fingerprint == "TextEncoder:minilm:abc:adapter=none" and view.dim == 3
    assert node_scorer(enc, H, require_adapter=True).encoder is enc  # scorer=ftheta
    assert node_scorer(enc, H).encoder is enc  # scorer=adapter


def test_ftheta_scorer_without_an_adapter_names_the_choice() -> None:
    enc = AdapterEncoder()
    enc.has_adapter = False
    with pytest.raises(ValueError, match="scorer=ftheta needs a trained adapter"):
        node_scorer(enc, H, require_adapter=True)


def test_recomp_config_is_the_extractive_selector_without_aggregation() -> None:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose("evaluate", overrides=["method=recomp", "encoder.adapter=/tmp/adapter"])
    GlobalHydra.instance().clear()
    assert cfg.refine._target_ == "canopy_lit.refine.ExtractiveRefiner" and cfg.refine.m == 5
    assert cfg.scorer.frozen is True  # its own f0 scorer, though the run loads an adapter
    assert cfg.loop.aggregation_check is False and cfg.controller._target_.endswith(".no_controller") and cfg.loop.max_rounds == 1


def test_tables_state_each_rows_scorer_and_label_universalrag_as_modality_routing_only(tmp_path) -> None:
    """recomp (own f0 scorer) next to canopy (fθ) makes the scorer a column; whole-item rows leave it blank."""
    import yaml
    from runfolders import make_qa_run

    from canopy_lit.report.runs import find_runs
    from canopy_lit.report.tables import render_study, split_settings

    def run(method: str, refine: str, rounds: int, **config) -> None:
        d = make_qa_run(tmp_path / method, "hotpotqa", 2, method=method, refine=refine, max_rounds=rounds, study="main")
        cfile = d / ".hydra" / "config.yaml"
        cfg = yaml.safe_load(cfile.read_text())
        for dotted, value in config.items():
            group, key = dotted.split("__")
            cfg.setdefault(group, {})[key] = value
        cfile.write_text(yaml.safe_dump(cfg, allow_unicode=True))

    run("canopy", "parent_relative", 2)
    # recomp scores through the scorer=f0 view (its own selector), whatever adapter the run loads
    run("recomp", "flat_top_m", 1, scorer__frozen=True, refine___target_="canopy_lit.refine.ExtractiveRefiner")
    run("universalrag", "keep_whole", 1, method__label="universalrag (modality routing only)")
    runs = find_runs([tmp_path])
    axes, fixed = split_settings(runs)
    assert "scorer" in axes and "scorer" not in fixed
    md = render_study("main", runs)
    assert "| recomp | f0 |" in md and "| canopy | fθ |" in md
    assert "| universalrag (modality routing only) |  |" in md
    methods = [line.split("|")[1].strip() for line in md.splitlines() if line.startswith("| ") and "|---" not in line]
    assert methods.index("universalrag (modality routing only)") < methods.index("recomp") < methods.index("canopy")


def test_default_encoder_length_leaves_no_forced_parent_child_ties_on_ottqa_gold_tables() -> None:
    """At max_seq_length 256, real OTT-QA test tables gave parent and child the same truncated input
    (a forced tie: the child always "wins"); the configured length must not (experiments/max_seq_length.md)."""
    from transformers import AutoTokenizer

    from canopy_lit.data import load_split
    from canopy_lit.encoders.text import resolve_text_backbone

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        length = compose("evaluate").encoder.max_seq_length
        train_length = compose("train", overrides=["experiment=quickstart"]).encoder.max_seq_length
    GlobalHydra.instance().clear()
    assert train_length == length  # the length is part of the adapter fingerprint: train and evaluate must agree
    root = CONFIGS.parent / "data" / "ottqa"
    bench, qs = load_split("ottqa", str(root / "dev.traced.json"), "test",
                           options={"tables": str(root / "dev_tables_passages.json.gz")})
    tok = AutoTokenizer.from_pretrained(str(resolve_text_backbone("minilm")))
    tables = sorted({i for q in qs[:40] for i in q.gold if bench.items[i].modality.value == "table"})
    ties = {256: 0, length: 0}
    for iid in tables:
        tree = H.build(bench.items[iid])
        ids = tok([H.node_text(tree, v) for v in range(len(tree))], truncation=False)["input_ids"]
        for cap in ties:
            ties[cap] += sum(ids[v][:cap] == ids[c][:cap] for v in range(len(tree)) for c in tree.children[v])
    assert ties[256] > 0  # the sample does hold the 256-token ties (else this test could not fail)
    assert ties[length] == 0, f"max_seq_length={length}: {ties[length]} parent/child pairs with identical inputs"


def test_library_load_adopts_the_adapters_trained_length(tmp_path) -> None:
    """An adapter trained at the configured 512 loads with a bare ``load_encoder("minilm", adapter=DIR)``
    (the length is part of the fingerprint the adapter must match, so another one is refused)."""
    from canopy_lit.encoders import load_encoder

    enc = load_encoder("minilm", max_seq_length=512)
    enc.add_adapter(r=4, alpha=8, dropout=0.0, target_modules=["query"])
    path = enc.save_adapter(tmp_path / "adapter")
    again = load_encoder("minilm", adapter=path)
    assert again.max_seq_length == 512 and again.fingerprint == enc.fingerprint
    with pytest.raises(ValueError, match="adapter was trained on backbone"):
        load_encoder("minilm", adapter=path, max_seq_length=256)  # an explicit other length is still refused
