"""The training bar's total is the run's real number of steps (max_steps), not the epoch's batch count."""

from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
from torch.utils.data import DataLoader

from canopy_lit.training.callbacks import StepsRichProgressBar


class _Recording(StepsRichProgressBar):
    def __init__(self) -> None:
        super().__init__()
        self.totals: list[float] = []

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        self.totals.append(self.total_train_batches)


class _Model(BoringModel):
    def train_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 40), batch_size=2)  # 20 batches an epoch


def _fit(max_steps: int, max_epochs: int) -> list[float]:
    torch.manual_seed(0)
    bar = _Recording()
    trainer = L.Trainer(max_steps=max_steps, max_epochs=max_epochs, callbacks=[bar], logger=False,
                        enable_checkpointing=False, limit_val_batches=0, accelerator="cpu")
    trainer.fit(_Model())
    assert trainer.global_step == max_steps
    return bar.totals


def test_total_is_max_steps_inside_one_epoch() -> None:
    # Lightning's own bar shows 5/20 here (the quickstart showed 60/425 for an 80-step run).
    assert _fit(max_steps=5, max_epochs=1) == [5]


def test_total_over_epochs_is_the_steps_left_in_each() -> None:
    assert _fit(max_steps=25, max_epochs=2) == [20, 5]
