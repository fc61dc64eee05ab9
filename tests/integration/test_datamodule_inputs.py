"""Training renders and tokenises nodes exactly as inference does, and tokenises each text once per dataset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from canopy_lit.data import load_benchmark, split_questions
from canopy_lit.data.datamodule import PreferenceDataModule
from canopy_lit.data.examples import render_instance
from canopy_lit.encoders import load_encoder
from canopy_lit.hierarchy import Frame, Hierarchy, NodeInput, VideoTreeBuilder
from canopy_lit.scoring.node_cache import NodeEmbeddingCache
from canopy_lit.supervision import instances_for, training_instances
from canopy_lit.types import Item, Modality, VideoRef


class RecordingEncoder:
    """Hand-made stand-in for the inference side: records the node inputs the node cache asks to encode."""

    dim = 4
    fingerprint = "recording"

    def __init__(self) -> None:
        self.seen: list = []

    def encode_nodes(self, inputs, batch_size=None):
        self.seen.extend(inputs)
        return np.zeros((len(inputs), self.dim), np.float32)


def frame_label(frame: Frame) -> str:
    """Hand-made describer: a deterministic text per frame (the CPU visual path's role)."""
    return f"scene@{frame.t:.0f}s"


def _inference_inputs(hier: Hierarchy, tree) -> list:
    enc = RecordingEncoder()
    NodeEmbeddingCache(enc, hier).embed_tree(tree)
    return enc.seen


def test_text_nodes_match_inference_inputs() -> None:
    bench = load_benchmark("hotpotqa")
    hier = Hierarchy(2)
    inst = training_instances(split_questions(bench, "train")[:3], bench.items, hier)[0]
    ex = render_instance(inst, hier, 0)
    seen = _inference_inputs(hier, inst.tree)
    for n, x in zip([inst.node, *inst.tree.children[inst.node]], ex.inputs, strict=True):
        assert x == seen[n] == hier.node_input(inst.tree, n)


def test_video_nodes_carry_frames_and_describer_text(media_dir: Path) -> None:
    """`tree=described`-style video nodes: training gets the frames and describer text, not "title [mm:ss]"."""
    hier = Hierarchy(2, [VideoTreeBuilder(clip_seconds=10.0, frame_interval=5.0, describer=frame_label)])
    item = Item(
        "vid",
        Modality.VIDEO,
        title="bunny",
        video=VideoRef(str(media_dir / "video" / "bigbuckbunny.mp4"), 0.0, 40.0),
    )
    tree = hier.build(item)
    inst = instances_for("q", "what happens?", tree, [0])[0]  # root: partly gold
    ex = render_instance(inst, hier, 0)
    seen = _inference_inputs(hier, tree)
    for n, x in zip([inst.node, *tree.children[inst.node]], ex.inputs, strict=True):
        assert x == seen[n]
        assert x.frames and "scene@" in x.text
    # the datamodule routes visual nodes to the encoder's own tokenizer (frames included), not the text cache
    calls = []
    dm = PreferenceDataModule.from_instances({"train": [inst]}, ["lvbench"], tree=hier)
    dm.set_tokenizer(
        lambda xs: calls.append(list(xs)) or {"input_ids": torch.zeros(len(xs), 1, dtype=torch.long)}
    )
    dm.collate(dm.examples["train"])
    assert any(isinstance(x, NodeInput) and x.frames for call in calls for x in call)


@pytest.fixture(scope="module")
def minilm():
    return load_encoder("minilm", max_seq_length=64)


def test_cached_tokens_equal_per_batch_tokenisation(minilm) -> None:
    bench = load_benchmark("nq")
    insts = training_instances(split_questions(bench, "train")[:8], bench.items, Hierarchy(2))
    dm = PreferenceDataModule.from_instances({"train": insts}, ["nq"], batch_size=8)
    calls = []

    def tokenize(xs):
        calls.append(len(xs))
        return minilm.tokenize(xs)

    dm.set_tokenizer(tokenize)
    assert calls  # the whole dataset was tokenised up front
    n_setup = len(calls)
    for b in range(0, len(dm.examples["train"]), 8):
        batch = dm.collate(dm.examples["train"][b : b + 8])
        want_nodes = minilm.tokenize(batch.node_texts)
        want_queries = minilm.tokenize(batch.query_texts)
        for key in want_nodes:
            assert torch.equal(batch.node_tokens[key], want_nodes[key]), key
            assert torch.equal(batch.query_tokens[key], want_queries[key]), key
    assert len(calls) == n_setup  # collate only padded cached ids


def test_hydra_tree_reaches_the_datamodule() -> None:
    """`datamodule.tree: ${tree}`: the run's one Hierarchy (its branching, its builders) renders training nodes."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.utils import instantiate

    configs = Path(__file__).resolve().parents[2] / "configs"
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(configs), version_base="1.3"):
        cfg = compose("train", overrides=["tree.branching=3", "datamodule.benchmarks=[hotpotqa]"])
    dm = instantiate(cfg.datamodule, _convert_="all")
    assert isinstance(dm.hierarchy, Hierarchy) and dm.hierarchy.branching == 3
    with pytest.raises(ValueError, match="tree.branching"):
        PreferenceDataModule(["hotpotqa"], tree=Hierarchy(3), branching=2)
