"""Evaluate CANOPY, its baselines and ablations: ``python evaluate.py experiment=NAME [overrides]``.

Writes predictions.jsonl (resumable), metrics.json and table.md into the run dir.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from canopy_lit.eval.evaluate import evaluate


@hydra.main(version_base="1.3", config_path="configs", config_name="evaluate")
def main(cfg: DictConfig) -> float | None:
    metrics = evaluate(cfg)
    # A scalar for Hydra sweepers: answer F1 for QA runs, decision accuracy for probes.
    return metrics.get("eval/f1", metrics.get("probe/decision_accuracy"))


if __name__ == "__main__":
    main()
