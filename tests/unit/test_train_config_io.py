"""Run-dir writes are atomic, and epoch-end checkpoints are rewritten so a resume does not lose an epoch
(hand-made loop-state fixtures, no training)."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

from canopy_lit.io import atomic_dir, atomic_write_text
from canopy_lit.training.callbacks import normalize_epoch_end


def test_atomic_write_text_replaces_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "metrics.json"
    path.write_text("old")
    atomic_write_text(path, "new")
    assert path.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


def test_atomic_write_text_failure_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "metrics.json"
    path.write_text("old")

    def boom(*args: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk gone"):
        atomic_write_text(path, "new")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


def test_atomic_dir_replaces_on_success_and_keeps_old_on_error(tmp_path: Path) -> None:
    target = tmp_path / "adapter"
    target.mkdir()
    (target / "w.bin").write_text("v1")
    with pytest.raises(RuntimeError), atomic_dir(target) as tmp:
        (tmp / "w.bin").write_text("half")
        raise RuntimeError("killed mid-save")
    assert (target / "w.bin").read_text() == "v1"
    with atomic_dir(target) as tmp:
        (tmp / "w.bin").write_text("v2")
        assert (target / "w.bin").read_text() != "v2"  # nothing visible before the rename
    assert (target / "w.bin").read_text() == "v2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter"]


def _loops(ep: tuple[int, int, int, int], batches: int) -> dict:
    prog = {"ready": batches, "started": batches, "processed": batches, "completed": batches}
    ready, started, processed, completed = ep
    epoch = {"ready": ready, "started": started, "processed": processed, "completed": completed}
    return {"loops": {"fit_loop": {
        "epoch_progress": {"total": dict(epoch), "current": dict(epoch)},
        "epoch_loop.batch_progress": {"total": dict(prog), "current": dict(prog), "is_last_batch": True},
        "epoch_loop.scheduler_progress": {"total": {"ready": batches, "completed": batches}, "current": {"ready": batches, "completed": batches}},
        "epoch_loop.automatic_optimization.optim_progress": {"optimizer": {"step": {"total": {"ready": 3, "completed": 3}, "current": {"ready": 3, "completed": 3}}}},
    }}}  # fmt: skip


def test_normalize_epoch_end_marks_the_epoch_finished() -> None:
    # Saved in on_train_epoch_end of epoch 0 (3 batches): processed 1, completed 0 (what resumed to step 6 of 9).
    ckpt = _loops((1, 1, 1, 0), 3)
    assert normalize_epoch_end(ckpt)
    fit = ckpt["loops"]["fit_loop"]
    assert fit["epoch_progress"]["total"]["completed"] == fit["epoch_progress"]["current"]["completed"] == 1
    assert fit["epoch_loop.batch_progress"]["current"] == {"ready": 0, "started": 0, "processed": 0, "completed": 0}
    assert fit["epoch_loop.batch_progress"]["total"]["completed"] == 3  # totals (global counts) kept
    assert not fit["epoch_loop.batch_progress"]["is_last_batch"]
    assert fit["epoch_loop.automatic_optimization.optim_progress"]["optimizer"]["step"]["current"]["completed"] == 0


@pytest.mark.parametrize("ep", [(2, 2, 1, 1), (1, 1, 1, 1)], ids=["mid_epoch", "finished"])
def test_normalize_epoch_end_leaves_other_states(ep: tuple[int, int, int, int]) -> None:
    ckpt = _loops(ep, 2)
    before = copy.deepcopy(ckpt)
    assert not normalize_epoch_end(ckpt)
    assert ckpt == before
    assert not normalize_epoch_end({"state_dict": {}})
