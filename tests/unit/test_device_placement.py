"""Device-correct training code: no tensor built without its inputs' device; encoders load on the host.

The static check runs on CPU in the default tier (the `embed_sorted` crash of "Training at scale" was
`torch.arange(n)` next to a CUDA index tensor); the CUDA test runs where a GPU exists.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import pytest
import torch

from canopy_lit.encoders.base import NodeEncoder
from canopy_lit.encoders.qwen3vl import Qwen3VLEncoder
from canopy_lit.encoders.text import TextEncoder
from canopy_lit.training.losses import pairwise_ranking
from canopy_lit.training.metrics import DecisionAccuracy, pairs_hold
from canopy_lit.training.module import NodeEncoderModule

ROOT = Path(__file__).resolve().parents[2]
FACTORIES = {
    "arange",
    "zeros",
    "ones",
    "empty",
    "full",
    "tensor",
    "eye",
    "rand",
    "randn",
    "randint",
    "linspace",
}

# Code that runs on the training device every step.
DEVICE_CODE = [
    NodeEncoder.embed_sorted,
    TextEncoder.embed,
    Qwen3VLEncoder.embed,
    NodeEncoderModule,
    DecisionAccuracy.update,
    DecisionAccuracy.compute,
    pairs_hold,
    pairwise_ranking,
]


def factory_calls_without_device(obj) -> list[str]:
    """``torch.<factory>(...)`` calls in ``obj``'s source that pass no ``device=`` (``*_like`` are fine)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
    bad = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in FACTORIES
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "torch"
            and not any(k.arg == "device" for k in node.keywords)
        ):
            bad.append(
                f"{getattr(obj, '__qualname__', obj.__name__)}: line {node.lineno}: {ast.unparse(node)}"
            )
    return bad


def test_the_guard_catches_the_old_embed_sorted_line() -> None:
    def old(order, n):
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(n)
        return inverse

    assert factory_calls_without_device(old) == [
        "test_the_guard_catches_the_old_embed_sorted_line.<locals>.old: line 3: torch.arange(n)"
    ]


@pytest.mark.parametrize(
    "obj", DEVICE_CODE, ids=lambda o: getattr(o, "__qualname__", getattr(o, "__name__", ""))
)
def test_no_device_less_tensor_factories(obj) -> None:
    assert factory_calls_without_device(obj) == []


def test_encoder_configs_load_on_the_host() -> None:
    """Under DDP every rank would otherwise put the backbone on cuda:0 before Lightning moves it."""
    import yaml

    for path in sorted((ROOT / "configs" / "encoder").glob("*.yaml")):
        assert yaml.safe_load(path.read_text()).get("device", "cpu") == "cpu", path.name
    assert 'instantiate(cfg.encoder, device="cpu")' in (ROOT / "canopy_lit" / "train.py").read_text()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_embed_sorted_on_cuda() -> None:
    from canopy_lit.encoders import load_encoder

    enc = load_encoder("minilm", max_seq_length=32, device="cuda")
    tokens = {k: v.cuda() for k, v in enc.tokenize([f"node {i} " * (i + 1) for i in range(20)]).items()}
    out = enc.embed_sorted(tokens, chunk_size=4)
    ref = enc.embed(tokens)
    assert out.device.type == "cuda" and torch.allclose(out, ref, atol=1e-5)
