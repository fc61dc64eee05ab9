"""Encoder configs: each ``configs/encoder/*.yaml`` targets one encoder class whose signature is exactly what
the file may hold, so a key that class does not take is refused when the config is composed, naming the key,
whatever the backbone (a local folder absent from this machine included)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import yaml
from evaluate_runner import ROOT, config_problems
from hydra.utils import get_object

from canopy_lit.encoders.base import NodeEncoder

ENCODER_CONFIGS = sorted((ROOT / "configs" / "encoder").glob("*.yaml"))
QWEN3VL = "canopy_lit.encoders.qwen3vl.Qwen3VLEncoder"


@pytest.mark.parametrize("path", ENCODER_CONFIGS, ids=lambda p: p.stem)
def test_each_encoder_config_targets_a_class_whose_signature_lists_its_keys(path: Path) -> None:
    node = yaml.safe_load(path.read_text(encoding="utf-8"))
    target = get_object(node.pop("_target_"))
    assert isinstance(target, type) and issubclass(target, NodeEncoder), f"{path.name}: {target} is no encoder class"
    params = inspect.signature(target).parameters
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    assert set(node) <= set(params) and {"adapter", "adapter_scale", "device"} <= set(params)


def _encoder_problems(config: str, *overrides: str) -> list[str]:
    return [p for p in config_problems(config, *overrides) if "encoder." in p]


@pytest.mark.parametrize(
    ("config", "overrides", "problem"),
    [
        # the class comes from encoder=, not from the backbone's name: a Qwen3-VL folder elsewhere takes no pooling
        ("evaluate", ["encoder=qwen3vl_embedding_2b", "encoder.backbone=/models/my-qwen3vl-embedder", "+encoder.pooling=cls"],
         f"unknown config key encoder.pooling ({QWEN3VL} takes no such argument)"),
        ("evaluate", ["encoder=mpnet", "+encoder.max_seq_lenght=64"],
         "unknown config key encoder.max_seq_lenght (did you mean encoder.max_seq_length?)"),
        ("evaluate", ["+encoder.max_frames_per_node=4"],
         "unknown config key encoder.max_frames_per_node (canopy_lit.encoders.text.TextEncoder takes no such argument)"),
        ("train", ["experiment=quickstart", "+encoder.adaptor_scale=0.5"],
         "unknown config key encoder.adaptor_scale (did you mean encoder.adapter_scale?)"),
    ],
)  # fmt: skip
def test_an_unknown_encoder_key_is_refused_at_composition_naming_it(
    hydra_ctx, config: str, overrides: list[str], problem: str
) -> None:
    assert _encoder_problems(config, *overrides) == [problem]


def test_a_qwen3vl_folder_this_machine_lacks_is_checked_against_its_own_class(hydra_ctx) -> None:
    """The YAML's keys (torch_dtype, max_frames_per_node) are Qwen3VLEncoder's whatever folder it loads."""
    assert _encoder_problems("evaluate", "encoder=qwen3vl_embedding_2b", "encoder.backbone=/models/my-embedder") == []
