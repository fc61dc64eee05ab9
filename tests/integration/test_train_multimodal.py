"""Multimodal training end to end: fit + validate + test with image and video nodes in every split.

Qwen3-VL (the paper's encoder) is the tiny random-weight model of ``test_encoder_qwen3vl`` (its real
weights cannot be had here), so those test names say random weights; the CPU visual path (frames
described as text by EfficientNet-Lite0, scored by MiniLM) runs on real weights. Data: the bundled
LVBench-format clips (``data/fixtures/lvbench_bundled_clips.json``, videos under ``data/media``) with
untitled video items, as the LVBench reader makes them, plus bundled images and another clip attached
as hard negatives, so val / test batches hold image nodes and video nodes of several files.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra import compose
from hydra.utils import instantiate
from test_encoder_qwen3vl import _image_node, _video_tree, _visual_encoder

from canopy_lit.data import load_benchmark
from canopy_lit.data.collate import PreferenceCollate
from canopy_lit.data.datamodule import PreferenceDataModule
from canopy_lit.data.examples import Example
from canopy_lit.data.readers._gold import clip_leaves
from canopy_lit.encoders import NodeEncoder, load_encoder
from canopy_lit.hierarchy import Hierarchy, NodeInput, VideoTreeBuilder
from canopy_lit.supervision import Instance, PairKind, instances_for
from canopy_lit.training import NodeEncoderModule, PreferenceBatch
from canopy_lit.training.metrics import DecisionAccuracy
from canopy_lit.types import Item, Modality, VideoRef

# Two test batches, so the eval embedding cache serves nodes of the first batch in the second.
EVAL_BATCH = 2


def _shared_lora_module(encoder: NodeEncoder) -> NodeEncoderModule:
    """``model`` of ``experiment=shared_lora`` (LoRA 8 / 16 / 0.05, lr 5e-5, λ 20) on ``encoder`` (needs ``hydra_ctx``)."""
    cfg = compose("train", overrides=["experiment=shared_lora"])
    torch.manual_seed(0)
    return instantiate(cfg.model, encoder=encoder, _convert_="all")


def _image_items(data_dir: Path) -> list[Item]:
    records = json.loads((data_dir / "fixtures" / "bundled_image_items.json").read_text())
    return [Item(r["id"], Modality.IMAGE, title=r["title"], image=str(data_dir / r["image"])) for r in records[:2]]


def _splits(data_dir: Path, hierarchy: Hierarchy) -> dict[str, list[Instance]]:
    """Instances of the bundled tree.avi questions on 10-s clips, gold from their ``time_reference``; every
    instance gets two image nodes and the untitled bikes.mp4 root as hard negatives.

    (tree.avi and bikes.mp4 decode in ~10-90 ms a frame, vtest.avi in ~300 ms.) bikes' root renders as
    ``[00:00-00:10]``, the text of tree.avi's first clip.
    """
    fixture = data_dir / "fixtures" / "lvbench_bundled_clips.json"
    bench = load_benchmark("lvbench", str(fixture), video_root=str(data_dir))
    windows = {r["index"]: r["time_reference"] for r in json.loads(fixture.read_text())}
    tree = hierarchy.build(bench.items["lvbench:tree"])
    insts = [
        inst
        for q in bench.questions
        if "lvbench:tree" in q.gold
        for inst in instances_for(q.id, q.text, tree, clip_leaves(tree.leaves, *windows[q.id]), "lvbench")
    ]
    negatives = [(hierarchy.build(item), 0) for item in [*_image_items(data_dir), bench.items["lvbench:bikes"]]]
    for inst in insts:
        inst.hard_negatives = list(negatives)
    assert [i.question_id for i in insts] == ["bundled_tree_01", "bundled_tree_02", "bundled_tree_02"]
    return {"train": insts, "val": insts[1:], "test": insts}


def _no_cache_accuracy(module: NodeEncoderModule, dm: PreferenceDataModule) -> dict[str, float]:
    """Test decision accuracy of fθ and f0 with every batch's nodes encoded afresh (no eval cache)."""
    metrics = {name: DecisionAccuracy(dm.benchmark_names) for name in ("ft", "f0")}
    module.eval()
    with torch.no_grad():
        for batch in dm.test_dataloader():
            for name, metric in metrics.items():
                win, lose = module.pair_scores(batch, f0=name == "f0")
                b = batch
                metric.update(win, lose, b.mask, b.tie_ok, b.benchmark, b.depth, b.stop, b.in_tree)
    return {name: float(metric.compute()["decision_accuracy"]) for name, metric in metrics.items()}


