"""The composed config is printed as a tree when a run starts, secrets redacted, and ``print_config=false``
turns it off (issue 48, item 7)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from hydra import compose
from rich.console import Console

from canopy_lit.config_tree import EVAL_ORDER, TRAIN_ORDER, print_config_tree

ROOT = Path(__file__).resolve().parents[2]


def _printed(cfg, order) -> str:
    out = io.StringIO()
    print_config_tree(cfg, order, Console(file=out, width=200, color_system=None))
    return out.getvalue()


def test_every_group_is_a_branch_in_run_order_and_secrets_are_redacted(hydra_ctx) -> None:
    cfg = compose("evaluate", overrides=["llm=openai", "llm.base_url=http://user:hunter2@127.0.0.1:9/v1"])
    text = _printed(cfg, EVAL_ORDER)
    branches = [line[4:].strip() for line in text.splitlines() if line.startswith(("├── ", "└── "))]
    assert branches[:3] == ["method", "data", "retriever"]
    assert {"llm", "refine", "encoder", "(top level)"} <= set(branches)
    assert "hydra" not in branches and "paths" not in branches
    assert "hunter2" not in text and "127.0.0.1" in text


def test_print_config_false_prints_nothing(hydra_ctx) -> None:
    cfg = compose("train", overrides=["print_config=false"])
    assert _printed(cfg, TRAIN_ORDER) == ""
    assert "datamodule" in _printed(compose("train"), TRAIN_ORDER)


def test_evaluate_prints_the_tree_before_work_and_a_refused_config_prints_none(tmp_path: Path) -> None:
    refused = subprocess.run(
        [sys.executable, "evaluate.py", "retrieval.k=0", f"hydra.run.dir={tmp_path / 'r'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert refused.returncode == 2 and "└── " not in refused.stdout
