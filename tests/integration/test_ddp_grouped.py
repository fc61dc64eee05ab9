"""The distributed path on CPU: real NodeEncoderModule + PreferenceDataModule, 2 gloo processes, grouped batches.

Guards the DDP bugs of "Training at scale": Lightning must not re-wrap the grouped sampler, every
rank gets a disjoint share of the (question, gold item) groups and the same number of batches,
and test counts/accuracies are reduced over the ranks (equal to one process).
"""

from __future__ import annotations

import json
import os
from functools import partial
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch

from canopy_lit.data.datamodule import PreferenceDataModule
from canopy_lit.encoders import load_encoder
from canopy_lit.training import NodeEncoderModule, PreferenceBatch

# A tiny real subset: a few questions of two bundled benchmarks.
OPTIONS = {b: {"max_questions": {"train": 5, "val": 2, "test": 3}} for b in ("hotpotqa", "nq")}


class BatchRecorder(L.Callback):
    """Writes, per rank and stage, the (question, item) of every train / test instance it saw."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.seen: dict[str, list[list[list[str]]]] = {"train": [], "test": []}
        self.batch_types: set[str] = set()  # what the steps receive after Lightning's device transfer

    @staticmethod
    def _ids(batch: PreferenceBatch) -> list[list[str]]:
        return [[q, i] for q, i in zip(batch.question_ids, batch.item_ids, strict=True)]

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.batch_types.add(type(batch).__name__)
        self.seen["train"].append(self._ids(batch))

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        self.batch_types.add(type(batch).__name__)
        self.seen["test"].append(self._ids(batch))

    def _write(self, trainer: L.Trainer, stage: str) -> None:
        # Each fit / test launch forks fresh ranks, so every stage writes its own file.
        types = sorted(self.batch_types)
        record = {"world": trainer.world_size, stage: self.seen[stage], f"{stage}_types": types}
        (self.out / f"{stage}{trainer.global_rank}.json").write_text(json.dumps(record))

    def on_train_end(self, trainer, pl_module) -> None:
        self._write(trainer, "train")

    def on_test_end(self, trainer, pl_module) -> None:
        self._write(trainer, "test")


def _trainer(devices: int, callbacks: list[L.Callback], **kwargs: Any) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu",
        devices=devices,
        # fork: the children inherit the loaded encoder and data (spawn would re-import and re-load both).
        strategy="ddp_fork" if devices > 1 else "auto",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=callbacks,
        **kwargs,
    )


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    out = tmp_path_factory.mktemp("ddp")
    torch.manual_seed(0)
    enc = load_encoder("minilm", max_seq_length=48)
    module = NodeEncoderModule(enc, optimizer=partial(torch.optim.AdamW, lr=1e-3, weight_decay=0.0), lora_target_modules=["query", "value"], lora_layers=[5])
    dm = PreferenceDataModule(["hotpotqa", "nq"], OPTIONS, batch_size=4, group_by_item=True)
    dm.set_tokenizer(enc.tokenize)
    dm.setup("fit")  # the forked ranks inherit the loaded, pre-tokenised examples
    trainer = _trainer(2, [BatchRecorder(out)], max_steps=2, limit_val_batches=1)
    trainer.fit(module, datamodule=dm)
    trainer.test(module, datamodule=dm, verbose=False)
    ranks = [
        {
            **json.loads((out / f"train{r}.json").read_text()),
            **json.loads((out / f"test{r}.json").read_text()),
        }
        for r in range(2)
    ]
    return dm, module, trainer, ranks


def test_ranks_get_disjoint_groups_and_equal_batches(ddp_run) -> None:
    dm, _, _, ranks = ddp_run
    assert [r["world"] for r in ranks] == [2, 2]
    assert all(r[f"{stage}_types"] == ["PreferenceBatch"] for r in ranks for stage in ("train", "test"))
    train = [[tuple(x) for b in r["train"] for x in b] for r in ranks]
    assert len(ranks[0]["train"]) == len(ranks[1]["train"]) == 2  # max_steps batches each, in step
    assert train[0] and train[1]
    # no (question, item) group is split over ranks, so no instance is seen twice
    assert not set(train[0]) & set(train[1])
    # every test instance is seen exactly once over both ranks, and both ranks ran the same number of batches
    test = [tuple(x) for r in ranks for b in r["test"] for x in b]
    assert len(test) == len(dm.examples["test"])
    assert sorted(test) == sorted((e.question_id, e.item_id) for e in dm.examples["test"])
    assert len(ranks[0]["test"]) == len(ranks[1]["test"])


def test_reduced_test_counts_equal_single_process(ddp_run) -> None:
    dm, module, trainer, ranks = ddp_run
    ex = dm.examples["test"]
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    assert metrics["test/n"] == len(ex)
    for b_id, name in enumerate(dm.benchmark_names):
        assert metrics[f"test/{name}/n"] == sum(e.benchmark == b_id for e in ex)
    for d in {e.depth for e in ex}:
        assert metrics[f"test/depth{d}/n"] == sum(e.depth == d for e in ex)
    assert metrics["test/n/stop"] + metrics["test/n/descend"] == len(ex)
    # each rank alone saw fewer: the counts above really are reduced
    assert all(0 < sum(len(b) for b in r["test"]) < len(ex) for r in ranks)

    # f0 does not depend on the adapter: the reduced f0 accuracy equals one process's on the same data
    single = _trainer(1, [])
    single.test(module, datamodule=dm, verbose=False)
    assert module.test_results["test/n"] == len(ex)
    for key in (
        "test/decision_accuracy_f0",
        "test/hotpotqa/decision_accuracy_f0",
        "test/nq/decision_accuracy_f0",
    ):
        assert metrics[key] == pytest.approx(module.test_results[key], abs=1e-6), key
