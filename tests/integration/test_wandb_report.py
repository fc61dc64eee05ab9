"""W&B reporting in offline mode: metrics, study tables as W&B tables, plots as images."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from runfolders import make_multirun  # noqa: E402

pytest.importorskip("wandb")

from canopy_lit.report.plots import make_all  # noqa: E402
from canopy_lit.report.runs import find_runs  # noqa: E402
from canopy_lit.report.wandb import log_eval_run, log_report, wandb_kwargs  # noqa: E402


@pytest.fixture
def offline(monkeypatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    return tmp_path


def test_report_logs_tables_plots_and_metrics_offline(offline: Path) -> None:
    parent = make_multirun(
        offline / "k",
        [dict(method="canopy", name="hotpotqa", k=k, n=2) for k in (2, 3)],
        study="k",
    )
    runs = find_runs([parent])
    images = make_all(runs, offline / "img")
    run_dir = Path(log_report(runs, images, project="canopy-lit-test", dir=offline))
    files = {p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*") if p.is_file()}
    assert any(f.endswith(".table.json") and "tables/k/qa" in f for f in files)
    assert any(f.startswith("files/media/images/plots/quality_vs_tokens") for f in files)
    table = next(p for p in run_dir.rglob("*.table.json") if "/qa_wide" not in p.as_posix() and "/qa_" in p.as_posix())
    data = json.loads(table.read_text())
    assert "f1" in data["columns"] and len(data["data"]) == 2
    assert any(p.suffix == ".wandb" for p in run_dir.iterdir())  # the offline run file for `wandb sync`

    # one evaluation run folder, as evaluate.py does when a wandb logger is configured
    cfg = {"wandb": {"_target_": "lightning.pytorch.loggers.WandbLogger", "project": "p", "save_dir": str(offline),
                     "offline": True}}
    one = Path(log_eval_run(runs[0].path, cfg))
    preds = next(one.rglob("predictions*.table.json"))
    assert len(json.loads(preds.read_text())["data"]) == 2


def test_wandb_kwargs_from_logger_configs() -> None:
    assert wandb_kwargs(None) is None and wandb_kwargs({}) is None
    assert wandb_kwargs({"csv": {"_target_": "lightning.pytorch.loggers.CSVLogger"}}) is None
    kw = wandb_kwargs({"_target_": "lightning.pytorch.loggers.WandbLogger", "project": "p", "save_dir": "d",
                       "offline": True, "tags": ["a"]})
    assert kw == {"project": "p", "dir": "d", "mode": "offline", "tags": ["a"]}
