"""refine=longllmlingua: the config composes, a missing extra is one line, and (slow) the real SmolLM2-135M
compresses real bundled HotpotQA items toward the target rate."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hydra import compose

from canopy_lit.hierarchy import Hierarchy
from canopy_lit.refine import LongLLMLinguaRefiner
from canopy_lit.types import Item

ROOT = Path(__file__).resolve().parents[2]


def test_the_config_composes_in_evaluate_and_the_frontier_study(hydra_ctx) -> None:
    cfg = compose("evaluate", overrides=["refine=longllmlingua", "refine.rate=0.7"])
    assert cfg.refine._target_ == "canopy_lit.refine.LongLLMLinguaRefiner"
    assert (cfg.refine.rate, cfg.refine.model) == (0.7, "smollm2-135m")
    study = compose("evaluate", overrides=["+ablation=frontier", "refine=longllmlingua", "data=nq"])
    assert study.refine._target_ == "canopy_lit.refine.LongLLMLinguaRefiner" and study.mode == "evidence"


def test_a_missing_extra_is_one_line_naming_it(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "llmlingua", None)  # import llmlingua -> ImportError
    with pytest.raises(ImportError) as err:
        LongLLMLinguaRefiner()
    assert "\n" not in str(err.value) and "pip install 'canopy-lit[lingua]'" in str(err.value)


def test_a_bad_rate_names_its_key() -> None:
    pytest.importorskip("llmlingua")
    with pytest.raises(ValueError, match="refine.rate"):
        LongLLMLinguaRefiner(rate=1.5)


@pytest.mark.slow
def test_real_smollm2_compresses_bundled_hotpotqa_toward_the_rate(monkeypatch) -> None:
    """~1 min on one core (model load ~30 s): lower rates keep fewer tokens, heads pass through."""
    pytest.importorskip("llmlingua")
    pytest.importorskip("gguf")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from canopy_lit.assets import AssetError, resolve

    try:
        resolve("smollm2-135m")
    except AssetError as err:
        pytest.skip(f"SmolLM2 asset not available: {err}")
    h = Hierarchy(2)
    data = json.loads((ROOT / "data" / "hotpotqa" / "hotpot_dev_distractor_100.json").read_text())[:2]
    shares = {}
    for rate in (0.3, 0.8):
        r = LongLLMLinguaRefiner(rate=rate)
        assert r.label == "LongLLMLingua (SmolLM2-135M)"
        before = after = 0
        for q in data:
            trees = [h.build(Item(f"hotpotqa:{t}", "text", title=t, sentences=s)) for t, s in q["context"][:5]]
            blocks = r.compress(q["question"], trees, r(trees), h)
            assert len(blocks) == len(trees) and any(b is not None for b in blocks)
            for tree, block in zip(trees, blocks, strict=True):
                whole = h.evidence_text(tree, [0])
                before += r.compressor.tokens(whole)
                if block is not None:
                    assert block.startswith(f"{tree.item.title}: ")  # the head passes through
                    after += r.compressor.tokens(block)
        shares[rate] = after / before
    assert shares[0.3] < shares[0.8] <= 1.0
    assert shares[0.3] < 0.75
