"""``train.py --help`` lists the groups a training run composes, not evaluate.py's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
EVALUATION_ONLY = ("ablation", "method", "refine", "retriever", "retrieval", "llm", "carve", "controller", "variant")


def test_help_shows_training_groups_only_and_every_training_experiment() -> None:
    out = subprocess.run([sys.executable, "train.py", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, check=True).stdout
    groups = dict(re.findall(r"^([a-z_/]+): (.+)$", out.split("== Config ==")[0], re.M))
    assert {"trainer", "encoder", "model", "datamodule", "logger", "debug", "hparams_search"} <= set(groups)
    assert not set(groups) & set(EVALUATION_ONLY), sorted(set(groups) & set(EVALUATION_ONLY))
    # An experiment that touches the trainer, the model or the datamodule is a training preset: it is listed.
    training = sorted(
        p.stem for p in (ROOT / "configs" / "experiment").glob("*.yaml")
        if set(yaml.safe_load(p.read_text(encoding="utf-8")) or {}) & {"trainer", "model", "datamodule"}
    )
    assert groups["experiment"].split(", ") == training
