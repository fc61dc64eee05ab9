"""RECOMP as configured (``method=recomp``): its own f0 scorer even with CANOPY's adapter loaded, and
no table-aggregation call, on real TAT-QA questions with MiniLM and SmolLM2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from canopy_lit.encoders import load_encoder
from canopy_lit.refine import ExtractiveRefiner
from canopy_lit.scoring.scorers import FrozenEncoderView, NodeScorer
from canopy_lit.types import Modality

ROOT = Path(__file__).resolve().parents[2]


def configured_length() -> int:
    """``encoder.max_seq_length`` of the default config (part of the fingerprint an adapter must match)."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        length = int(compose("evaluate").encoder.max_seq_length)
    GlobalHydra.instance().clear()
    return length


@pytest.fixture(scope="module")
def adapter_dir(tmp_path_factory) -> Path:
    """A MiniLM LoRA adapter moved off its zero init (stands in for CANOPY's trained fθ)."""
    torch.manual_seed(0)
    enc = load_encoder("minilm", max_seq_length=configured_length())
    enc.add_adapter(r=8, alpha=16, dropout=0.0, target_modules=["query", "value"])
    with torch.no_grad():
        for name, p in enc.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    return enc.save_adapter(tmp_path_factory.mktemp("adapter") / "adapter")


def recomp_cfg(adapter: Path, tmp: Path, *extra: str):
    from canopy_lit.assets import AssetError, resolve

    try:
        resolve("smollm2-135m")
    except AssetError as err:
        pytest.skip(f"smollm2-135m asset unavailable: {err}")
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(
            "evaluate",
            overrides=[
                "method=recomp",
                "data=tatqa",
                "data.split=test",
                "llm=llamacpp_smollm2",
                "llm.n_threads=1",
                "retriever=candidates",
                "retrieval.k=5",
                f"encoder.adapter={adapter}",
                f"retrieval.node_cache_dir={tmp / 'nodes'}",
                *extra,
            ],
        )
    GlobalHydra.instance().clear()
    OmegaConf.update(cfg, "paths.root_dir", str(ROOT), force_add=True)
    OmegaConf.update(cfg, "paths.data_dir", str(ROOT / "data"), force_add=True)
    return cfg


@pytest.fixture(scope="module")
def tatqa():
    """TAT-QA test questions whose delivered items include a table (every TAT-QA document has one)."""
    from canopy_lit.data import load_split

    bench, qs = load_split("tatqa", str(ROOT / "data/tatqa/tatqa_dataset_dev.json"), "test")
    with_table = [q for q in qs if any(bench.items[i].modality == Modality.TABLE for i in bench.candidates[q.id])]
    return bench, with_table[:2]


def test_recomp_scores_are_f0_with_an_adapter_loaded_and_no_aggregation_call(adapter_dir, tatqa, tmp_path) -> None:
    from canopy_lit.pipeline.build import build_loop

    cfg = recomp_cfg(adapter_dir, tmp_path)
    assert cfg.loop.aggregation_check is False and cfg.scorer.frozen is True
    bench, questions = tatqa
    assert len(questions) == 2
    runner = build_loop(cfg, bench)
    loop = runner.loop
    assert isinstance(loop.refiner, ExtractiveRefiner) and loop.aggregation is None

    # The loop's node scorer is f0 on both sides although the run's encoder carries the adapter.
    encoder = loop.scorer.encoder.encoder
    assert encoder.has_adapter and isinstance(loop.scorer.encoder, FrozenEncoderView)
    trees = [loop.hierarchy.build(bench.items[i]) for i in bench.candidates[questions[0].id][:3]]
    got = loop.scorer.score(questions[0].text, trees)
    frozen = load_encoder("minilm", max_seq_length=configured_length())  # f0: the backbone, no adapter
    want = NodeScorer(frozen, loop.hierarchy).score(questions[0].text, trees)
    ftheta = NodeScorer(encoder, loop.hierarchy).score(questions[0].text, trees)
    for g, w, f in zip(got, want, ftheta, strict=True):
        np.testing.assert_allclose(g, w, atol=1e-5)
        assert np.abs(f - w).max() > 1e-3  # the adapter does change node scores: the check above can fail

    for q in questions:  # tables among the retrieved items, yet the reader is the only LLM call
        rec = runner.run(q)
        assert any(k.modality == "table" for rd in rec.rounds for k in rd.kept)
        assert rec.llm_calls == {"reader": 1}, rec.llm_calls
        kept_leaves = sum(e - s for rd in rec.rounds for k in rd.kept for s, e in k.leaf_ranges)
        assert kept_leaves == 5  # top-m leaves across the round's items (m = 5)
        assert not any(k.aggregation for rd in rec.rounds for k in rd.kept)


def test_recomp_ftheta_scorer_without_adapter_is_an_error(tatqa, tmp_path) -> None:
    from canopy_lit.pipeline.build import build_loop

    cfg = recomp_cfg(Path("null"), tmp_path, "scorer=ftheta")
    OmegaConf.update(cfg, "encoder.adapter", None)
    with pytest.raises(ValueError, match="scorer=ftheta"):
        build_loop(cfg, tatqa[0])