def _fit_validate_test(module: NodeEncoderModule, dm: PreferenceDataModule) -> tuple[dict, dict]:
    trainer = L.Trainer(
        max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(module, datamodule=dm)
    (val,) = trainer.validate(module, datamodule=dm, verbose=False)
    trainer.test(module, datamodule=dm, verbose=False)
    return val, module.test_results


def _check_results(module: NodeEncoderModule, dm: PreferenceDataModule, val: dict, test: dict) -> None:
    assert 0.0 <= val["val/decision_accuracy"] <= 1.0 and "val/decision_accuracy_f0" in val
    assert all(math.isfinite(v) for v in test.values())
    assert test["test/n"] == len(dm.examples["test"])
    # The cached eval path scores exactly as encoding every batch afresh does.
    fresh = _no_cache_accuracy(module, dm)
    assert (test["test/decision_accuracy"], test["test/decision_accuracy_f0"]) == (fresh["ft"], fresh["f0"])


def test_random_weights_select_inputs_takes_each_inputs_own_pixel_patches(media_dir: Path) -> None:
    """Qwen3-VL's pixel_values has one row per patch, image_grid_thw one per image: rows of inputs carry theirs."""
    enc = _visual_encoder()
    h, tree = _video_tree(media_dir)
    image, root, leaf = _image_node(media_dir), h.node_input(tree, 0), h.node_input(tree, 2)
    inputs = [image, NodeInput("plain text node"), root, leaf]
    batch = enc.tokenize(inputs)
    assert batch["pixel_values"].shape[0] > len(inputs)
    for rows in ([3, 0], [2], [1], [0, 1, 2, 3]):
        got = enc.select_inputs(batch, rows)
        want = enc.tokenize([inputs[r] for r in rows])
        width = want["input_ids"].shape[1]
        assert torch.equal(got["input_ids"][:, :width], want["input_ids"]), rows
        for key in ("pixel_values", "image_grid_thw"):  # text-only rows: no pixel tensors at all
            assert (key in got) == (key in want), (rows, key)
            if key in want:
                assert torch.equal(got[key], want[key]), (rows, key)
        assert torch.allclose(enc.embed(got), enc.embed(want), atol=1e-5), rows


def test_random_weights_eval_cache_keeps_untitled_clips_of_two_videos_apart(media_dir: Path) -> None:
    """Untitled clips of two videos share the text ``[00:00-00:02]``; each keeps its own eval embedding,
    and cached rows (across batches) equal encoding the batch afresh."""
    module = NodeEncoderModule(_visual_encoder(), lora_dropout=0.0)
    h = Hierarchy(2, [VideoTreeBuilder(clip_seconds=2.0, frame_interval=1.0)])

    def clip(name: str) -> NodeInput:
        item = Item(name, Modality.VIDEO, video=VideoRef(str(media_dir / "video" / name), 0.0, 2.0))
        return h.node_input(h.build(item), 0)

    bikes, vtest, image = clip("bikes.mp4"), clip("vtest.avi"), _image_node(media_dir)
    assert bikes.text == vtest.text == "[00:00-00:02]" and bikes.frames != vtest.frames
    collate = PreferenceCollate(module.encoder.tokenize)

    def batch_of(*inputs: NodeInput) -> PreferenceBatch:
        kinds = [PairKind.PARENT_OVER_CHILD]
        return collate([Example("what is shown?", list(inputs), [(0, 1)], kinds, 0, 0)])

    first, second = batch_of(image, bikes), batch_of(vtest, image, bikes)
    module.eval()
    cache: dict = {}
    with torch.no_grad():
        module.node_embeddings(first, cache=cache)
        cached = module.node_embeddings(second, cache=cache)  # image and bikes from the cache, vtest encoded alone
        fresh = module.node_embeddings(second)
    assert len(cache) == 3
    assert torch.allclose(cached, fresh, atol=1e-5)
    assert (cached[0] - cached[2]).abs().max() > 1e-3  # vtest's clip is not bikes' clip


def test_random_weights_shared_lora_fits_validates_and_tests_on_image_and_video_nodes(
    data_dir: Path, hydra_ctx: Any
) -> None:
    module = _shared_lora_module(_visual_encoder())
    hierarchy = Hierarchy(2, [VideoTreeBuilder(clip_seconds=10.0, frame_interval=5.0)])
    dm = PreferenceDataModule.from_instances(
        _splits(data_dir, hierarchy), ["lvbench"], tree=hierarchy, batch_size=EVAL_BATCH
    )
    dm.set_tokenizer(module.encoder.tokenize)
    lora_b = {n: p.detach().clone() for n, p in module.named_parameters() if "lora_B" in n}
    val, test = _fit_validate_test(module, dm)
    assert any(not torch.equal(p, lora_b[n]) for n, p in module.named_parameters() if n in lora_b)
    batches = list(dm.test_dataloader())
    assert len(batches) == 2 and all("pixel_values" in b.node_tokens for b in batches)
    assert len(batches[1].node_keys) > len(set(batches[1].node_texts))  # tree's and bikes' first 10 s
    _check_results(module, dm, val, test)


def test_described_clips_fit_validate_and_test_on_the_cpu_visual_path(data_dir: Path, hydra_ctx: Any) -> None:
    """``tree=described`` (OCR off for speed): frames and images reach MiniLM as label text."""
    cfg = compose(
        "train",
        overrides=[
            "tree=described",
            "tree.builders.0.clip_seconds=10",
            "tree.builders.0.frame_interval=5",
            "tree.builders.0.describer.ocr=false",
            "tree.builders.1.describer.ocr=false",
        ],
    )
    hierarchy = instantiate(cfg.tree, _convert_="all")
    module = _shared_lora_module(load_encoder("minilm", max_seq_length=128))
    dm = PreferenceDataModule.from_instances(
        _splits(data_dir, hierarchy), ["lvbench"], tree=hierarchy, batch_size=EVAL_BATCH
    )
    dm.set_tokenizer(module.encoder.tokenize)
    texts = [x.text for e in dm.examples["test"] for x in e.inputs]
    assert all("labels: " in t for t in texts)
    val, test = _fit_validate_test(module, dm)
    _check_results(module, dm, val, test)

